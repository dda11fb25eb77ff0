#!/usr/bin/env node
// The installed `portcullis` command: the compiled CLI (npm ci builds dist/; `npm run build` rebuilds it).
const { runCli } = await import('../dist/cli.js')
process.exitCode = await runCli(process.argv.slice(2))

#!/usr/bin/env node
// The installed `portcullis` command: runs the TypeScript CLI through tsx.
import { register } from 'tsx/esm/api'

register()
const { runCli } = await import('../src/cli.ts')
process.exitCode = await runCli(process.argv.slice(2))

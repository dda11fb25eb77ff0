// The `portcullis` command (src/cli/: the dispatcher in index.ts, one file per command group).
// This file is its entry point: `node --import tsx src/cli.ts ...` and dist/cli.js, which
// bin/portcullis.mjs imports, and the module tests import runCli from.
import { runCli } from './cli/index.ts'

export { runCli, type CliIo } from './cli/index.ts'

const isEntry = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (isEntry) process.exitCode = await runCli(process.argv.slice(2))

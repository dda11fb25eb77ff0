import { createReadStream, existsSync, statSync } from 'node:fs'
import { CLI_CONTEXT } from '../audit/events.ts'
import { RolesService } from '../authz/roles.ts'
import { loadConfig } from '../config.ts'
import { convertedLines, SOURCES, type Source } from '../imports/converters.ts'
import { importLines, jsonLines, progressLine } from '../imports/run.ts'
import { ImportService } from '../imports/service.ts'
import { writeOnlyOutbox } from '../webhooks/events.ts'
import { stdio, UsageError, type Command } from './command.ts'
import { sealerFor, withDatabase } from './database.ts'

/** Accounts moved in from another system with their password hashes (docs/migrating.md); listed with the users commands. */
export const importCommand: Command = {
  name: 'users import',
  args: 'FILE|- [--dry-run] [--events] [--from auth0|firebase|supabase|cognito]',
  summary: 'import accounts from JSON Lines (or another system\'s export) with their password hashes; existing addresses are skipped',
  help: [
    'FILE is JSON Lines, one account a line (docs/migrating.md); - reads standard input.',
    '--dry-run checks every line and what exists, and writes nothing.',
    '--events writes a user.created webhook event for each account (off by default).',
    '--from reads that system\'s own export and converts it (docs/migrating.md has each recipe).',
    'Each line not imported is reported by its number and reason. Exit 0 when every line was imported',
    'or was already here (email_exists); 1 when any line was refused.',
  ],
  options: { 'dry-run': { type: 'boolean' }, events: { type: 'boolean' }, from: { type: 'string' } },
  positionals: 1,
  run: (context) => {
    const from = context.values.from as string | undefined
    if (from !== undefined && !SOURCES.includes(from as Source)) throw new UsageError(`--from must be one of ${SOURCES.join(', ')}`, context.usage)
    const file = context.positionals[0]!
    if (file !== '-' && !existsSync(file)) throw new UsageError(`no such file: ${file}`, context.usage)
    const config = loadConfig(context.env)
    return withDatabase(config, context.io, async (db) => {
      const sealer = await sealerFor(config, db, context.io)
      const roles = new RolesService({ db, clock: context.clock, events: writeOnlyOutbox(db, context.clock), applyLocally: () => {} })
      const service = new ImportService({
        db, clock: context.clock, sealer, roles,
        events: writeOnlyOutbox(db, context.clock),
        providers: new Set(config.oidc.providers.map((p) => p.name)),
        firebase: config.imports.firebase,
      })
      const input = file === '-' ? process.stdin : createReadStream(file)
      const size = file === '-' ? 0 : statSync(file).size
      // A progress line only where a person watches: standard error a terminal, and the real one.
      const terminal = context.io === stdio && process.stderr.isTTY === true
      const started = performance.now()
      let shown = 0
      const dryRun = context.values['dry-run'] === true
      const totals = await importLines(service, from ? convertedLines(from as Source, input) : jsonLines(input), {
        dryRun,
        events: context.values.events === true,
        context: CLI_CONTEXT,
        onSkip(number, email, reason, message) {
          if (terminal) process.stderr.write('\r\x1b[K')
          context.io.out(`line ${number}${email ? ` (${email})` : ''}: ${reason}: ${message}`)
        },
        onBatch(sofar) {
          if (!terminal || performance.now() - shown < 250) return
          shown = performance.now()
          const bytes = (input as { bytesRead?: number }).bytesRead ?? 0
          process.stderr.write(`\r\x1b[K${progressLine(sofar, performance.now() - started, size > 0 ? { bytes, size } : null)}`)
        },
      })
      if (terminal) process.stderr.write('\r\x1b[K')
      const seconds = (performance.now() - started) / 1000
      context.io.out(`${dryRun ? 'dry run: would import' : 'imported'} ${totals.imported} of ${totals.lines} lines; ${totals.present} already here, ${totals.refused} refused (${seconds.toFixed(1)} s)`)
      return totals.refused > 0 ? 1 : 0
    })
  },
}

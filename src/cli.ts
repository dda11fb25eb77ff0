import { randomBytes } from 'node:crypto'
import { createReadStream, existsSync, statSync } from 'node:fs'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { DEFAULT_MIGRATION_TABLE } from 'kysely'
import { AccountService, DISABLE_REASONS, UnknownUserError, type DisableReason } from './accounts/service.ts'
import { ApiKeyError, ApiKeyService, SCOPES, type Scope } from './admin/api-keys.ts'
import { CLI_CONTEXT } from './audit/events.ts'
import { AuditLog, eventView } from './audit/service.ts'
import { KeyEncryptionError, KeySealer, resolveKek } from './auth/key-encryption.ts'
import { describeKeys, rewrapStoredKeys, rotateSigningKeys, sealedSecret, sealStoredKeys } from './auth/keys.ts'
import { REFRESH_TTL_SECONDS } from './auth/tokens.ts'
import { systemClock, type Clock } from './clock.ts'
import { RolesService } from './authz/roles.ts'
import { ConfigError, loadConfig, type Config } from './config.ts'
import { migrate, openDatabase, sqliteFile, type Db } from './db/index.ts'
import { secrets, signingKeys } from './db/repositories.ts'
import { AppError } from './errors.ts'
import { rewrapMail } from './mail/queue.ts'
import { resetSecondFactors, rewrapTotpSecrets } from './mfa/service.ts'
import { ClientRegistry, rewrapClientSecrets } from './provider/clients.ts'
import { DEVICE_CODE_GRANT, type ClientCreate } from './provider/schemas.ts'
import { ResourceRegistry } from './provider/resources.ts'
import { DynamicRegistration } from './provider/registration.ts'
import { accountSignOut } from './services.ts'
import { isUuid } from './text.ts'
import { convertedLines, SOURCES, type Source } from './imports/converters.ts'
import { importLines, jsonLines, progressLine } from './imports/run.ts'
import { ImportService } from './imports/service.ts'
import { CursorCodec } from './cursor.ts'
import { Metrics } from './http/metrics.ts'
import { WEBHOOK_EVENTS, writeOnlyOutbox } from './webhooks/events.ts'
import { rewrapWebhookSecrets, WebhookService } from './webhooks/service.ts'

/** A wrong command line: exit 2 with the usage of what was meant. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message)
  }
}

export interface CliIo {
  out(line: string): void
  err(line: string): void
}

const stdio: CliIo = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
}

interface Context {
  env: Record<string, string | undefined>
  io: CliIo
  clock: Clock
  /** A repeatable option (`multiple: true`) arrives as the list of its values. */
  values: Record<string, string | boolean | string[] | undefined>
  positionals: string[]
}

interface Command {
  /** `group action`, or one word. */
  name: string
  /** Arguments after the name, as the usage line shows them. */
  args?: string
  summary: string
  /** Lines under the usage line of `--help`. */
  help?: string[]
  options?: ParseArgsConfig['options']
  positionals?: number
  run(context: Context): Promise<number>
}

const ISO = /^\d{4}-\d{2}-\d{2}T/
/** `events list --limit`: unlike the admin API, the CLI does not page, so it allows more at once. */
const EVENTS_LIMIT = { min: 1, max: 1000, default: 50 } as const
const DURATION = /^(\d+)([mhd])$/
const UNIT_MS = { m: 60_000, h: 3600_000, d: 86_400_000 } as const

function durationMs(value: string): number | null {
  const match = DURATION.exec(value)
  return match ? Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS] : null
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}

/** The database a configuration names, as the operator is shown it: never with its password. */
function databaseName(config: Config): string {
  if (!config.databaseUrl) return `${sqliteFile(config.dataDir)} (SQLite)`
  let url: URL
  try {
    url = new URL(config.databaseUrl)
  } catch {
    // pg may still make sense of it; showing it raw could show the password.
    return 'DATABASE_URL (PostgreSQL; not shown, it does not parse as a URL)'
  }
  url.password = ''
  url.searchParams.delete('password')
  return `${url} (PostgreSQL)`
}

/** Said on stderr before any output, so a command never acts on a database nobody meant. */
function announceDatabase(config: Config, io: CliIo): void {
  io.err(`portcullis: database ${databaseName(config)}`)
}

async function isMigrated(db: Db): Promise<boolean> {
  const tables = await db.kysely.introspection.getTables({ withInternalKyselyTables: true })
  return tables.some((table) => table.name === DEFAULT_MIGRATION_TABLE)
}

/**
 * The service's existing database. Only `migrate` and `serve` create one: anything else run from
 * the wrong directory would otherwise get a new, empty database in ./data and report nothing.
 * SQLite is checked before opening, because opening creates the file (and DATA_DIR).
 */
async function withDatabase<T>(config: Config, io: CliIo, run: (db: Db) => Promise<T>): Promise<T> {
  if (!config.databaseUrl && !existsSync(sqliteFile(config.dataDir))) {
    throw new Error(
      `no database at ${sqliteFile(config.dataDir)} (looked in DATA_DIR ${config.dataDir}); run this from the service's directory, set DATA_DIR (or DATABASE_URL), or run \`portcullis migrate\` to create one`,
    )
  }
  const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir })
  try {
    if (!(await isMigrated(db))) {
      throw new Error(`the database ${databaseName(config)} has no migrations applied; check ${config.databaseUrl ? 'DATABASE_URL' : 'DATA_DIR'}, or run \`portcullis migrate\` to set it up`)
    }
    announceDatabase(config, io)
    // A database a release behind is brought up to date, as the server does when it starts.
    await migrate(db)
    return await run(db)
  } finally {
    await db.close()
  }
}

const json = (value: unknown) => JSON.stringify(value, null, 2)

const JSON_OPTION = { json: { type: 'boolean' } } satisfies ParseArgsConfig['options']
const JSON_HELP = '--json prints a JSON array of objects (indented) instead of the table.'

function cell(value: unknown): string {
  if (value === null || value === undefined) return '-'
  return Array.isArray(value) ? value.join(',') : String(value)
}

/**
 * A list command's output on stdout: with --json the objects as one JSON array, for programs;
 * otherwise a table of the named fields (the JSON names are the header row), padded to line up.
 */
function printList<T extends object>(context: Context, items: T[], fields: (keyof T & string)[]): void {
  if (context.values.json) {
    context.io.out(json(items))
    return
  }
  const rows = [fields, ...items.map((item) => fields.map((field) => cell(item[field])))]
  const widths = fields.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  // The last column is not padded, so no line ends in blanks.
  for (const row of rows) context.io.out(row.map((text, column) => (column === row.length - 1 ? text : text.padEnd(widths[column]!))).join('  '))
}

/** The key-encryption key the server uses on this data directory, proven against what is stored. */
async function sealerFor(config: Config, db: Db, io: CliIo): Promise<KeySealer> {
  const sealer = new KeySealer(resolveKek(config.keyEncryptionKey, config.dataDir, (message) => io.err(`portcullis: ${message}`)))
  await sealStoredKeys(db, sealer)
  return sealer
}

async function apiKeysOf(config: Config, db: Db, context: Context): Promise<ApiKeyService> {
  const sealer = await sealerFor(config, db, context.io)
  return new ApiKeyService(db, context.clock, await sealedSecret(db, sealer, 'api_key_hmac', context.clock.now()))
}

/** The client registry on the server's database, sealing secrets under the server's key. */
function clientRegistry(context: Context, run: (clients: ClientRegistry) => Promise<number>): Promise<number> {
  const config = loadConfig(context.env)
  return withDatabase(config, context.io, async (db) => run(new ClientRegistry({ db, clock: context.clock, sealer: await sealerFor(config, db, context.io) })))
}

/** The registered resources on the server's database (src/provider/resources.ts). */
function resourceRegistry(context: Context, run: (resources: ResourceRegistry) => Promise<number>): Promise<number> {
  const config = loadConfig(context.env)
  return withDatabase(config, context.io, (db) => run(new ResourceRegistry({ db, clock: context.clock, builtIn: config.audience, production: config.production })))
}

/** The database the server uses, with the account operations on it. */
function accounts(context: Context, run: (service: AccountService) => Promise<number>): Promise<number> {
  return withDatabase(loadConfig(context.env), context.io, async (db) => run(await accountServiceOn(db, context.clock)))
}

/** The account operations, writing their webhook events as the server does (a running instance delivers them). */
async function accountServiceOn(db: Db, clock: Clock): Promise<AccountService> {
  return new AccountService(db, clock, accountSignOut(clock), writeOnlyOutbox(db, clock))
}

/**
 * The roles catalogue and users' roles on the server's database. Each change moves the claims
 * versions and writes the change feed in its transaction, so the running instances refuse the older
 * access tokens within the revocation bound, as for a change through the admin API.
 */
function rolesService(context: Context, run: (roles: RolesService, db: Db) => Promise<number>): Promise<number> {
  return withDatabase(loadConfig(context.env), context.io, (db) => run(new RolesService({ db, clock: context.clock, events: writeOnlyOutbox(db, context.clock), applyLocally: () => {} }), db))
}

/** A repeatable option's values, each of which may also be a comma-separated list. */
function listOption(value: string | boolean | string[] | undefined): string[] {
  const values = Array.isArray(value) ? value : typeof value === 'string' ? [value] : []
  return values.flatMap((item) => item.split(',')).map((item) => item.trim()).filter(Boolean)
}

/** The webhook endpoints on the server's database, sealing secrets under the server's key. */
function webhookService(context: Context, run: (webhooks: WebhookService) => Promise<number>): Promise<number> {
  const config = loadConfig(context.env)
  return withDatabase(config, context.io, async (db) => {
    const sealer = await sealerFor(config, db, context.io)
    const cursors = new CursorCodec(await secrets.getOrCreate(db.kysely, 'cursor_hmac', randomBytes(32).toString('base64url'), context.clock.now()))
    const logger = { info() {}, warn() {}, error() {} }
    return run(new WebhookService({ db, clock: context.clock, sealer, logger, metrics: new Metrics(), cursors, production: config.production }))
  })
}

const commands: Command[] = [
  {
    name: 'serve',
    summary: 'run the HTTP service',
    async run({ env, io }) {
      const { serve } = await import('./server.ts')
      const config = loadConfig(env)
      announceDatabase(config, io)
      await serve(config)
      return 0
    },
  },
  {
    name: 'migrate',
    summary: 'apply pending database migrations (creates the database if there is none)',
    async run({ env, io }) {
      const config = loadConfig(env)
      const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir })
      announceDatabase(config, io)
      const applied = await migrate(db).finally(() => db.close())
      io.out(applied.length === 0 ? 'database is up to date' : `applied: ${applied.join(', ')}`)
      return 0
    },
  },
  {
    name: 'users list',
    args: '[--json]',
    summary: 'list accounts: address, state, disabled reason, id, created',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      accounts(context, async (service) => {
        printList(context, await service.list(), ['email', 'state', 'disabled_reason', 'user_id', 'created_at'])
        return 0
      }),
  },
  {
    name: 'users verify',
    args: 'EMAIL',
    summary: 'mark an address verified',
    positionals: 1,
    run: (context) =>
      accounts(context, async (service) => {
        const user = await service.verify(context.positionals[0]!)
        context.io.out(`${user.email}: verified (${user.state})`)
        return 0
      }),
  },
  {
    name: 'users disable',
    args: 'EMAIL [--reason suspended|banned]',
    summary: 'disable an account (reason: suspended, the default, or banned)',
    options: { reason: { type: 'string', default: 'suspended' } },
    positionals: 1,
    run: (context) => {
      const reason = context.values.reason as string
      if (!DISABLE_REASONS.includes(reason as DisableReason)) throw new UsageError(`--reason must be one of ${DISABLE_REASONS.join(', ')}`, usageOf('users disable'))
      return accounts(context, async (service) => {
        context.io.out(`${(await service.disable(context.positionals[0]!, reason as DisableReason)).email}: disabled (${reason})`)
        return 0
      })
    },
  },
  {
    name: 'users enable',
    args: 'EMAIL',
    summary: 're-enable a disabled account',
    positionals: 1,
    run: (context) =>
      accounts(context, async (service) => {
        const user = await service.enable(context.positionals[0]!)
        context.io.out(`${user.email}: ${user.state}`)
        return 0
      }),
  },
  {
    name: 'users mfa-reset',
    args: 'EMAIL',
    summary: 'remove every second factor and recovery code of an account and revoke its sessions (the user is mailed)',
    positionals: 1,
    run: (context) => {
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const sealer = await sealerFor(config, db, context.io)
        const service = await accountServiceOn(db, context.clock)
        const reset = (trx: Db['kysely'], user: { id: string; email: string }) => resetSecondFactors(trx, user, { sealer, brand: { appName: config.appName }, now: context.clock.now() })
        const done = await service.resetMfa(context.positionals[0]!, reset)
        context.io.out(`${done.email}: ${done.factors} second factor(s) removed, ${done.revoked} session(s) revoked`)
        return 0
      })
    },
  },
  {
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
      if (from !== undefined && !SOURCES.includes(from as Source)) throw new UsageError(`--from must be one of ${SOURCES.join(', ')}`, usageOf('users import'))
      const file = context.positionals[0]!
      if (file !== '-' && !existsSync(file)) throw new UsageError(`no such file: ${file}`, usageOf('users import'))
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
  },
  {
    name: 'users delete',
    args: 'EMAIL',
    summary: 'delete an account and everything stored for it (its audit events stay, without the address)',
    positionals: 1,
    run: (context) =>
      accounts(context, async (service) => {
        const { user_id, email } = await service.remove(context.positionals[0]!)
        context.io.out(`${email}: deleted (user id ${user_id}); the address may register again`)
        return 0
      }),
  },
  {
    name: 'users roles',
    args: 'EMAIL [--add ROLE] [--remove ROLE]',
    summary: "show a user's global roles, or change them (as PUT /admin/users/{id}/roles)",
    help: ['--add and --remove may be repeated, or take a comma-separated list; without either the roles are shown.', 'The user\'s older access tokens stop working on every instance within the revocation bound.'],
    options: { add: { type: 'string', multiple: true }, remove: { type: 'string', multiple: true } },
    positionals: 1,
    run: (context) => {
      const add = listOption(context.values.add)
      const remove = listOption(context.values.remove)
      return rolesService(context, async (roles, db) => {
        const user = await (await accountServiceOn(db, context.clock)).find(context.positionals[0]!)
        const now = add.length === 0 && remove.length === 0
          ? await roles.rolesOf(user.id)
          : await roles.setUserRoles(user.id, (current) => [...current, ...add].filter((role) => !remove.includes(role)), CLI_CONTEXT)
        context.io.out(`${user.email}: ${now.length === 0 ? 'no roles' : `roles ${now.join(', ')}`}`)
        return 0
      })
    },
  },
  {
    name: 'events list',
    args: '[--user WHO] [--type TYPE] [--since T] [--limit N] [--json]',
    summary: 'audit events, newest first, as GET /admin/events (T: an ISO time or 30m, 24h, 7d)',
    help: [
      `--limit N: the N newest (${EVENTS_LIMIT.min} to ${EVENTS_LIMIT.max}, default ${EVENTS_LIMIT.default}); --type: one event type, such as account.disabled.`,
      '--user WHO: an address, or a user id (an id also finds the events of a deleted account).',
      JSON_HELP,
    ],
    options: { user: { type: 'string' }, type: { type: 'string' }, since: { type: 'string' }, limit: { type: 'string' }, ...JSON_OPTION },
    run: (context) => {
      const { user, type, since, limit } = context.values as { user?: string; type?: string; since?: string; limit?: string }
      const usage = usageOf('events list')
      let sinceMs: number | undefined
      if (since !== undefined) {
        const ago = durationMs(since)
        sinceMs = ago !== null ? context.clock.now() - ago : ISO.test(since) ? Date.parse(since) : Number.NaN
        if (Number.isNaN(sinceMs)) throw new UsageError('--since takes an ISO time (2026-11-01T00:00:00Z) or a duration (30m, 24h, 7d)', usage)
      }
      const count = limit === undefined ? EVENTS_LIMIT.default : /^\d+$/.test(limit) ? Number(limit) : Number.NaN
      if (!(count >= EVENTS_LIMIT.min && count <= EVENTS_LIMIT.max)) throw new UsageError(`--limit takes a whole number from ${EVENTS_LIMIT.min} to ${EVENTS_LIMIT.max}`, usage)
      const byAddress = user?.includes('@') ?? false
      if (user !== undefined && !byAddress && !isUuid(user)) throw new UsageError('--user takes an e-mail address or a user id', usage)
      return withDatabase(loadConfig(context.env), context.io, async (db) => {
        // An address must name an account; an id is taken as it is, since a deleted account's events stay.
        const userId = byAddress ? (await (await accountServiceOn(db, context.clock)).find(user!)).id : user
        const events = await new AuditLog(db).newestFirst({ userId, type, since: sinceMs }, null, count)
        printList(context, events.map(eventView), ['at', 'type', 'reason', 'user_id', 'actor', 'ip', 'request_id', 'user_agent'])
        return 0
      })
    },
  },
  {
    name: 'keys list',
    args: '[--json]',
    summary: 'list signing keys and their state (signing, verifying, retired)',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      withDatabase(loadConfig(context.env), context.io, async (db) => {
        const keys = describeKeys(await signingKeys.list(db.kysely), context.clock.now(), REFRESH_TTL_SECONDS)
        if (keys.length === 0) context.io.err('portcullis: no signing keys yet (the service creates one on first start)')
        const views = keys.map((key) => ({ kid: key.kid, alg: key.alg, state: key.state, created_at: iso(key.createdAt), retires_at: iso(key.retiresAt) }))
        printList(context, views, ['kid', 'alg', 'state', 'created_at', 'retires_at'])
        return 0
      }),
  },
  {
    name: 'keys rotate',
    summary: 'add a new signing key to each key family in use (old ones keep verifying)',
    run: ({ env, io, clock }) => {
      const config = loadConfig(env)
      return withDatabase(config, io, async (db) => {
        const kids = await rotateSigningKeys(db, await sealerFor(config, db, io), clock.now())
        for (const kid of kids) io.out(`new signing key ${kid}; running instances sign with it within a minute, old keys keep verifying`)
        return 0
      })
    },
  },
  {
    name: 'keys rewrap',
    summary: 're-encrypt the stored keys from OLD_KEY_ENCRYPTION_KEY to KEY_ENCRYPTION_KEY',
    help: ['Set OLD_KEY_ENCRYPTION_KEY to the key in use and KEY_ENCRYPTION_KEY to the new one; then restart', 'every instance with the new KEY_ENCRYPTION_KEY. All or nothing; running it twice is harmless.'],
    run: ({ env, io }) => {
      const config = loadConfig(env)
      if (!config.oldKeyEncryptionKey || !config.keyEncryptionKey) {
        throw new UsageError('keys rewrap needs OLD_KEY_ENCRYPTION_KEY (the key in use) and KEY_ENCRYPTION_KEY (the new one)', usageOf('keys rewrap'))
      }
      const from = new KeySealer(config.oldKeyEncryptionKey)
      const to = new KeySealer(config.keyEncryptionKey)
      return withDatabase(config, io, async (db) => {
        const count = await rewrapStoredKeys(db, from, to, [rewrapMail, rewrapTotpSecrets, rewrapClientSecrets, rewrapWebhookSecrets])
        io.out(`re-encrypted ${count} stored key(s), queued mail(s), second-factor secret(s), client and webhook secret(s) under the new KEY_ENCRYPTION_KEY; restart every instance with it`)
        return 0
      })
    },
  },
  {
    name: 'api-keys create',
    args: '--name NAME --scopes S[,S] [--expires 90d]',
    summary: `make an API key for the admin API and print it once (scopes: ${SCOPES.join(', ')})`,
    help: ['The key is shown once and never again: only a hash of it is stored.', '--expires takes a duration (30m, 24h, 90d); without it the key lasts until revoked.'],
    options: { name: { type: 'string' }, scopes: { type: 'string' }, expires: { type: 'string' } },
    run: (context) => {
      const { name, scopes, expires } = context.values as { name?: string; scopes?: string; expires?: string }
      const usage = usageOf('api-keys create')
      if (name === undefined) throw new UsageError('--name is required', usage)
      if (scopes === undefined) throw new UsageError('--scopes is required', usage)
      const list = scopes.split(',').map((scope) => scope.trim()).filter(Boolean)
      const unknown = list.find((scope) => !SCOPES.includes(scope as Scope))
      if (unknown !== undefined || list.length === 0) throw new UsageError(`--scopes takes one or more of ${SCOPES.join(', ')}${unknown ? ` (not ${unknown})` : ''}`, usage)
      const lifetime = expires === undefined ? null : durationMs(expires)
      if (expires !== undefined && (lifetime === null || lifetime === 0)) throw new UsageError('--expires takes a duration such as 30m, 24h or 90d', usage)
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const service = await apiKeysOf(config, db, context)
        const { key, summary } = await service.create({ name, scopes: list as Scope[], expiresAt: lifetime === null ? null : context.clock.now() + lifetime })
        context.io.out(key)
        context.io.err(`portcullis: API key ${summary.id} (${summary.name}: ${summary.scopes.join(',')}, expires ${iso(summary.expires_at) ?? 'never'}); this is the only time the key is shown`)
        return 0
      })
    },
  },
  {
    name: 'api-keys list',
    args: '[--json]',
    summary: 'list API keys: id, name, scopes, state, created, last used, expires',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) => {
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const now = context.clock.now()
        const views = (await (await apiKeysOf(config, db, context)).list()).map((key) => ({
          id: key.id,
          name: key.name,
          scopes: key.scopes,
          state: key.revoked_at !== null ? 'revoked' : key.expires_at !== null && key.expires_at <= now ? 'expired' : 'active',
          created_at: iso(key.created_at),
          last_used_at: iso(key.last_used_at),
          expires_at: iso(key.expires_at),
          revoked_at: iso(key.revoked_at),
        }))
        printList(context, views, ['id', 'name', 'scopes', 'state', 'created_at', 'last_used_at', 'expires_at'])
        return 0
      })
    },
  },
  {
    name: 'api-keys revoke',
    args: 'ID',
    summary: 'end an API key at once (every instance within the revocation bound)',
    positionals: 1,
    run: (context) => {
      const config = loadConfig(context.env)
      const id = context.positionals[0]!
      return withDatabase(config, context.io, async (db) => {
        if (!(await (await apiKeysOf(config, db, context)).revoke(id))) {
          context.io.err(`portcullis: no live API key with the id ${id}`)
          return 1
        }
        context.io.out(`API key ${id}: revoked`)
        return 0
      })
    },
  },
  {
    name: 'clients add',
    args: '--name NAME --type public|confidential [...]',
    summary: 'register a client of the OpenID provider and print it as JSON (with its secret, once)',
    help: [
      'Repeat for each value: --redirect-uri URI, --post-logout-redirect-uri URI, --scope S, --grant G.',
      'Also: --first-party (skips consent), --pkce-required=false (confidential clients only),',
      '--backchannel-logout-uri URI, --token-endpoint-auth-method M, --id-token-alg RS256|EdDSA,',
      '--jwks-uri URI (for private_key_jwt). Defaults: every scope; the grants authorization_code and',
      `refresh_token (--grant device_code is short for ${DEVICE_CODE_GRANT}).`,
      "A confidential client's secret is shown here and never again: only a sealed copy is stored.",
    ],
    options: {
      name: { type: 'string' },
      type: { type: 'string' },
      'redirect-uri': { type: 'string', multiple: true },
      'post-logout-redirect-uri': { type: 'string', multiple: true },
      'first-party': { type: 'boolean' },
      scope: { type: 'string', multiple: true },
      grant: { type: 'string', multiple: true },
      'backchannel-logout-uri': { type: 'string' },
      'pkce-required': { type: 'string' },
      'token-endpoint-auth-method': { type: 'string' },
      'id-token-alg': { type: 'string' },
      'jwks-uri': { type: 'string' },
    },
    run: (context) => {
      const v = context.values
      const usage = usageOf('clients add')
      if (v.name === undefined) throw new UsageError('--name is required', usage)
      if (v.type === undefined) throw new UsageError('--type is required (public or confidential)', usage)
      const pkce = v['pkce-required']
      if (pkce !== undefined && pkce !== 'true' && pkce !== 'false') throw new UsageError('--pkce-required takes true or false', usage)
      // The registry judges every value (the same rules and messages as POST /admin/clients).
      const input = {
        name: v.name,
        type: v.type,
        redirect_uris: v['redirect-uri'],
        post_logout_redirect_uris: v['post-logout-redirect-uri'],
        first_party: v['first-party'],
        scopes: v.scope,
        grant_types: (v.grant as string[] | undefined)?.map((grant) => (grant === 'device_code' ? DEVICE_CODE_GRANT : grant)),
        backchannel_logout_uri: v['backchannel-logout-uri'],
        pkce_required: pkce === undefined ? undefined : pkce === 'true',
        token_endpoint_auth_method: v['token-endpoint-auth-method'],
        id_token_signed_response_alg: v['id-token-alg'],
        jwks_uri: v['jwks-uri'],
      } as ClientCreate
      return clientRegistry(context, async (clients) => {
        const created = await clients.create(input)
        context.io.out(json(created))
        if (created.client_secret !== undefined) context.io.err(`portcullis: client ${created.client.client_id}: this is the only time its secret is shown`)
        return 0
      })
    },
  },
  {
    name: 'clients list',
    args: '[--json]',
    summary: 'list the registered clients: client_id, name, type, first_party, dynamic (oldest first)',
    help: ['--json prints a JSON array of the clients, every field as `clients show` prints them, instead of the table.'],
    options: JSON_OPTION,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        printList(context, await clients.list(), ['client_id', 'name', 'type', 'first_party', 'dynamic'])
        return 0
      }),
  },
  {
    name: 'clients registration-token',
    args: '[--expires 24h]',
    summary: 'make an initial access token for dynamic registration (OP_REGISTRATION=token): printed once, good for one registration',
    options: { expires: { type: 'string', default: '24h' } },
    run: (context) => {
      const lifetime = durationMs(context.values.expires as string)
      if (lifetime === null) throw new UsageError('--expires must be a duration like 30m, 24h or 7d', usageOf('clients registration-token'))
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const clients = new ClientRegistry({ db, clock: context.clock, sealer: await sealerFor(config, db, context.io) })
        const { token, expiresAt } = await new DynamicRegistration({ db, clock: context.clock, clients, mode: config.provider.registration }).createToken(lifetime)
        if (config.provider.registration !== 'token') context.io.err(`portcullis: OP_REGISTRATION is ${config.provider.registration}, so the server does not ask for this token`)
        context.io.out(token)
        context.io.err(`portcullis: good for one registration until ${new Date(expiresAt).toISOString()}; shown only now`)
        return 0
      })
    },
  },
  {
    name: 'clients show',
    args: 'CLIENT_ID',
    summary: 'print a client as JSON (never its secret)',
    positionals: 1,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        context.io.out(json({ client: await clients.get(context.positionals[0]!) }))
        return 0
      }),
  },
  {
    name: 'clients remove',
    args: 'CLIENT_ID',
    summary: 'remove a client and every grant, code and token it holds',
    positionals: 1,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        const { client_id } = await clients.remove(context.positionals[0]!)
        context.io.out(`client ${client_id}: removed, with its grants and tokens`)
        return 0
      }),
  },
  {
    name: 'resources add',
    args: 'URI --name NAME [--scope NAME=DESCRIPTION ...]',
    summary: 'register an API or MCP server as a resource: tokens asked for with resource=URI have it as audience and only its scopes',
    help: ['--scope is repeatable: the scope\'s name, =, and what it lets an app do (the consent page shows it).'],
    options: { name: { type: 'string' }, scope: { type: 'string', multiple: true } },
    positionals: 1,
    run: (context) => {
      const name = context.values.name
      if (typeof name !== 'string') throw new UsageError('--name is required', usageOf('resources add'))
      const scopes = (Array.isArray(context.values.scope) ? context.values.scope : []).map((item) => {
        const at = item.indexOf('=')
        if (at <= 0) throw new UsageError(`--scope ${item}: give NAME=DESCRIPTION`, usageOf('resources add'))
        return { name: item.slice(0, at), description: item.slice(at + 1) }
      })
      return resourceRegistry(context, async (resources) => {
        const resource = await resources.create({ uri: context.positionals[0]!, name, scopes })
        context.io.out(`resource ${resource.id}: ${resource.uri} (${resource.scopes.map((scope) => scope.name).join(' ') || 'no scopes'})`)
        return 0
      })
    },
  },
  {
    name: 'resources list',
    args: '[--json]',
    summary: 'list the registered resources: id, URI, name, scopes',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      resourceRegistry(context, async (resources) => {
        const list = (await resources.list()).map((resource) => ({ ...resource, scopes: context.values.json ? resource.scopes : resource.scopes.map((scope) => scope.name).join(' ') }))
        printList(context, list, ['id', 'uri', 'name', 'scopes'])
        return 0
      }),
  },
  {
    name: 'resources remove',
    args: 'ID',
    summary: 'remove a registered resource: no new token for it (those issued live out their 15 minutes)',
    positionals: 1,
    run: (context) =>
      resourceRegistry(context, async (resources) => {
        context.io.out(`resource ${(await resources.remove(context.positionals[0]!)).id}: removed`)
        return 0
      }),
  },
  {
    name: 'clients rotate-secret',
    args: 'CLIENT_ID',
    summary: 'give a confidential client a new secret and print it once; the old one stops working at once',
    positionals: 1,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        const rotated = await clients.rotateSecret(context.positionals[0]!)
        context.io.out(json(rotated))
        context.io.err(`portcullis: client ${rotated.client.client_id}: this is the only time the new secret is shown; the old one no longer works`)
        return 0
      }),
  },
  {
    name: 'roles list',
    args: '[--json]',
    summary: 'list the roles catalogue: name, builtin, permissions, description',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      rolesService(context, async (roles) => {
        printList(context, await roles.list(), ['name', 'builtin', 'permissions', 'description'])
        return 0
      }),
  },
  {
    name: 'roles show',
    args: 'NAME',
    summary: 'print a role as JSON',
    positionals: 1,
    run: (context) =>
      rolesService(context, async (roles) => {
        context.io.out(json({ role: await roles.get(context.positionals[0]!) }))
        return 0
      }),
  },
  {
    name: 'roles add',
    args: 'NAME --permissions P[,P] [--description D]',
    summary: 'add a role to the catalogue and print it as JSON (as POST /admin/roles)',
    help: ['Permissions are resource:action (watchlists:read, reports:*); --permissions may be repeated; --permissions "" makes a role with none.'],
    options: { permissions: { type: 'string', multiple: true }, description: { type: 'string' } },
    positionals: 1,
    run: (context) => {
      if (context.values.permissions === undefined) throw new UsageError('--permissions is required (a comma-separated list; "" for none)', usageOf('roles add'))
      const { description } = context.values as { description?: string }
      return rolesService(context, async (roles) => {
        context.io.out(json({ role: await roles.create({ name: context.positionals[0]!, description, permissions: listOption(context.values.permissions) }, CLI_CONTEXT) }))
        return 0
      })
    },
  },
  {
    name: 'roles remove',
    args: 'NAME [--force]',
    summary: 'remove a role (never a built-in one); --force takes it from every user and membership holding it first',
    options: { force: { type: 'boolean' } },
    positionals: 1,
    run: (context) =>
      rolesService(context, async (roles) => {
        const removed = await roles.remove(context.positionals[0]!, context.values.force === true, CLI_CONTEXT)
        const from = removed.users + removed.memberships > 0 ? `, taken from ${removed.users} user(s) and ${removed.memberships} membership(s)` : ''
        context.io.out(`role ${removed.name}: removed${from}`)
        return 0
      }),
  },
  {
    name: 'webhooks add',
    args: 'URL --events E[,E] [--description D]',
    summary: 'register a webhook endpoint and print it as JSON with its signing secret (once)',
    help: [`Events: ${WEBHOOK_EVENTS.join(', ')}, or * for all.`, 'The secret (whsec_...) is shown here and never again: only a sealed copy is stored.'],
    positionals: 1,
    options: { events: { type: 'string' }, description: { type: 'string' } },
    run: (context) => {
      const { events, description } = context.values as { events?: string; description?: string }
      if (!events) throw new UsageError('webhooks add needs --events (a comma-separated list, or *)', usageOf('webhooks add'))
      return webhookService(context, async (webhooks) => {
        const created = await webhooks.create({ url: context.positionals[0]!, events: events.split(',').map((event) => event.trim()).filter(Boolean), description: description ?? null })
        context.io.out(json(created))
        context.io.err(`portcullis: webhook ${created.webhook.id}: this is the only time its secret is shown`)
        return 0
      })
    },
  },
  {
    name: 'webhooks list',
    args: '[--json]',
    summary: 'list the webhook endpoints: id, url, events, enabled, disabled_reason (oldest first)',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      webhookService(context, async (webhooks) => {
        printList(context, await webhooks.list(), ['id', 'url', 'events', 'enabled', 'disabled_reason'])
        return 0
      }),
  },
  {
    name: 'webhooks remove',
    args: 'ID',
    summary: 'remove a webhook endpoint with its deliveries',
    positionals: 1,
    run: (context) =>
      webhookService(context, async (webhooks) => {
        await webhooks.remove(context.positionals[0]!)
        context.io.out(`webhook ${context.positionals[0]}: removed, with its deliveries`)
        return 0
      }),
  },
  {
    name: 'webhooks rotate-secret',
    args: 'ID',
    summary: 'give an endpoint a new signing secret and print it once; the previous one also signs for 24 hours',
    positionals: 1,
    run: (context) =>
      webhookService(context, async (webhooks) => {
        const rotated = await webhooks.rotateSecret(context.positionals[0]!)
        context.io.out(json(rotated))
        context.io.err(`portcullis: webhook ${rotated.webhook.id}: this is the only time the new secret is shown; the previous one signs beside it for 24 hours`)
        return 0
      }),
  },
  {
    name: 'webhooks deliveries',
    args: 'ID [--limit N] [--json]',
    summary: 'an endpoint\'s deliveries, newest first: id, webhook_id, type, attempts, last_status, delivered_at, failed_at',
    help: ['--limit takes 1 to 100 (default 20).', JSON_HELP],
    positionals: 1,
    options: { ...JSON_OPTION, limit: { type: 'string' } },
    run: (context) => {
      const { limit } = context.values as { limit?: string }
      const count = limit === undefined ? 20 : Number(limit)
      if (!Number.isInteger(count) || count < 1 || count > 100) throw new UsageError('--limit takes a whole number from 1 to 100', usageOf('webhooks deliveries'))
      return webhookService(context, async (webhooks) => {
        const { deliveries } = await webhooks.deliveries(context.positionals[0]!, { limit: count })
        printList(context, deliveries, ['id', 'webhook_id', 'type', 'attempts', 'last_status', 'delivered_at', 'failed_at'])
        return 0
      })
    },
  },
]

function usageOf(name: string): string {
  const command = commands.find((c) => c.name === name)!
  return [`usage: portcullis ${command.name}${command.args ? ` ${command.args}` : ''}`, `  ${command.summary}`, ...(command.help ?? []).map((line) => `  ${line}`)].join('\n')
}

function overview(group?: string): string {
  const shown = commands.filter((c) => group === undefined || c.name.split(' ')[0] === group)
  const width = Math.max(...shown.map((c) => `${c.name}${c.args ? ` ${c.args}` : ''}`.length))
  const lines = shown.map((c) => `  ${`${c.name}${c.args ? ` ${c.args}` : ''}`.padEnd(width)}  ${c.summary}`)
  const notes = group
    ? []
    : [
        '',
        'Every command but migrate and serve needs an existing database: DATABASE_URL, or else',
        'DATA_DIR/portcullis.db (DATA_DIR defaults to ./data). The one used is named on stderr.',
        'The list commands print a table with a header row, or with --json a JSON array.',
      ]
  return [`usage: portcullis ${group ?? '<command>'}${group ? ' <action>' : ''} [--help]`, ...lines, ...notes].join('\n')
}

const isHelp = (arg: string | undefined) => arg === '--help' || arg === '-h' || arg === 'help'

/**
 * The `portcullis` command. Returns the exit status (0 done, 1 failed, 2 usage) instead of
 * exiting, so it is testable in-process; only the entry point at the bottom touches process.
 * Options are parsed by Node's util.parseArgs (strict: an unknown option is a usage error).
 */
export async function runCli(
  argv: string[],
  env: Record<string, string | undefined> = process.env,
  io: CliIo = stdio,
  clock: Clock = systemClock,
): Promise<number> {
  const [first, second] = argv
  try {
    if (first === undefined) throw new UsageError('a command is required', overview())
    if (isHelp(first)) {
      io.out(overview())
      return 0
    }
    const command = commands.find((c) => c.name === first) ?? commands.find((c) => c.name === `${first} ${second}`)
    if (!command) {
      const group = commands.some((c) => c.name.startsWith(`${first} `)) ? first : undefined
      if (group && (second === undefined || isHelp(second))) {
        if (second !== undefined) {
          io.out(overview(group))
          return 0
        }
        throw new UsageError(`${group} needs an action`, overview(group))
      }
      throw new UsageError(`unknown command: ${[first, group ? second : undefined].filter(Boolean).join(' ')}`, overview(group))
    }
    const rest = argv.slice(command.name.split(' ').length)
    if (rest.some(isHelp)) {
      io.out(usageOf(command.name))
      return 0
    }
    let parsed: { values: Context['values']; positionals: string[] }
    try {
      parsed = parseArgs({ args: rest, options: command.options ?? {}, allowPositionals: true, strict: true }) as typeof parsed
    } catch (error) {
      throw new UsageError((error as Error).message.split('\n')[0]!.replace(/\. To specify a positional.*$/, ''), usageOf(command.name))
    }
    const expected = command.positionals ?? 0
    if (parsed.positionals.length !== expected) {
      throw new UsageError(expected === 0 ? `${command.name} takes no arguments` : `${command.name} takes ${command.args?.split(' ')[0]}`, usageOf(command.name))
    }
    return await command.run({ env, io, clock, values: parsed.values, positionals: parsed.positionals })
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`portcullis: ${error.message}`)
      io.err(error.usage)
      return 2
    }
    if (error instanceof UnknownUserError || error instanceof ConfigError || error instanceof KeyEncryptionError || error instanceof ApiKeyError) {
      io.err(`portcullis: ${error.message}`)
      return 1
    }
    // The services' refusals, as the API would give them, still on one line.
    if (error instanceof AppError) {
      const details = (error.details ?? []).map((detail) => `${detail.field} ${detail.message}`)
      io.err(`portcullis: ${details.length === 0 ? error.message : `${error.message.replace(/\.$/, '')}: ${details.join('; ')}`}`)
      return 1
    }
    io.err(`portcullis: ${(error as Error).message.split('\n')[0]}`)
    return 1
  }
}

const isEntry = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (isEntry) process.exitCode = await runCli(process.argv.slice(2))

import { existsSync } from 'node:fs'
import { DEFAULT_MIGRATION_TABLE } from 'kysely'
import { AccountService } from '../accounts/service.ts'
import { KeySealer, resolveKek } from '../auth/key-encryption.ts'
import { sealStoredKeys } from '../auth/keys.ts'
import { RolesService } from '../authz/roles.ts'
import type { Clock } from '../clock.ts'
import { loadConfig, type Config } from '../config.ts'
import { migrate, openDatabase, sqliteFile, type Db } from '../db/index.ts'
import { accountSignOut } from '../services.ts'
import { writeOnlyOutbox } from '../webhooks/events.ts'
import type { CliIo, Context } from './command.ts'

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
export function announceDatabase(config: Config, io: CliIo): void {
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
export async function withDatabase<T>(config: Config, io: CliIo, run: (db: Db) => Promise<T>): Promise<T> {
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

/** The key-encryption key the server uses on this data directory, proven against what is stored. */
export async function sealerFor(config: Config, db: Db, io: CliIo): Promise<KeySealer> {
  const sealer = new KeySealer(resolveKek(config.keyEncryptionKey, config.dataDir, (message) => io.err(`portcullis: ${message}`)))
  await sealStoredKeys(db, sealer)
  return sealer
}

/** The account operations, writing their webhook events as the server does (a running instance delivers them). */
export async function accountServiceOn(db: Db, clock: Clock): Promise<AccountService> {
  return new AccountService(db, clock, accountSignOut(clock), writeOnlyOutbox(db, clock))
}

/**
 * The roles catalogue and users' roles on the server's database. Each change moves the claims
 * versions and writes the change feed in its transaction, so the running instances refuse the older
 * access tokens within the revocation bound, as for a change through the admin API.
 */
export function rolesService(context: Context, run: (roles: RolesService, db: Db) => Promise<number>): Promise<number> {
  return withDatabase(loadConfig(context.env), context.io, (db) => run(new RolesService({ db, clock: context.clock, events: writeOnlyOutbox(db, context.clock), applyLocally: () => {} }), db))
}

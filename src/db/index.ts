import { mkdirSync } from 'node:fs'
import path from 'node:path'
import SQLite from 'better-sqlite3'
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql, type Migration } from 'kysely'
import type PgModule from 'pg'
import { load } from '../optional.ts'
import type { Database } from './schema.ts'
import * as m0001 from './migrations/0001_initial.ts'
import * as m0002 from './migrations/0002_watchlists.ts'
import * as m0003 from './migrations/0003_lifecycle.ts'
import * as m0004 from './migrations/0004_mail_outbox.ts'
import { changeFeed } from './migrations/0005_change_feed.ts'
import * as m0006 from './migrations/0006_operators.ts'
import * as m0007 from './migrations/0007_audit_writes.ts'
import { scale } from './migrations/0008_scale.ts'
import * as m0009 from './migrations/0009_session_assurance.ts'
import * as m0010 from './migrations/0010_mfa.ts'
import * as m0011 from './migrations/0011_passkeys.ts'
import * as m0012 from './migrations/0012_identities.ts'
import * as m0013 from './migrations/0013_sign_in_bindings.ts'
import * as m0014 from './migrations/0014_provider.ts'
import * as m0015 from './migrations/0015_login_codes.ts'
import * as m0016 from './migrations/0016_email_sign_in.ts'
import * as m0017 from './migrations/0017_email_changes.ts'
import * as m0018 from './migrations/0018_webhooks.ts'
import * as m0019 from './migrations/0019_pending_proofs.ts'
import * as m0020 from './migrations/0020_mail_subjects.ts'
import * as m0021 from './migrations/0021_authorization.ts'
import * as m0022 from './migrations/0022_imported_hashes.ts'
import * as m0023 from './migrations/0023_resources.ts'
import * as m0024 from './migrations/0024_dynamic_registration.ts'
import * as m0025 from './migrations/0025_console.ts'
import * as m0026 from './migrations/0026_organization_pages.ts'
import * as m0027 from './migrations/0027_partial_record_indexes.ts'
import { setBounded } from '../bounded-map.ts'

export type Engine = 'sqlite' | 'postgres'

export interface Db {
  kysely: Kysely<Database>
  engine: Engine
  /** How many distinct statements are kept prepared for reuse (SQLite) or named (PostgreSQL). */
  preparedStatements?(): number
  /** Their SQL texts (the query-plan test explains each one). */
  statementTexts?(): string[]
  /**
   * SQLite only: a read of committed data, run at once on a connection of its own that only reads
   * (src/db/hot-query.ts's `committed`). For the request path's reads outside any transaction; it
   * never sees a transaction in progress, which the shared connection's reads could.
   */
  readCommitted?(sql: string, parameters: readonly unknown[]): unknown[]
  /** Cheap liveness probe for /readyz. */
  ping(): Promise<void>
  close(): Promise<void>
}

export interface DbOptions {
  databaseUrl?: string | undefined
  dataDir: string
  /** Where pool-level errors go (a dropped idle connection must not crash the process). */
  onPoolError?: (error: Error) => void
  /**
   * PostgreSQL: how long a statement may wait for a lock before the server cancels it (its error
   * answers 503), in ms; unset or 0, no limit. migrate() lifts it for the migrations.
   */
  lockTimeoutMs?: number
}

const PG_INT8_OID = 20

/** The embedded (SQLite) database's file in a data directory. */
export function sqliteFile(dataDir: string): string {
  return path.join(dataDir, 'portcullis.db')
}

export function openDatabase(options: DbOptions): Db {
  if (options.databaseUrl) return openPostgres(options.databaseUrl, options.onPoolError, options.lockTimeoutMs)
  return openSqlite(options.dataDir)
}

/**
 * SQLite's page cache, in KiB: SQLite's own default. better-sqlite3 builds SQLite with 16 MB, which
 * a busy server fills within a minute of writes and then keeps for its whole life; the pages it
 * would hold beyond these 2 MB are in the operating system's file cache anyway, a system call away.
 */
const SQLITE_CACHE_KIB = 2000

function openSqlite(dataDir: string): Db {
  mkdirSync(dataDir, { recursive: true })
  const sqlite = new SQLite(sqliteFile(dataDir))
  sqlite.pragma('journal_mode = WAL')
  // FULL makes each commit durable across power loss in WAL mode (NORMAL only guards against corruption).
  sqlite.pragma('synchronous = FULL')
  sqlite.pragma('foreign_keys = ON')
  // A CLI command and the server may share the file; wait for the other writer instead of failing.
  sqlite.pragma('busy_timeout = 5000')
  sqlite.pragma(`cache_size = ${-SQLITE_CACHE_KIB}`)
  // Every statement the writing connection runs (a commit among them) ends the reader's snapshot
  // first, so a read after it sees what it wrote (see readCommitted).
  const statements = reusedStatements(sqlite, () => endSnapshot())
  const kysely = new Kysely<Database>({ dialect: new SqliteDialect({ database: statements }) })
  // The reader, opened on the first read (after the migrations): Kysely's SQLite dialect serves
  // every query through one connection behind a lock held across a transaction's awaits, so a read
  // there waits for any transaction in progress and costs a chain of promises; here it is one
  // synchronous statement over the last commit (WAL readers never wait for the writer).
  let reader: ReturnType<typeof reusedStatements> | undefined
  let closed = false
  // The reads of one turn of the event loop share one read transaction (a snapshot): each read
  // alone would take and drop SQLite's WAL read lock and check its page cache against the log again.
  // It ends at the end of the turn, or before the writing connection runs anything, whichever is first.
  let snapshot = false
  const endSnapshot = () => {
    if (!snapshot) return
    snapshot = false
    reader?.exec('COMMIT')
  }
  const openReader = () => {
    if (closed) throw new Error('the database is closed')
    const connection = new SQLite(sqliteFile(dataDir), { readonly: true })
    connection.pragma('busy_timeout = 5000')
    connection.pragma(`cache_size = ${-SQLITE_CACHE_KIB}`)
    return reusedStatements(connection)
  }
  return {
    kysely,
    engine: 'sqlite',
    preparedStatements: () => statements.size() + (reader?.size() ?? 0),
    statementTexts: () => [...new Set([...statements.texts(), ...(reader?.texts() ?? [])])],
    readCommitted(text, parameters) {
      reader ??= openReader()
      if (!snapshot) {
        reader.exec('BEGIN')
        snapshot = true
        setImmediate(endSnapshot)
      }
      return reader.prepare(text).all(parameters)
    },
    async ping() {
      await sql`select 1`.execute(kysely)
    },
    async close() {
      closed = true
      endSnapshot()
      reader?.close()
      reader = undefined
      await kysely.destroy()
    },
  }
}

/** Distinct SQL texts kept prepared; queries differ only in their parameters, so few are needed. */
const STATEMENT_CACHE_SIZE = 500

/**
 * Kysely asks better-sqlite3 to prepare every query anew; the same SQL text gets the statement
 * prepared the first time instead. Safe because better-sqlite3 runs a statement synchronously to
 * completion (nothing here streams rows), and it re-prepares by itself after a schema change.
 */
function reusedStatements(sqlite: SQLite.Database, beforeEach?: () => void) {
  const prepared = new Map<string, SQLite.Statement>()
  return {
    close: () => sqlite.close(),
    exec: (sql: string) => void sqlite.exec(sql),
    prepare(sql: string): SQLite.Statement {
      beforeEach?.()
      let statement = prepared.get(sql)
      if (!statement) {
        statement = sqlite.prepare(sql)
        setBounded(prepared, sql, statement, STATEMENT_CACHE_SIZE)
      }
      return statement
    },
    size: () => prepared.size,
    texts: () => [...prepared.keys()],
  }
}

const NAMED_STATEMENTS_MAX = 500
const PREPARABLE = /^\s*(select|insert|update|delete|with)\b/i

/**
 * The PostgreSQL side of statement reuse: each distinct query text gets a name, so every pooled
 * connection parses and plans it once and afterwards only binds and executes it (pg keeps the
 * per-connection bookkeeping). Only data statements are named (never DDL or transaction control),
 * and only the first 500 distinct texts, so a query built with a varying shape cannot grow the
 * server's per-connection statement list without bound.
 */
function namedStatements(pool: PgModule.Pool, checkout: () => Promise<PgModule.PoolClient> = () => pool.connect()) {
  const names = new Map<string, string>()
  const wrapped = new WeakMap<PgModule.PoolClient, PgModule.PoolClient>()
  // A connection whose query failed because the server went away, or turned out to be read-only,
  // is ended on release rather than kept: the next checkout opens a new one, on the primary.
  const condemned = new WeakSet<PgModule.PoolClient>()
  const watched = (client: PgModule.PoolClient, result: unknown): unknown => {
    if (typeof (result as Promise<unknown> | undefined)?.then !== 'function') return result
    return (result as Promise<unknown>).catch((error: unknown) => {
      if (isDatabaseUnavailable(error)) condemned.add(client)
      throw error
    })
  }
  const nameOf = (text: string): string | undefined => {
    let name = names.get(text)
    if (name === undefined && names.size < NAMED_STATEMENTS_MAX && PREPARABLE.test(text)) {
      name = `pcl_${names.size + 1}`
      names.set(text, name)
    }
    return name
  }
  const wrap = (client: PgModule.PoolClient): PgModule.PoolClient => {
    let proxy = wrapped.get(client)
    if (!proxy) {
      proxy = Object.create(client, {
        query: {
          value: (text: unknown, values?: unknown[]) => {
            const name = typeof text === 'string' ? nameOf(text) : undefined
            return watched(client, name ? client.query({ name, text: text as string, values }) : client.query(text as string, values))
          },
        },
        release: { value: (error?: Error | boolean) => client.release(condemned.delete(client) || error) },
      }) as PgModule.PoolClient
      wrapped.set(client, proxy)
    }
    return proxy
  }
  return {
    connect: async () => wrap(await checkout()),
    end: () => pool.end(),
    size: () => names.size,
    texts: () => [...names.keys()],
  }
}

function openPostgres(connectionString: string, onPoolError?: (error: Error) => void, lockTimeoutMs?: number): Db {
  // pg's load-time probe for Cloudflare Workers stops at `navigator`, which Node has since 21, so it
  // never touches `Response` (whose first touch would load Node's whole fetch implementation).
  const pg = load<typeof PgModule>('pg')
  const target = parsePostgresUrl(connectionString)
  // One host and no session requirement: the URL goes to pg as it is, as it always did.
  const plain = target.hosts.length === 1 && target.targetSessionAttrs === 'any'
  const hosts = plain ? undefined : failover(pg, target)
  const pool = new pg.Pool({
    ...(hosts ? { Client: hosts.Client as unknown as new () => PgModule.ClientBase } : { connectionString }),
    max: 10,
    // Fail fast while the database is away, so callers get 503 quickly instead of hanging.
    connectionTimeoutMillis: 2000,
    idleTimeoutMillis: 30_000,
    // Sent with each connection's start-up: a statement stuck behind a lock is cancelled (55P03, a
    // 503) and its connection goes back to the pool, instead of holding one of the ten until the
    // lock goes. A lock timeout, not a statement timeout: PostgreSQL arms the first only when a
    // statement has to wait, the second around every statement (docs/operations.md).
    ...(lockTimeoutMs ? { lock_timeout: lockTimeoutMs } : {}),
    types: {
      getTypeParser: ((oid: number, format?: string) =>
        oid === PG_INT8_OID ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format as 'text')) as typeof PgModule.types.getTypeParser,
    },
  })
  pool.on('error', (error) => onPoolError?.(error))
  // A connection that dies while checked out emits 'error' on its client; without a listener
  // that would crash the process. The query itself still rejects and answers 503.
  pool.on('connect', (client) => client.on('error', (error) => onPoolError?.(error)))
  const named = namedStatements(pool, hosts && (() => hosts.connect(pool)))
  const kysely = new Kysely<Database>({ dialect: new PostgresDialect({ pool: named }) })
  return {
    kysely,
    engine: 'postgres',
    preparedStatements: () => named.size(),
    statementTexts: () => named.texts(),
    async ping() {
      await sql`select 1`.execute(kysely)
    },
    async close() {
      await kysely.destroy()
    },
  }
}

/** Where a PostgreSQL URL points: its hosts, in order, and what a connection must find there. */
export interface PostgresTarget {
  hosts: { host: string; port: number | undefined }[]
  /** libpq's `target_session_attrs`: 'read-write' keeps only a server that accepts writes (the primary). */
  targetSessionAttrs: 'any' | 'read-write'
  /** One single-host URL per host, without `target_session_attrs`: the form pg itself parses. */
  urls: string[]
}

const URL_PARTS = /^(postgres(?:ql)?:\/\/)([^/?#]*)(.*)$/is
const HOST_ENTRY = /^(\[[0-9A-Fa-f:.]+(?:%[^\]]+)?\]|[^:[\]]*)(?::(\d{1,5}))?$/
const SESSION_ATTRS = new Set(['any', 'read-write'])

/**
 * Reads libpq's multi-host URL form, `postgres://user@h1:p1,h2:p2/db?target_session_attrs=read-write`,
 * which pg does not understand: the host list is split into one URL per host (user, password,
 * database and every other parameter kept as written). A URL with one host comes back with that
 * one host. Messages never quote the URL, which may hold a password.
 */
export function parsePostgresUrl(url: string): PostgresTarget {
  const parts = URL_PARTS.exec(url)
  if (!parts) throw new Error('DATABASE_URL: not a postgres:// URL')
  const [, scheme, authority, rest] = parts as unknown as [string, string, string, string]
  const at = authority.lastIndexOf('@')
  const userinfo = authority.slice(0, at + 1)
  const entries = authority.slice(at + 1).split(',')

  const queryAt = rest.indexOf('?')
  const fragmentAt = rest.indexOf('#', queryAt === -1 ? 0 : queryAt)
  const path = queryAt === -1 ? rest : rest.slice(0, queryAt)
  const query = queryAt === -1 ? '' : rest.slice(queryAt + 1, fragmentAt === -1 ? undefined : fragmentAt)
  const fragment = fragmentAt === -1 ? '' : rest.slice(fragmentAt)
  let targetSessionAttrs = 'any'
  const kept = query.split('&').filter((pair) => {
    if (!/^target_session_attrs=/i.test(pair)) return pair !== ''
    targetSessionAttrs = decodeURIComponent(pair.slice(pair.indexOf('=') + 1))
    return false
  })
  if (!SESSION_ATTRS.has(targetSessionAttrs)) {
    throw new Error(`DATABASE_URL: target_session_attrs=${targetSessionAttrs} is not supported (any or read-write)`)
  }
  const tail = path + (kept.length > 0 ? `?${kept.join('&')}` : '') + fragment

  const hosts = entries.map((entry, index) => {
    const match = HOST_ENTRY.exec(entry)
    // One host is pg's to read, as it always was; only a list is this function's to check.
    if (entries.length === 1 && !match) return { host: entry, port: undefined }
    if (!match || (entries.length > 1 && match[1] === '')) throw new Error(`DATABASE_URL: host ${index + 1} of ${entries.length} is not host[:port]`)
    const port = match[2] === undefined ? undefined : Number(match[2])
    if (port !== undefined && (port < 1 || port > 65535)) throw new Error(`DATABASE_URL: host ${index + 1} has port ${port}, outside 1-65535`)
    return { host: match[1]!.replace(/^\[(.*)\]$/, '$1'), port }
  })
  return { hosts, targetSessionAttrs: targetSessionAttrs as PostgresTarget['targetSessionAttrs'], urls: entries.map((entry) => scheme + userinfo + entry + tail) }
}

/**
 * libpq's multi-host behaviour, which pg lacks: a pg Client class for the pool that opens each
 * connection on a host of the list, and the checkout that tries the hosts in turn. A checkout
 * starts at the host that last worked (at first the first one listed) and goes down the list,
 * wrapping around, until a host gives a connection: one that is refused or times out is skipped,
 * and so is one that turns out to be read-only while `target_session_attrs=read-write` asks for
 * the primary (that connection is ended). When every host failed, one error says why for each (a 503).
 * Starting from the host that worked, rather than from the first each time as libpq does, spares
 * each new connection the timeout of a first host that is down or unreachable. The pool replaces
 * connections as they break, and the new ones land on the new primary.
 */
function failover(pg: typeof PgModule, target: PostgresTarget) {
  const count = target.urls.length
  /** The host a new connection starts from: the last one that worked. */
  let preferred = 0
  /** The host the checkout under way asks for (pg-pool makes its client synchronously). */
  let pinned: number | undefined
  /** A connection failure of one host (refused, timed out, read-only), and which host: the next may do better. */
  const failedOn = new WeakMap<object, number>()
  const hostOf = (error: unknown): number | undefined =>
    typeof error === 'object' && error !== null ? (failedOn.get(error) ?? failedOn.get((error as { cause?: object }).cause ?? {})) : undefined

  class FailoverClient extends pg.Client {
    readonly #index: number

    constructor(config: PgModule.ClientConfig) {
      const index = pinned ?? preferred
      super({ ...config, connectionString: target.urls[index]! })
      this.#index = index
    }

    // pg-pool calls connect with a callback; Kysely never calls it on a client.
    override connect(): Promise<PgModule.Client>
    override connect(callback: ((error: Error) => void) | ((error: null, client: PgModule.Client) => void)): void
    override connect(callback?: ((error: Error) => void) | ((error: null, client: PgModule.Client) => void)): Promise<PgModule.Client> | void {
      const opened = this.#open()
      if (!callback) return opened
      const done = callback as (error: Error | null, client?: PgModule.Client) => void
      opened.then(() => done(null, this), (error: Error) => done(error))
    }

    async #open(): Promise<PgModule.Client> {
      let connected = false
      try {
        await super.connect()
        connected = true
        if (target.targetSessionAttrs === 'read-write') {
          // libpq's own test: a standby, or a server set to default_transaction_read_only, refuses writes.
          const { rows } = await this.query<{ transaction_read_only: string }>('show transaction_read_only')
          if (rows[0]?.transaction_read_only !== 'off') throw Object.assign(new Error('read-only (a standby?)'), { code: '25006' })
        }
        preferred = this.#index
        return this
      } catch (error) {
        if (typeof error === 'object' && error !== null) failedOn.set(error, this.#index)
        if (connected) this.end().catch(() => {})
        throw error
      }
    }
  }

  const label = (index: number) => `${target.hosts[index]!.host}:${target.hosts[index]!.port ?? 5432}`

  async function connect(pool: PgModule.Pool): Promise<PgModule.PoolClient> {
    const start = preferred
    const failures: string[] = []
    for (let attempt = 0; ; attempt++) {
      const index = (start + attempt) % count
      pinned = index
      let checkout: Promise<PgModule.PoolClient>
      try {
        // An idle connection, if there is one; else a new one, made now, on the pinned host.
        checkout = pool.connect()
      } finally {
        pinned = undefined
      }
      try {
        return await checkout
      } catch (error) {
        const host = hostOf(error)
        if (host === undefined) throw error
        failures.push(`${label(host)} ${(error as Error).message}`)
        if (attempt + 1 < count) continue
        // 08001, as libpq's "could not connect": every host was tried; the caller answers 503.
        const wanted = target.targetSessionAttrs === 'read-write' ? 'a read-write session' : 'a connection'
        throw Object.assign(new Error(`no database host gave ${wanted}: ${failures.join('; ')}`, { cause: error }), { code: '08001' })
      }
    }
  }

  return { Client: FailoverClient, connect }
}

/** Every migration in order; a few need to know the engine (identity columns, clock defaults). */
export function migrationsFor(engine: Engine): Record<string, Migration> {
  return {
    '0001_initial': m0001,
    '0002_watchlists': m0002,
    '0003_lifecycle': m0003,
    '0004_mail_outbox': m0004,
    '0005_change_feed': changeFeed(engine),
    '0006_operators': m0006,
    '0007_audit_writes': m0007,
    '0008_scale': scale(engine),
    '0009_session_assurance': m0009,
    '0010_mfa': m0010,
    '0011_passkeys': m0011,
    '0012_identities': m0012,
    '0013_sign_in_bindings': m0013,
    '0014_provider': m0014,
    '0015_login_codes': m0015,
    '0016_email_sign_in': m0016,
    '0017_email_changes': m0017,
    '0018_webhooks': m0018,
    '0019_pending_proofs': m0019,
    '0020_mail_subjects': m0020,
    '0021_authorization': m0021,
    '0022_imported_hashes': m0022,
    '0023_resources': m0023,
    '0024_dynamic_registration': m0024,
    '0025_console': m0025,
    '0026_organization_pages': m0026,
    '0027_partial_record_indexes': m0027,
  }
}

/** Applies every pending migration; safe to run from several processes at once on PostgreSQL. */
export async function migrate(db: Db): Promise<string[]> {
  const run = async (kysely: Db['kysely']) => {
    const migrator = new Migrator({ db: kysely, provider: { getMigrations: async () => migrationsFor(db.engine) } })
    const { error, results } = await migrator.migrateToLatest()
    if (error) throw error
    return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName)
  }
  if (db.engine === 'sqlite') return run(db.kysely)
  // On PostgreSQL the migrations run on one connection with the lock timeout lifted: a lock a
  // migration's DDL needs (a busy table) may take longer to come than a request should wait (Kysely
  // bounds the wait for its own migration lock itself). RESET gives the connection back its
  // start-up value.
  return db.kysely.connection().execute(async (connection) => {
    await sql`set lock_timeout = 0`.execute(connection)
    try {
      return await run(connection)
    } finally {
      await sql`reset lock_timeout`.execute(connection)
    }
  })
}

/** True when the error is a unique-constraint violation on either engine. */
export function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
}

const UNAVAILABLE_NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH', 'EPIPE', 'EAI_AGAIN'])
const UNAVAILABLE_MESSAGES = [
  /Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /Client has encountered a connection error/i,
  /connection is closed/i,
  // pg's answer to a query on a connection that has already failed.
  /Client was closed and is not queryable/i,
]

/**
 * True when the error means "the database cannot be reached right now" rather than a bug:
 * such errors answer 503 and the pool recovers by itself once the server is back.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const code = (error as { code?: unknown }).code
  if (typeof code === 'string') {
    if (UNAVAILABLE_NODE_CODES.has(code)) return true
    // PostgreSQL classes 08 (connection exception), 53 (insufficient resources), 57P (operator intervention).
    if (/^(08|53)[0-9A-Z]{3}$/.test(code) || /^57P0[1-4]$/.test(code)) return true
    // read_only_sql_transaction: a write reached a standby (a failover under way); the connection
    // is dropped and the next one looks for the primary.
    if (code === '25006') return true
    // lock_not_available: the lock timeout (DATABASE_LOCK_TIMEOUT_MS); query_canceled: an operator's
    // cancel. The statement's transaction rolled back, so the request may simply be tried again.
    if (code === '55P03' || code === '57014') return true
    if (code === 'SQLITE_BUSY' || code.startsWith('SQLITE_IOERR') || code === 'SQLITE_CANTOPEN' || code === 'SQLITE_FULL') return true
  }
  return UNAVAILABLE_MESSAGES.some((pattern) => pattern.test(error.message))
}

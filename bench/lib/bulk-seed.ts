// The scale benchmark's population (bench/scale.ts), seeded in bulk into a database the service has
// already migrated: per user 2 sessions, 1 watchlist and 5 audit events, plus a spent or expired
// one-time token for about one user in ten. SQLite is filled from here through better-sqlite3 in
// big transactions; PostgreSQL by `insert ... select ... from generate_series` in the server. Both
// follow the same rules (the constants below): what the benchmark must know without asking the
// database (each user's address, whether it can log in) is a formula of the user's number i; times
// and ids are random. Secondary indexes are dropped for the load and rebuilt from their own DDL.
//   npx tsx bench/lib/bulk-seed.ts sqlite DATA_DIR USERS     (after `portcullis migrate` on that DATA_DIR)
//   npx tsx bench/lib/bulk-seed.ts postgres DATABASE_URL USERS
import { randomBytes, randomUUID } from 'node:crypto'
import { existsSync, statSync } from 'node:fs'
import path from 'node:path'
import { hash } from '@node-rs/argon2'
import SQLite from 'better-sqlite3'
import pg from 'pg'
import { ARGON2ID, OWASP_ARGON2_PARAMS } from '../../src/auth/passwords.ts'
import { timeOrderedUuid } from '../../src/text.ts'

/** Every seeded user's password. */
export const PASSWORD = 'a scale benchmark passphrase'
/** The name of the watchlists the write case adds, so they can be removed afterwards. */
export const WRITE_NAME = 'scale bench write'

const HOUR = 3_600_000
const DAY = 24 * HOUR
/** The service's refresh token lifetime (src/auth/tokens.ts REFRESH_TTL_SECONDS), which a session's expires_at follows. */
const SESSION_TTL = 7 * DAY
/** Users were created over the last 18 months, so some of their audit events are past a year old. */
const CREATED_SPREAD_DAYS = 547
/** The share of second sessions that are long expired (the rest, and every first session, are from the last week). */
const OLD_SESSION_SHARE = 0.2
const REVOKED_SHARE = 0.05
/** The service's retention of audit events (docs/operations.md; AUDIT_RETENTION_DAYS' default). */
const AUDIT_RETENTION_DAYS = 365

const FIRST = ['olivia', 'liam', 'emma', 'noah', 'amelia', 'oliver', 'ava', 'elijah', 'sophia', 'lucas', 'mia', 'levi', 'isabella', 'mateo', 'evelyn', 'james', 'harper', 'ezra', 'luna', 'henry', 'camila', 'asher', 'gianna', 'leo', 'elena', 'aiden', 'aria', 'jack', 'nora', 'owen', 'zoe', 'kai', 'hazel', 'theo', 'ines', 'omar', 'yuki', 'ravi', 'chen', 'fatima']
const LAST = ['smith', 'johnson', 'williams', 'brown', 'jones', 'garcia', 'miller', 'davis', 'rodriguez', 'martinez', 'hernandez', 'lopez', 'gonzalez', 'wilson', 'anderson', 'thomas', 'taylor', 'moore', 'jackson', 'martin', 'lee', 'perez', 'thompson', 'white', 'harris', 'sanchez', 'clark', 'ramirez', 'lewis', 'robinson', 'walker', 'young', 'allen', 'king', 'wright', 'scott', 'torres', 'nguyen', 'hill', 'flores', 'green', 'adams', 'nelson', 'baker', 'hall', 'rivera', 'campbell', 'mitchell', 'carter', 'roberts']
const DOMAINS = ['example.com', 'example.org', 'example.net', 'mail.example.com', 'inbox.example.org', 'work.example.net', 'post.example.com', 'team.example.org']
const AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15',
  'portcullis-client/0.1 (node)',
]
const NETS = ['192.0.2.', '198.51.100.', '203.0.113.']
const LIST_NAMES = ['Tech', 'Dividends', 'Watch', 'Long term', 'Energy', 'My list']
const SYMBOL_SETS = ['["AAPL","MSFT"]', '["NVDA","AMD","INTC"]', '["KO","PEP","PG","JNJ"]', '["XOM","CVX"]', '["BRK.B","JPM","V","MA","GS"]']
/**
 * The four audit events after the registration, by cumulative share. The two rare types of the
 * events-by-type case are not drawn: they replace the last event of a fixed set of users.
 */
const EVENT_MIX: [string, number][] = [
  ['login.succeeded', 0.45],
  ['token.refreshed', 0.8],
  ['login.failed', 0.9],
  ['logout', 0.95],
  ['password.changed', 0.97],
  ['session.revoked', 0.99],
  ['password.reset_requested', 1],
]
export const RARE_TYPE = 'account.exported'
const RARER_TYPE = 'sessions.revoked_by_operator'

const capital = (word: string) => word[0]!.toUpperCase() + word.slice(1)
const pick = <T>(list: readonly T[]) => list[Math.floor(Math.random() * list.length)]!
const between = (from: number, to: number) => from + Math.floor(Math.random() * Math.max(0, to - from))

/** The local part of user i's address: unique, so `local@` is a prefix that matches that user alone. */
export const localOf = (i: number) => `${FIRST[i % FIRST.length]}.${LAST[(i * 7) % LAST.length]}${i}`
export const emailOf = (i: number) => `${localOf(i)}@${DOMAINS[(i * 3) % DOMAINS.length]}`
const nameOf = (i: number) => `${capital(FIRST[i % FIRST.length]!)} ${capital(LAST[(i * 7) % LAST.length]!)}`
const isDisabled = (i: number) => i % 97 < 3
const isUnverified = (i: number) => i % 89 < 4
const hasToken = (i: number) => i % 20 === 0 || isUnverified(i)
/** Active and verified: logs in whatever REQUIRE_EMAIL_VERIFICATION says. */
export const canLogIn = (i: number) => !isDisabled(i) && !isUnverified(i)

/** Which users' fifth event is one of the rare types: `count` users spread over the population. */
function rare(users: number) {
  const count = Math.max(5, Math.round((5 * users) / 200_000))
  const rarer = Math.max(3, Math.round((5 * users) / 500_000))
  return { step: Math.floor(users / count), rarerStep: Math.floor(users / rarer), rarerOffset: Math.floor(users / rarer / 2) }
}

/** `count` users who can log in, spread evenly over the population (the next eligible one after each mark). */
export function spreadUsers(users: number, count: number): number[] {
  const chosen = new Set<number>()
  for (let k = 0; k < count && chosen.size < users; k++) {
    let i = Math.floor(((k + 0.5) * users) / count)
    while (i < users && (chosen.has(i) || !canLogIn(i))) i++
    if (i < users) chosen.add(i)
  }
  return [...chosen]
}

export async function passwordHash(): Promise<string> {
  return hash(PASSWORD, { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS })
}

/** Rows the retention pass (src/retention.ts) deletes: ended more than a day ago, audit events past AUDIT_RETENTION_DAYS' default. */
export interface Prunable {
  sessions: number
  tokens: number
  events: number
}

const prunableSql = (now: number) => ({
  sessions: `select count(*) as n from sessions where expires_at < ${now - DAY} or revoked_at < ${now - DAY}`,
  tokens: `select count(*) as n from one_time_tokens where expires_at < ${now - DAY}`,
  events: `select count(*) as n from audit_events where at < ${now - AUDIT_RETENTION_DAYS * DAY}`,
})

const GROWING = ['users', 'sessions', 'one_time_tokens', 'watchlists', 'audit_events']

// ---------------------------------------------------------------------------------------- SQLite

export const sqliteFile = (dataDir: string) => path.join(dataDir, 'portcullis.db')

export function sqliteBytes(dataDir: string): number {
  return ['', '-wal'].reduce((sum, suffix) => sum + (existsSync(sqliteFile(dataDir) + suffix) ? statSync(sqliteFile(dataDir) + suffix).size : 0), 0)
}

function openSqlite(dataDir: string) {
  const db = new SQLite(sqliteFile(dataDir))
  db.pragma('journal_mode = WAL')
  db.pragma('busy_timeout = 10000')
  return db
}

/**
 * Rows go in in the order the service would have written them (users, sessions, lists and events
 * each by time), so table pages and rowids hold the history an organically grown file would: a
 * scan by time then reads the table in order, as it would in production, not user by user.
 */
export async function seedSqlite(dataDir: string, users: number, log = (line: string) => process.stderr.write(`${line}\n`)): Promise<void> {
  const db = openSqlite(dataDir)
  // Only for the load: a crash here loses a seed, never a user's data.
  db.pragma('synchronous = OFF')
  db.pragma('cache_size = -1000000')
  db.pragma('temp_store = MEMORY')
  const indexes = db.prepare(`select name, sql from sqlite_master where type = 'index' and sql is not null and tbl_name in (${GROWING.map((t) => `'${t}'`).join(',')})`).all() as { name: string; sql: string }[]
  for (const { name } of indexes) db.exec(`drop index "${name}"`)

  const passwordHashValue = await passwordHash()
  const now = Date.now()
  const { step, rarerStep, rarerOffset } = rare(users)
  const began = performance.now()
  const seconds = () => ((performance.now() - began) / 1000).toFixed(1)

  // User i is the i-th oldest account.
  const created = new Float64Array(users)
  for (let i = 0; i < users; i++) created[i] = now - HOUR - Math.floor(Math.random() * CREATED_SPREAD_DAYS * DAY)
  created.sort()
  const ids = Array.from({ length: users }, () => randomUUID())
  const sessionAt = new Float64Array(2 * users)
  for (let i = 0; i < users; i++) {
    const age = now - created[i]!
    sessionAt[2 * i] = now - Math.floor(Math.random() * Math.min(age, SESSION_TTL))
    sessionAt[2 * i + 1] = Math.random() < OLD_SESSION_SHARE && age > 9 * DAY ? created[i]! + Math.floor(Math.random() * (age - 9 * DAY)) : now - Math.floor(Math.random() * Math.min(age, SESSION_TTL))
  }
  const listAt = Float64Array.from(created, (c) => between(c, now))
  const eventAt = new Float64Array(5 * users)
  for (let i = 0; i < users; i++) {
    eventAt[5 * i] = created[i]!
    for (let k = 1; k <= 4; k++) eventAt[5 * i + k] = between(created[i]!, now)
  }

  const insertUser = db.prepare('insert into users (id, email, full_name, password_hash, email_verified_at, status, disabled_reason, created_at, updated_at, last_login_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
  const insertSession = db.prepare('insert into sessions (id, user_id, created_at, last_used_at, expires_at, revoked_at, user_agent, ip) values (?, ?, ?, ?, ?, ?, ?, ?)')
  const insertList = db.prepare('insert into watchlists (id, user_id, position, name, symbols, created_at, updated_at) values (?, ?, 1, ?, ?, ?, ?)')
  const insertEvent = db.prepare('insert into audit_events (id, at, user_id, type, reason, ip, user_agent, request_id, actor) values (?, ?, ?, ?, ?, ?, ?, ?, ?)')
  const insertToken = db.prepare('insert into one_time_tokens (token_hash, user_id, purpose, created_at, expires_at, used_at) values (?, ?, ?, ?, ?, ?)')
  const ip = () => `${pick(NETS)}${1 + Math.floor(Math.random() * 254)}`
  const agentOf = (i: number) => AGENTS[(i * 13) % AGENTS.length]!

  const rows: [string, number, (entry: number, at: number) => void][] = [
    ['users', users, (i) => {
      const disabled = isDisabled(i)
      insertUser.run(
        ids[i], emailOf(i), nameOf(i), passwordHashValue,
        isUnverified(i) ? null : created[i]! + Math.floor(Math.random() * HOUR),
        disabled ? 'disabled' : 'active', disabled ? (i % 2 === 0 ? 'suspended' : 'banned') : null,
        created[i], between(created[i]!, now), Math.max(sessionAt[2 * i]!, sessionAt[2 * i + 1]!),
      )
      if (hasToken(i)) insertToken.run(randomBytes(32).toString('hex'), ids[i], 'verify_email', created[i], created[i]! + DAY, isUnverified(i) ? null : created[i]! + 10 * 60_000)
    }],
    ['sessions', 2 * users, (entry, at) => {
      const end = Math.min(now, at + SESSION_TTL)
      const revoked = Math.random() < REVOKED_SHARE ? between(at, end) : null
      insertSession.run(randomUUID(), ids[entry >> 1], at, between(at, end), at + SESSION_TTL, revoked, pick(AGENTS), ip())
    }],
    ['watchlists', users, (i, at) => insertList.run(randomUUID(), ids[i], LIST_NAMES[i % LIST_NAMES.length], SYMBOL_SETS[i % SYMBOL_SETS.length], at, at)],
    ['audit_events', 5 * users, (entry, at) => {
      const i = Math.floor(entry / 5)
      const k = entry % 5
      if (k === 0) return insertEvent.run(timeOrderedUuid(at), at, ids[i], 'account.registered', null, ip(), agentOf(i), randomUUID(), null)
      if (k === 4 && i % step === 0) return insertEvent.run(timeOrderedUuid(at), at, ids[i], RARE_TYPE, null, ip(), agentOf(i), randomUUID(), null)
      if (k === 4 && i % rarerStep === rarerOffset) return insertEvent.run(timeOrderedUuid(at), at, ids[i], RARER_TYPE, null, null, 'portcullis-cli', null, 'cli')
      const r = Math.random()
      const type = EVENT_MIX.find(([, upTo]) => r < upTo)?.[0] ?? 'logout'
      return insertEvent.run(timeOrderedUuid(at), at, ids[i], type, type === 'login.failed' ? 'wrong_password' : null, ip(), agentOf(i), randomUUID(), null)
    }],
  ]
  const times: Record<string, Float64Array> = { users: created, sessions: sessionAt, watchlists: listAt, audit_events: eventAt }
  for (const [table, count, insert] of rows) {
    const order = byTime(times[table]!, count)
    const BATCH = 50_000
    const batch = db.transaction((from: number, to: number) => {
      for (let n = from; n < to; n++) insert(order[n]!, times[table]![order[n]!]!)
    })
    for (let from = 0; from < count; from += BATCH) batch(from, Math.min(count, from + BATCH))
    log(`  sqlite: ${table}: ${count} rows by ${seconds()} s`)
  }
  for (const { name, sql } of indexes) {
    db.exec(sql)
    log(`  sqlite: index ${name} by ${seconds()} s`)
  }
  db.pragma('wal_checkpoint(TRUNCATE)')
  db.close()
}

/** The entry numbers 0..count-1 in the order of their times (ties by number). */
function byTime(times: Float64Array, count: number): Uint32Array {
  // Sorted as 64-bit keys (ms since the earliest time, then the entry number), natively, without a comparator.
  let earliest = Infinity
  for (let n = 0; n < count; n++) earliest = Math.min(earliest, times[n]!)
  const keys = new BigUint64Array(count)
  for (let n = 0; n < count; n++) keys[n] = (BigInt(times[n]! - earliest) << 24n) | BigInt(n)
  keys.sort()
  if (count >= 1 << 24) throw new Error('scale-seed: at most 3.3 million users (entry numbers have 24 bits)')
  const order = new Uint32Array(count)
  for (let n = 0; n < count; n++) order[n] = Number(keys[n]! & 0xffffffn)
  return order
}

export function sqliteCount(dataDir: string, now = Date.now()): Prunable {
  const db = openSqlite(dataDir)
  try {
    const queries = prunableSql(now)
    const count = (sql: string) => Number((db.prepare(sql).get() as { n: number }).n)
    return { sessions: count(queries.sessions), tokens: count(queries.tokens), events: count(queries.events) }
  } finally {
    db.close()
  }
}

/** Removes what the write case added (the server must be stopped or idle). */
export function sqliteCleanup(dataDir: string): number {
  const db = openSqlite(dataDir)
  try {
    return db.prepare('delete from watchlists where name = ?').run(WRITE_NAME).changes
  } finally {
    db.close()
  }
}

/**
 * Puts back prunable rows (long-expired sessions, spent tokens, audit events past retention) up
 * to `target`, for random users, so a retention pass has the seed's amount of work however many
 * passes ran before.
 */
export function sqliteTopUp(dataDir: string, target: Prunable): Prunable {
  const now = Date.now()
  const have = sqliteCount(dataDir, now)
  const need = { sessions: Math.max(0, target.sessions - have.sessions), tokens: Math.max(0, target.tokens - have.tokens), events: Math.max(0, target.events - have.events) }
  const db = openSqlite(dataDir)
  try {
    const ids = (count: number) => (db.prepare('select id from users order by random() limit ?').pluck().all(count) as string[])
    const insertSession = db.prepare('insert into sessions (id, user_id, created_at, last_used_at, expires_at, revoked_at, user_agent, ip) values (?, ?, ?, ?, ?, null, ?, ?)')
    const insertEvent = db.prepare('insert into audit_events (id, at, user_id, type, reason, ip, user_agent, request_id, actor) values (?, ?, ?, ?, null, ?, ?, ?, null)')
    const insertToken = db.prepare("insert into one_time_tokens (token_hash, user_id, purpose, created_at, expires_at, used_at) values (?, ?, 'reset_password', ?, ?, ?)")
    db.transaction(() => {
      for (const id of ids(need.sessions)) {
        const created = now - 10 * DAY - Math.floor(Math.random() * 300 * DAY)
        insertSession.run(randomUUID(), id, created, created + HOUR, created + SESSION_TTL, pick(AGENTS), `${pick(NETS)}7`)
      }
      for (const id of ids(Math.ceil(need.events / 5))) {
        for (let k = 0; k < 5; k++) {
          const at = now - (AUDIT_RETENTION_DAYS + 2) * DAY - Math.floor(Math.random() * 150 * DAY)
          insertEvent.run(timeOrderedUuid(at), at, id, k % 2 ? 'token.refreshed' : 'login.succeeded', `${pick(NETS)}9`, pick(AGENTS), randomUUID())
        }
      }
      for (const id of ids(need.tokens)) {
        const created = now - 3 * DAY - Math.floor(Math.random() * 300 * DAY)
        insertToken.run(randomBytes(32).toString('hex'), id, created, created + HOUR, created + 60_000)
      }
    })()
  } finally {
    db.close()
  }
  return need
}

// ------------------------------------------------------------------------------------ PostgreSQL

const list = (values: readonly string[]) => `array[${values.map((v) => `'${v.replace(/'/g, "''")}'`).join(', ')}]`
/** A time-ordered UUID (src/text.ts timeOrderedUuid) of the bigint expression `at`, in SQL. */
const uuid7 = (at: string) => `substr(lpad(to_hex(${at}), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(${at}), 12, '0'), 9, 4) || '-7' || substr(gen_random_uuid()::text, 16)`
const sqlIp = `(${list(NETS)})[1 + floor(random() * ${NETS.length})::int] || (1 + floor(random() * 254)::int)`
const sqlAgent = `(${list(AGENTS)})[1 + floor(random() * ${AGENTS.length})::int]`
const sqlBetween = (from: string, to: string) => `(${from} + floor(random() * greatest(0, ${to} - ${from})))::bigint`

export async function withPg<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await run(client)
  } finally {
    await client.end()
  }
}

export async function seedPostgres(url: string, users: number, log = (line: string) => process.stderr.write(`${line}\n`)): Promise<void> {
  const passwordHashValue = await passwordHash()
  const now = Date.now()
  const { step, rarerStep, rarerOffset } = rare(users)
  await withPg(url, async (db) => {
    const timed = async (label: string, text: string, values: unknown[] = []) => {
      const began = performance.now()
      const result = await db.query(text, values)
      log(`  postgres: ${label}${result.rowCount ? ` ${result.rowCount} rows` : ''} in ${((performance.now() - began) / 1000).toFixed(1)} s`)
    }
    // Bulk-load settings of this session only: no foreign-key triggers (the rows are consistent by
    // construction), memory for the index builds. The throwaway cluster's role is a superuser.
    await db.query("set session_replication_role = 'replica'")
    await db.query("set maintenance_work_mem = '512MB'")
    await db.query("set work_mem = '256MB'")
    const indexes = (await db.query<{ indexname: string; indexdef: string }>(
      `select indexname, indexdef from pg_indexes where schemaname = current_schema() and tablename = any($1)
       and indexname not in (select conname from pg_constraint)`, [GROWING])).rows
    for (const { indexname } of indexes) await db.query(`drop index "${indexname}"`)

    // User i is the i-th oldest account, as in seedSqlite; every table is filled in time order.
    await timed('staging', `create unlogged table scale_seed as
      select i, id, created, recent,
        case when random() < ${OLD_SESSION_SHARE} and ${now} - created > ${9 * DAY} then ${sqlBetween('created', `${now - 9 * DAY}`)}
             else ${now} - floor(random() * least(${now} - created, ${SESSION_TTL}))::bigint end as older,
        (${list(AGENTS)})[(i * 13) % ${AGENTS.length} + 1] as agent
      from (select i, gen_random_uuid()::text as id, created, ${now} - floor(random() * least(${now} - created, ${SESSION_TTL}))::bigint as recent
            from (select (row_number() over (order by created) - 1)::int as i, created
                  from (select ${now - HOUR} - floor(random() * ${CREATED_SPREAD_DAYS * DAY})::bigint as created from generate_series(1, ${users})) a) b) c`)
    const first = `(${list(FIRST)})[i % ${FIRST.length} + 1]`
    const last = `(${list(LAST)})[(i * 7) % ${LAST.length} + 1]`
    await timed('users', `insert into users (id, email, full_name, password_hash, email_verified_at, status, disabled_reason, created_at, updated_at, last_login_at)
      select id, ${first} || '.' || ${last} || i || '@' || (${list(DOMAINS)})[(i * 3) % ${DOMAINS.length} + 1],
        initcap(${first}) || ' ' || initcap(${last}), $1,
        case when i % 89 < 4 then null else created + floor(random() * ${HOUR})::bigint end,
        case when i % 97 < 3 then 'disabled' else 'active' end,
        case when i % 97 < 3 then (case when i % 2 = 0 then 'suspended' else 'banned' end) end,
        created, ${sqlBetween('created', `${now}`)}, greatest(recent, older)
      from scale_seed order by i`, [passwordHashValue])
    await timed('sessions', `insert into sessions (id, user_id, created_at, last_used_at, expires_at, revoked_at, user_agent, ip)
      select gen_random_uuid()::text, id, s, ${sqlBetween('s', `least(${now}, s + ${SESSION_TTL})`)}, s + ${SESSION_TTL},
        case when random() < ${REVOKED_SHARE} then ${sqlBetween('s', `least(${now}, s + ${SESSION_TTL})`)} end, ${sqlAgent}, ${sqlIp}
      from (select id, recent as s from scale_seed union all select id, older from scale_seed) x order by s`)
    await timed('watchlists', `insert into watchlists (id, user_id, position, name, symbols, created_at, updated_at)
      select gen_random_uuid()::text, id, 1, (${list(LIST_NAMES)})[i % ${LIST_NAMES.length} + 1], (${list(SYMBOL_SETS)})[i % ${SYMBOL_SETS.length} + 1], w, w
      from (select i, id, ${sqlBetween('created', `${now}`)} as w from scale_seed) x order by w`)
    const drawn = `case ${EVENT_MIX.map(([type, upTo]) => `when r < ${upTo} then '${type}'`).join(' ')} else 'logout' end`
    await timed('events', `insert into audit_events (id, at, user_id, type, reason, ip, user_agent, request_id, actor)
      select ${uuid7('at')}, at, id, type, case when type = 'login.failed' then 'wrong_password' end,
        case when type = '${RARER_TYPE}' then null else ${sqlIp} end,
        case when type = '${RARER_TYPE}' then 'portcullis-cli' else agent end,
        case when type = '${RARER_TYPE}' then null else gen_random_uuid()::text end,
        case when type = '${RARER_TYPE}' then 'cli' end
      from (select id, agent, created as at, 'account.registered' as type from scale_seed
            union all
            select id, agent, ${sqlBetween('created', `${now}`)},
              case when k = 4 and i % ${step} = 0 then '${RARE_TYPE}' when k = 4 and i % ${rarerStep} = ${rarerOffset} then '${RARER_TYPE}' else ${drawn} end
            from (select i, id, agent, created, k, random() as r from scale_seed cross join generate_series(1, 4) as k) y) x order by at`)
    await timed('tokens', `insert into one_time_tokens (token_hash, user_id, purpose, created_at, expires_at, used_at)
      select md5(random()::text) || md5(random()::text), id, 'verify_email', created, created + ${DAY}, case when i % 89 < 4 then null else created + 600000 end
      from scale_seed where i % 20 = 0 or i % 89 < 4 order by created`)
    await db.query('drop table scale_seed')
    for (const { indexname, indexdef } of indexes) await timed(`index ${indexname}`, indexdef)
    // What autovacuum would have done by the time anyone queried a table this size.
    await timed('vacuum analyze', 'vacuum analyze')
  })
}

export async function pgCount(url: string, now = Date.now()): Promise<Prunable> {
  return withPg(url, async (db) => {
    const queries = prunableSql(now)
    const count = async (sql: string) => Number((await db.query<{ n: string }>(sql)).rows[0]!.n)
    return { sessions: await count(queries.sessions), tokens: await count(queries.tokens), events: await count(queries.events) }
  })
}

export async function pgBytes(url: string): Promise<number> {
  return withPg(url, async (db) => Number((await db.query<{ n: string }>('select pg_database_size(current_database()) as n')).rows[0]!.n))
}

export async function pgCleanup(url: string): Promise<number> {
  return withPg(url, async (db) => (await db.query('delete from watchlists where name = $1', [WRITE_NAME])).rowCount ?? 0)
}

export async function pgTopUp(url: string, target: Prunable): Promise<Prunable> {
  const now = Date.now()
  const have = await pgCount(url, now)
  const need = { sessions: Math.max(0, target.sessions - have.sessions), tokens: Math.max(0, target.tokens - have.tokens), events: Math.max(0, target.events - have.events) }
  await withPg(url, async (db) => {
    await db.query(`insert into sessions (id, user_id, created_at, last_used_at, expires_at, revoked_at, user_agent, ip)
      select gen_random_uuid()::text, id, c, c + ${HOUR}, c + ${SESSION_TTL}, null, ${sqlAgent}, ${sqlIp}
      from (select id, ${now - 10 * DAY} - floor(random() * ${300 * DAY})::bigint as c from users order by random() limit $1) x`, [need.sessions])
    await db.query(`insert into audit_events (id, at, user_id, type, reason, ip, user_agent, request_id, actor)
      select ${uuid7('at')}, at, id, case when k % 2 = 0 then 'login.succeeded' else 'token.refreshed' end, null, ${sqlIp}, ${sqlAgent}, gen_random_uuid()::text, null
      from (select id, k, ${now - (AUDIT_RETENTION_DAYS + 2) * DAY} - floor(random() * ${150 * DAY})::bigint as at
            from (select id from users order by random() limit $1) u cross join generate_series(1, 5) as k) x`, [Math.ceil(need.events / 5)])
    await db.query(`insert into one_time_tokens (token_hash, user_id, purpose, created_at, expires_at, used_at)
      select md5(random()::text) || md5(random()::text), id, 'reset_password', c, c + ${HOUR}, c + 60000
      from (select id, ${now - 3 * DAY} - floor(random() * ${300 * DAY})::bigint as c from users order by random() limit $1) x`, [need.tokens])
  })
  return need
}

const isEntry = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (isEntry) {
  const [engine, target, users] = process.argv.slice(2)
  if (!engine || !target || !users || !['sqlite', 'postgres'].includes(engine)) {
    process.stderr.write('usage: tsx bench/lib/bulk-seed.ts sqlite DATA_DIR USERS | postgres DATABASE_URL USERS (on a migrated, empty database)\n')
    process.exitCode = 2
  } else {
    const began = performance.now()
    await (engine === 'sqlite' ? seedSqlite(target, Number(users)) : seedPostgres(target, Number(users)))
    process.stderr.write(`seeded ${users} users in ${((performance.now() - began) / 1000).toFixed(1)} s\n`)
  }
}

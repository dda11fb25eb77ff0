// The scale benchmark (issue 26, item 4): the built service on a database seeded in bulk with a
// thousand users and with a million (per user 2 sessions, 1 watchlist, 5 audit events;
// bench/lib/bulk-seed.ts), on SQLite and on PostgreSQL, in one run. For each it reports start-up
// time, RSS, p50/p99 and req/s of login, refresh, a bearer read, a watchlist write, the admin
// searches, the operators' console's users pages (issue 44: the first page, an address search, a
// user's page, with an operator's console session; bench/lib/console-session.ts), and the p99 of
// /healthz probes sent while each admin query runs in a loop; then one Markdown table with the
// ratio of the largest population to the smallest beside the goals.
//   npm run bench:scale
//   BENCH_SCALE_USERS=1000,20000 npm run bench:scale        (a quick check)
// Environment: BENCH_SCALE_USERS (default 1000,1000000), BENCH_SCALE_ENGINES (sqlite,postgres),
// BENCH_SCALE_SECONDS (10, each measured case), BENCH_SCALE_WARMUP (2), BENCH_SCALE_CONNECTIONS
// (16; login always 8, admin queries one at a time), BENCH_SCALE_CONSOLE_CONNECTIONS (4, the
// console's pages), BENCH_SCALE_PROBE_MS (50, the /healthz probes' spacing), BENCH_SCALE_BUILD
// (another built tree to run, its dist/, package.json and bin/, for instance one made with `git
// archive COMMIT | tar -x -C DIR`, node_modules linked, `npm run build` there: a before-and-after
// without touching this checkout), BENCH_SCALE_DIR
// (/tmp/portcullis-scale), BENCH_SCALE_PG_PORT (55488). BENCH_SCALE_KEEP=1 keeps the seeded
// databases (and the PostgreSQL cluster, stopped) for a later BENCH_SCALE_REUSE=1 run, which uses
// them instead of seeding again (migrating them first if the build brings new migrations).
// The service, its CLI and the loads are bench/lib's (server.ts, load.ts), with its environment
// (per-address limits lifted, LOG_LEVEL).
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import path from 'node:path'
import {
  canLogIn, emailOf, localOf, PASSWORD, pgBytes, pgCleanup, pgCount, pgTopUp, RARE_TYPE, spreadUsers,
  sqliteBytes, sqliteCleanup, sqliteCount, sqliteTopUp, withPg, WRITE_NAME, type Prunable,
} from './lib/bulk-seed.ts'
import { consoleSignIn, makeOperator, sessionLives, CONSOLE_COOKIE, type ConsoleOperator } from './lib/console-session.ts'
import { autocannonVersion, loadInChild, loadUntilStopped, trickle, type LoadResult, type LoadSpec } from './lib/load.ts'
import { mb, pause, times } from './lib/report.ts'
import { BENCH_ENV, cli, freePort, startServer, type BenchServer } from './lib/server.ts'

type Engine = 'sqlite' | 'postgres'
const USERS = (process.env.BENCH_SCALE_USERS ?? '1000,1000000').split(',').map(Number).sort((a, b) => a - b)
const ENGINES = (process.env.BENCH_SCALE_ENGINES ?? 'sqlite,postgres').split(',') as Engine[]
const SECONDS = Number(process.env.BENCH_SCALE_SECONDS ?? 10)
const WARMUP = Number(process.env.BENCH_SCALE_WARMUP ?? 2)
const CONNECTIONS = Number(process.env.BENCH_SCALE_CONNECTIONS ?? 16)
const LOGIN_CONNECTIONS = 8
/** The console's pages: a few operators at once. */
const CONSOLE_CONNECTIONS = Number(process.env.BENCH_SCALE_CONSOLE_CONNECTIONS ?? 4)
const ROOT = process.env.BENCH_SCALE_DIR ?? '/tmp/portcullis-scale'
const PG_PORT = Number(process.env.BENCH_SCALE_PG_PORT ?? 55488)
const KEEP = Boolean(process.env.BENCH_SCALE_KEEP)
const REUSE = Boolean(process.env.BENCH_SCALE_REUSE)
/** The tree whose build is measured: this checkout, or another built one. */
const BUILD = path.resolve(process.env.BENCH_SCALE_BUILD ?? '.')
/** Users whose tokens the bearer reads and refreshes rotate through. */
const READERS = 100
/** Users the watchlist writes rotate through: each may hold 100 lists, so this many bounds the writes a run can make. */
const WRITERS = 400
/** Seeded users the logins rotate through. */
const LOGIN_USERS = 1000
/**
 * The /healthz probes' spacing while an admin query loops: a steady trickle (200 probes in 10 s),
 * not a load of its own. Each probe that finds no idle kept-alive connection opens one, as a load
 * balancer's health check does.
 */
const PROBE_INTERVAL_MS = Number(process.env.BENCH_SCALE_PROBE_MS ?? 50)
/** A prefix no address has, sorting in the middle of the seeded ones. */
const NO_MATCH = 'kx.nobody'

for (const engine of ENGINES) if (engine !== 'sqlite' && engine !== 'postgres') throw new Error(`BENCH_SCALE_ENGINES: unknown engine ${engine}`)
if (USERS.some((n) => !Number.isInteger(n) || n < 100)) throw new Error('BENCH_SCALE_USERS: whole numbers of at least 100')
if (!existsSync(path.join(BUILD, 'dist/server.js'))) throw new Error(`no dist/server.js in ${BUILD}: run npm run build there first`)

const log = (line: string) => process.stderr.write(`${line}\n`)
const label = (n: number) => (n >= 1e6 && n % 1e6 === 0 ? `${n / 1e6}M` : n >= 1000 && n % 1000 === 0 ? `${n / 1000}k` : String(n))
const retentionBuilt = () => readFileSync(path.join(BUILD, 'dist/server.js'), 'utf8').includes('RETENTION_INTERVAL_SECONDS')

// ------------------------------------------------------------------------------------ PostgreSQL

const pgDir = path.join(ROOT, 'pg')
const pgAdminUrl = `postgres://app@127.0.0.1:${PG_PORT}/postgres`
const pgUrl = (users: number) => `postgres://app@127.0.0.1:${PG_PORT}/scale_${users}`

function pgBin(): string {
  for (const dir of ['/usr/lib/postgresql/17/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/15/bin']) if (existsSync(`${dir}/pg_ctl`)) return dir
  return path.dirname(execFileSync('sh', ['-c', 'command -v pg_ctl'], { encoding: 'utf8' }).trim())
}
/** pg_ctl as the cluster's owner (initdb refused root, so scripts/pg-throwaway.sh made it the postgres user's). */
function pgCtl(args: string[]) {
  const command = [`${pgBin()}/pg_ctl`, '-D', `${pgDir}/data`, ...args]
  return process.getuid?.() === 0 ? spawnSync('runuser', ['-u', 'postgres', '--', ...command], { encoding: 'utf8' }) : spawnSync(command[0]!, command.slice(1), { encoding: 'utf8' })
}

function startCluster(): void {
  if (existsSync(`${pgDir}/data`) && REUSE) {
    if (pgCtl(['status']).status === 0) return
    // The options scripts/pg-throwaway.sh starts its clusters with.
    const started = pgCtl(['-l', `${pgDir}/log`, '-w', '-o', `-c listen_addresses=127.0.0.1 -p ${PG_PORT} -k ${pgDir} -c fsync=off -c max_connections=200`, 'start'])
    if (started.status !== 0) throw new Error(`could not restart the kept PostgreSQL cluster: ${started.stderr}`)
    return
  }
  spawnSync('scripts/pg-throwaway.sh', ['stop', pgDir])
  const started = spawnSync('scripts/pg-throwaway.sh', ['start', pgDir, String(PG_PORT)], { encoding: 'utf8' })
  if (started.status !== 0) throw new Error(`could not start PostgreSQL: ${started.stderr}`)
}

function stopCluster(): void {
  if (KEEP) pgCtl(['-m', 'fast', 'stop'])
  else spawnSync('scripts/pg-throwaway.sh', ['stop', pgDir])
}

// ----------------------------------------------------------------------------------------- seeds

interface Seed {
  engine: Engine
  users: number
  /** DATA_DIR, and DATABASE_URL for PostgreSQL: what the service and its CLI are given. */
  env: Record<string, string>
  apiKey: string
  seededAt: string
  seedSeconds: number
  /** Prunable rows right after seeding: what the retention case puts back before it runs. */
  prunable: Prunable
  reused?: boolean
}

const seedDir = (engine: Engine, users: number) => path.join(ROOT, `${engine}-${users}`)
const metaFile = (engine: Engine, users: number) => path.join(seedDir(engine, users), 'scale-seed.json')
const bytesOf = (seed: Seed) => (seed.engine === 'sqlite' ? Promise.resolve(sqliteBytes(seed.env.DATA_DIR!)) : pgBytes(seed.env.DATABASE_URL!))

async function prepareSeed(engine: Engine, users: number): Promise<Seed> {
  const dir = seedDir(engine, users)
  const kept = REUSE && existsSync(metaFile(engine, users)) &&
    (engine === 'sqlite' || (await withPg(pgAdminUrl, async (db) => (await db.query('select 1 from pg_database where datname = $1', [`scale_${users}`])).rowCount === 1)))
  if (kept) {
    log(`${engine} ${label(users)}: reusing the seed in ${dir}`)
    return { ...(JSON.parse(readFileSync(metaFile(engine, users), 'utf8')) as Seed), reused: true }
  }
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  const env: Record<string, string> = { DATA_DIR: dir }
  if (engine === 'postgres') {
    await withPg(pgAdminUrl, async (db) => {
      await db.query(`drop database if exists scale_${users}`)
      await db.query(`create database scale_${users}`)
    })
    env.DATABASE_URL = pgUrl(users)
  }
  log(`${engine} ${label(users)}: migrating, then seeding`)
  cli(['migrate'], env, BUILD)
  const began = performance.now()
  // In a process of its own: the seed's arrays would otherwise stay in this one's heap, beside the probes it times.
  const seeding = spawnSync(process.execPath, ['--import', 'tsx', 'bench/lib/bulk-seed.ts', engine, engine === 'sqlite' ? dir : env.DATABASE_URL!, String(users)], { stdio: ['ignore', 'inherit', 'inherit'] })
  if (seeding.status !== 0) throw new Error(`seeding ${engine} ${users} failed`)
  const seedSeconds = (performance.now() - began) / 1000
  const apiKey = cli(['api-keys', 'create', '--name', 'scale-bench', '--scopes', 'users:read,users:write,audit:read'], env, BUILD)
  const prunable = engine === 'sqlite' ? sqliteCount(dir) : await pgCount(env.DATABASE_URL!)
  const seed: Seed = { engine, users, env, apiKey, seededAt: new Date().toISOString(), seedSeconds, prunable }
  writeFileSync(metaFile(engine, users), JSON.stringify(seed, null, 2))
  log(`${engine} ${label(users)}: seeded in ${seedSeconds.toFixed(0)} s`)
  return seed
}

// ------------------------------------------------------------------------------------- measuring

interface Tokens {
  access_token: string
  refresh_token: string
}

async function logIn(api: string, people: number[]): Promise<Tokens[]> {
  const tokens: Tokens[] = []
  for (let k = 0; k < people.length; k += 4) {
    tokens.push(...(await Promise.all(people.slice(k, k + 4).map(async (i) => {
      const response = await fetch(`${api}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: emailOf(i), password: PASSWORD }) })
      if (!response.ok) throw new Error(`login of seeded user ${i} failed with ${response.status}: ${await response.text()}`)
      return ((await response.json()) as { data: Tokens }).data
    }))))
  }
  return tokens
}

interface AdminCase {
  name: string
  short: string
  path: string
}

const adminCases = (users: number): AdminCase[] => [
  { name: 'GET /admin/users?email=<one address>', short: 'one-address prefix', path: `/admin/users?email=${encodeURIComponent(`${localOf(Math.floor(users / 2))}@`)}` },
  { name: `GET /admin/users?email=<no address> (${NO_MATCH})`, short: 'no-address prefix', path: `/admin/users?email=${NO_MATCH}` },
  { name: 'GET /admin/users?status=disabled', short: 'disabled', path: '/admin/users?status=disabled' },
  { name: `GET /admin/events?type=<rare type> (${RARE_TYPE})`, short: 'rare events', path: `/admin/events?type=${RARE_TYPE}` },
]

/** The console's pages measured (issue 44, item 5), with an operator's console session. */
interface ConsoleCase {
  name: string
  short: string
  /** Under the console's path (/console). */
  page: string
}

/** The seeded user whose page is read and whose address is searched for: one in the middle. */
const middleOf = (users: number) => Math.floor(users / 2)

const consoleCases = (users: number, middleId: string): ConsoleCase[] => [
  { name: 'GET /console/users (the first page, oldest first)', short: 'first page', page: '/users' },
  { name: 'GET /console/users?email=<one-address prefix>', short: 'search', page: `/users?email=${encodeURIComponent(`${localOf(middleOf(users))}@`)}` },
  { name: 'GET /console/users/{id} (a seeded user in the middle)', short: "a user's page", page: `/users/${middleId}` },
]

interface Measured {
  seed: Seed
  bytes: number
  migrate: string
  migrateMs: number
  firstStartMs: number
  startMs: number
  rssIdle: number
  rssLoaded: number
  cases: Record<string, LoadResult>
  /** How many rows each admin query answered with (a sanity check of the population). */
  matches: Record<string, number>
  /** What each console page showed before it was measured: users listed, or the page's size. */
  consolePages: Record<string, string>
  healthIdle: LoadResult
  healthDuring: Record<string, { probe: LoadResult; admin: LoadResult }>
  retention?: { during: LoadResult; after: LoadResult; added: Prunable; prunedDuring: Prunable; left: Prunable }
  loads: number[]
}

/** One seeded database with its service running, and what has been measured on it so far. */
interface Running {
  seed: Seed
  /** Fixed for the run: tokens name the service's URL, port included, so every restart is on it. */
  port: number
  service: BenchServer
  readers: Tokens[]
  writers: Tokens[]
  logins: number[]
  console: {
    operator: ConsoleOperator
    /** The `portcullis_console` cookie's value: renewed before a case if the session has ended. */
    token: string
    /** The console's path under PUBLIC_URL (/console) and the middle seeded user's id. */
    path: string
    middleId: string
  }
  measured: Partial<Measured> & { cases: Record<string, LoadResult>; healthDuring: Measured['healthDuring']; matches: Record<string, number>; consolePages: Record<string, string>; loads: number[] }
}

const access = (list: Tokens[]) => list.map((t) => t.access_token)

/**
 * The service on a seed's database and data directory (given, so never removed), on the run's
 * port, with no drain on stop (nothing is in flight when the bench stops it). A million users'
 * first start after seeding or migrating may take minutes.
 */
const start = (env: Record<string, string>, port: number) =>
  startServer(env, { dataDir: env.DATA_DIR, port, tree: BUILD, readyTimeoutMs: 600_000 })

function note(run: Running, what: string) {
  run.measured.loads.push(loadavg()[0]!)
  log(`  ${run.seed.engine} ${label(run.seed.users)}: ${what} (load ${loadavg()[0]!.toFixed(2)})`)
}

async function timedLoad(run: Running, name: string, spec: Omit<LoadSpec, 'seconds' | 'warmupSeconds'>): Promise<LoadResult> {
  note(run, name)
  const result = await loadInChild({ seconds: SECONDS, warmupSeconds: WARMUP, ...spec })
  if (result.non2xx || result.errors) log(`    ${name}: ${result.non2xx} non-2xx, ${result.errors} errors: ${JSON.stringify(result.statuses)}`)
  return result
}

/** Migrates (the build may bring migrations), starts once (keys, secrets), then the timed start; logs in the users the cases rotate through. */
async function bringUp(seed: Seed): Promise<Running> {
  const { env, users } = seed
  const run: Running = {
    seed, port: await freePort(), service: undefined as unknown as BenchServer, readers: [], writers: [], logins: [],
    console: undefined as unknown as Running['console'], measured: { seed, cases: {}, healthDuring: {}, matches: {}, consolePages: {}, loads: [] },
  }
  note(run, 'migrate, first start, timed start')
  const began = performance.now()
  run.measured.migrate = cli(['migrate'], env, BUILD)
  run.measured.migrateMs = performance.now() - began
  const first = await start(env, run.port)
  run.measured.firstStartMs = first.readyMs
  await first.stop()
  run.service = await start(env, run.port)
  run.measured.startMs = run.service.readyMs
  await pause(2000)
  run.measured.rssIdle = run.service.rss()
  const tokens = await logIn(run.service.api, spreadUsers(users, READERS + WRITERS))
  run.readers = tokens.filter((_, k) => k % 5 === 0)
  run.writers = tokens.filter((_, k) => k % 5 !== 0)
  run.logins = spreadUsers(users, LOGIN_USERS).filter(canLogIn)
  await openConsole(run)
  return run
}

/**
 * The console's operator and session (bench/lib/console-session.ts): an account registered on this
 * seed, its address verified and the operator role given by the CLI, a TOTP factor; kept beside
 * the seed, so a BENCH_SCALE_REUSE run signs the same one in again (a new one if that fails).
 */
async function openConsole(run: Running): Promise<void> {
  const { seed } = run
  const file = path.join(seedDir(seed.engine, seed.users), 'console-operator.json')
  let operator = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as ConsoleOperator) : undefined
  let signedIn: Awaited<ReturnType<typeof consoleSignIn>> | undefined
  if (operator) {
    try {
      signedIn = await consoleSignIn(run.service.base, operator)
    } catch (error) {
      log(`  ${seed.engine} ${label(seed.users)}: the kept console operator ${operator.email} could not sign in (${(error as Error).message.slice(0, 200)}); making a new one`)
      operator = undefined
    }
  }
  if (!operator) {
    operator = await makeOperator(run.service.api, (args) => cli(args, seed.env, BUILD), `scale-console-${Date.now().toString(36)}@example.com`)
    signedIn = await consoleSignIn(run.service.base, operator)
  }
  writeFileSync(file, JSON.stringify(operator, null, 2))
  const middle = `${localOf(middleOf(seed.users))}@`
  const found = (await (await fetch(`${run.service.api}/admin/users?email=${encodeURIComponent(middle)}`, { headers: { authorization: `Bearer ${seed.apiKey}` } })).json()) as { data?: { users?: { user_id: string }[] } }
  const middleId = found.data?.users?.[0]?.user_id
  if (!middleId) throw new Error(`no seeded user ${middle} found: ${JSON.stringify(found).slice(0, 300)}`)
  run.console = { operator, token: signedIn!.token, path: signedIn!.path, middleId }
}

/** The console's session, signed in again if it has ended (30 minutes idle, 12 hours old). */
async function liveConsole(run: Running): Promise<void> {
  if (await sessionLives(run.service.base, run.console.path, run.console.token)) return
  log(`  ${run.seed.engine} ${label(run.seed.users)}: the console session had ended; signing in again`)
  const { token } = await consoleSignIn(run.service.base, run.console.operator, run.console.path)
  run.console.token = token
  writeFileSync(path.join(seedDir(run.seed.engine, run.seed.users), 'console-operator.json'), JSON.stringify(run.console.operator, null, 2))
}

const consoleUrl = (run: Running, c: ConsoleCase) => `${run.service.base}${run.console.path}${c.page}`
const consoleHeaders = (run: Running) => ({ cookie: `${CONSOLE_COOKIE}=${run.console.token}` })

interface Case {
  key: string
  /** Made ready first (outside the measured time). */
  before?: (run: Running) => Promise<void>
  spec: (run: Running) => Omit<LoadSpec, 'seconds' | 'warmupSeconds'>
}

function cases(): Case[] {
  const api = (run: Running) => run.service.api
  const admin = (run: Running) => ({ authorization: `Bearer ${run.seed.apiKey}` })
  return [
    { key: 'login', spec: (run) => ({ url: `${api(run)}/auth/login`, method: 'POST', connections: LOGIN_CONNECTIONS, bodiesInTurn: run.logins.map((i) => JSON.stringify({ email: emailOf(i), password: PASSWORD })) }) },
    { key: 'refresh', spec: (run) => ({ url: `${api(run)}/auth/refresh`, method: 'POST', connections: CONNECTIONS, bodiesInTurn: run.readers.map((t) => JSON.stringify({ refresh_token: t.refresh_token })) }) },
    { key: 'read', spec: (run) => ({ url: `${api(run)}/watchlists`, connections: CONNECTIONS, tokens: access(run.readers) }) },
    // Each writer holds its seeded list; 20 + 75 more each stays under the limit of 100 with the requests in flight at the cap
    // (every connection goes through all the writers, each from its own starting point, so each writer gets about its share).
    {
      key: 'write',
      spec: (run) => ({
        url: `${api(run)}/watchlists`, method: 'POST', connections: CONNECTIONS, tokens: access(run.writers),
        body: JSON.stringify({ name: WRITE_NAME, symbols: ['AAPL', 'MSFT', 'NVDA'] }), maxWarmupResponses: run.writers.length * 20, maxResponses: run.writers.length * 75,
      }),
    },
    ...adminCases(1000).map((c, n) => ({
      key: c.name,
      spec: (run: Running) => ({ url: `${api(run)}${adminCases(run.seed.users)[n]!.path}`, headers: admin(run), connections: 1, sequential: { minRequests: 3 } }),
    })),
    ...consoleCases(1000, '').map((c, n) => ({
      key: c.name,
      before: liveConsole,
      spec: (run: Running) => ({ url: consoleUrl(run, consoleCases(run.seed.users, run.console.middleId)[n]!), headers: consoleHeaders(run), connections: CONSOLE_CONNECTIONS }),
    })),
  ]
}

/** The same case on each population in turn, the order alternating from case to case, so a drift of the machine falls on both sides. */
function inTurn(runs: Running[], k: number): Running[] {
  return k % 2 === 0 ? runs : [...runs].reverse()
}

async function measureEngine(seeds: Seed[]): Promise<Measured[]> {
  const runs: Running[] = []
  try {
    for (const seed of seeds) runs.push(await bringUp(seed))
    for (const run of runs) {
      for (const { name, path: route } of adminCases(run.seed.users)) {
        const body = (await (await fetch(`${run.service.api}${route}`, { headers: { authorization: `Bearer ${run.seed.apiKey}` } })).json()) as { data?: { users?: unknown[]; events?: unknown[] } }
        run.measured.matches[name] = (body.data?.users ?? body.data?.events ?? []).length
      }
      for (const c of consoleCases(run.seed.users, run.console.middleId)) {
        const response = await fetch(consoleUrl(run, c), { headers: consoleHeaders(run), redirect: 'manual' })
        const text = await response.text()
        if (response.status !== 200) throw new Error(`${c.name} answered ${response.status} before it was measured`)
        const listed = text.split(`href="${run.console.path}/users/`).length - 1
        run.measured.consolePages[c.name] = c.page.startsWith('/users/') ? `${Math.round(text.length / 1024)} kB` : `${listed} user${listed === 1 ? '' : 's'} listed`
      }
    }
    let k = 0
    for (const { key, before, spec } of cases()) {
      for (const run of inTurn(runs, k++)) {
        await before?.(run)
        run.measured.cases[key] = await timedLoad(run, key, spec(run))
      }
    }
    for (const run of inTurn(runs, k++)) {
      note(run, '/healthz alone')
      run.measured.healthIdle = await trickle(`${run.service.base}/healthz`, SECONDS, PROBE_INTERVAL_MS)
    }
    for (const [n, { name }] of adminCases(1000).entries()) {
      for (const run of inTurn(runs, k++)) {
        note(run, `/healthz during ${name}`)
        // The loop's first query (a cold one, perhaps) runs before the probes start.
        const loop = loadUntilStopped({ url: `${run.service.api}${adminCases(run.seed.users)[n]!.path}`, headers: { authorization: `Bearer ${run.seed.apiKey}` } })
        await loop.started
        // The loop stops when the last probe is sent, not when the last one is answered: a
        // starved probe must not keep the load going past the window it measures.
        const probe = await trickle(`${run.service.base}/healthz`, SECONDS, PROBE_INTERVAL_MS, () => loop.stop())
        run.measured.healthDuring[name] = { probe, admin: await loop.result }
      }
    }
    for (const run of runs) {
      run.measured.rssLoaded = run.service.rss()
      await run.service.stop()
      const { env } = run.seed
      const removed = run.seed.engine === 'sqlite' ? sqliteCleanup(env.DATA_DIR!) : await pgCleanup(env.DATABASE_URL!)
      log(`  ${run.seed.engine} ${label(run.seed.users)}: removed the ${removed} watchlists the write case made`)
    }
    if (retentionBuilt()) for (const run of runs) run.measured.retention = await retention(run)
    const measured: Measured[] = []
    for (const run of runs) measured.push({ ...(run.measured as Measured), bytes: await bytesOf(run.seed) })
    return measured
  } finally {
    for (const run of runs) await run.service?.stop()
  }
}

/**
 * Bearer reads while a retention pass has the seed's amount of work (prunable rows put back
 * first), then, once the passes have nothing left to delete, the same reads with the passes idle.
 */
async function retention(run: Running): Promise<Measured['retention']> {
  const { env, engine } = run.seed
  const count = () => (engine === 'sqlite' ? Promise.resolve(sqliteCount(env.DATA_DIR!)) : pgCount(env.DATABASE_URL!))
  const added = engine === 'sqlite' ? sqliteTopUp(env.DATA_DIR!, run.seed.prunable) : await pgTopUp(env.DATABASE_URL!, run.seed.prunable)
  const before = await count()
  log(`  ${engine} ${label(run.seed.users)}: prunable rows put back ${JSON.stringify(added)}, now ${JSON.stringify(before)}`)
  run.service = await start({ ...env, RETENTION_INTERVAL_SECONDS: '2' }, run.port)
  const reads = { url: `${run.service.api}/watchlists`, connections: CONNECTIONS, tokens: access(run.readers) }
  const during = await timedLoad(run, 'GET /watchlists, retention every 2 s', reads)
  const mid = await count()
  const prunedDuring = { sessions: before.sessions - mid.sessions, tokens: before.tokens - mid.tokens, events: before.events - mid.events }
  let left = mid
  for (let waited = 0; waited < 120; waited += 5) {
    await pause(5000)
    const now = await count()
    const unchanged = now.sessions === left.sessions && now.tokens === left.tokens && now.events === left.events
    left = now
    if (unchanged) break
  }
  const after = await timedLoad(run, 'GET /watchlists, retention idle', reads)
  await run.service.stop()
  return { during, after, added, prunedDuring, left }
}

// ----------------------------------------------------------------------------------------- table

// A NaN: no 2xx response to take a time from.
const ms = (value: number) => (Number.isNaN(value) ? '-' : value < 10 ? value.toFixed(2) : value < 100 ? value.toFixed(1) : Math.round(value).toString())
const perSecond = (value: number) => (value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString('en-US'))
const failures = (r: LoadResult) => (r.non2xx || r.errors ? ` (${r.non2xx} non-2xx, ${r.errors} errors)` : '')
const latency = (r: LoadResult) => `${ms(r.p50)} / ${ms(r.p99)} ms, ${perSecond(r.rps)}/s${r.ok < 100 ? ` (n=${r.ok})` : ''}${failures(r)}`
const latencyRatio = (small: LoadResult, large: LoadResult) => `${times(large.p50 / small.p50)} / ${times(large.p99 / small.p99)}, req/s ${times(large.rps / small.rps)}`

interface Row {
  name: string
  cell: (m: Measured) => string
  ratio: (small: Measured, large: Measured) => string
  goal: string
}

function rows(measured: Measured[]): Row[] {
  const names = adminCases(1000).map((c) => c.name)
  const anyRetention = measured.some((m) => m.retention)
  const probe = (r: LoadResult) => `${ms(r.p99)} ms (p50 ${ms(r.p50)}, max ${ms(r.max)})${failures(r)}`
  const caseRow = (name: string, key: string, goal = '1M within x1.5 of 1k') =>
    ({ name, cell: (m: Measured) => latency(m.cases[key]!), ratio: (a: Measured, b: Measured) => latencyRatio(a.cases[key]!, b.cases[key]!), goal })
  return [
    { name: 'start to /healthz 200, seeded database (ms; first start after seeding or migrating in brackets)', cell: (m) => `${Math.round(m.startMs)} (${Math.round(m.firstStartMs)})`, ratio: (a, b) => times(b.startMs / a.startMs), goal: '< 3000 ms' },
    { name: 'RSS idle, 2 s after start (MB)', cell: (m) => String(mb(m.rssIdle)), ratio: (a, b) => times(b.rssIdle / a.rssIdle), goal: 'independent of rows' },
    { name: 'RSS after the cases (MB)', cell: (m) => String(mb(m.rssLoaded)), ratio: (a, b) => times(b.rssLoaded / a.rssLoaded), goal: 'independent of rows' },
    caseRow(`POST /auth/login, ${LOGIN_CONNECTIONS} conns: p50 / p99, req/s`, 'login'),
    caseRow(`POST /auth/refresh, ${CONNECTIONS} conns`, 'refresh'),
    caseRow(`GET /watchlists (bearer read), ${CONNECTIONS} conns`, 'read'),
    caseRow(`POST /watchlists (write), ${CONNECTIONS} conns`, 'write'),
    ...names.map((name) => caseRow(`${name}, one at a time`, name)),
    ...consoleCases(1000, '').map(({ name }) => caseRow(`${name}, console session, ${CONSOLE_CONNECTIONS} conns`, name, 'p99 <= 100 ms')),
    { name: `/healthz alone, a probe every ${PROBE_INTERVAL_MS} ms: p99`, cell: (m) => probe(m.healthIdle), ratio: (a, b) => times(b.healthIdle.p99 / a.healthIdle.p99), goal: '' },
    ...names.map((name) => ({
      name: `/healthz p99 while ${name.replace(/^GET /, '')} loops`,
      cell: (m: Measured) => probe(m.healthDuring[name]!.probe),
      ratio: (a: Measured, b: Measured) => times(b.healthDuring[name]!.probe.p99 / a.healthDuring[name]!.probe.p99),
      goal: 'p99 < 20 ms',
    })),
    anyRetention
      ? {
          name: 'GET /watchlists p99 (ms): no pass (above) -> retention pass running -> passes idle; rows pruned during those reads (warm-up and measured)',
          cell: (m) => m.retention
            ? `${ms(m.cases.read!.p99)} -> ${ms(m.retention.during.p99)} -> ${ms(m.retention.after?.p99 ?? Number.NaN)}; ${m.retention.prunedDuring.sessions} sessions, ${m.retention.prunedDuring.events} events, ${m.retention.prunedDuring.tokens} tokens${failures(m.retention.during)}`
            : 'not yet',
          ratio: (a, b) => (a.retention && b.retention ? `during/none ${times(a.retention.during.p99 / a.cases.read!.p99)} -> ${times(b.retention.during.p99 / b.cases.read!.p99)}` : '-'),
          goal: 'during <= x1.2 of none',
        }
      : { name: 'GET /watchlists p99 with and without a retention pass', cell: () => 'not yet (no RETENTION_INTERVAL_SECONDS in dist/)', ratio: () => '-', goal: 'during <= x1.2 of none' },
  ]
}

function table(measured: Measured[]): string {
  const byEngine = ENGINES.map((engine) => measured.filter((m) => m.seed.engine === engine))
  const header = byEngine.flatMap((list) => [...list.map((m) => `${m.seed.engine} ${label(m.seed.users)}`), `${list[0]!.seed.engine} ${label(list.at(-1)!.seed.users)}/${label(list[0]!.seed.users)}`])
  const lines = [`| case | ${header.join(' | ')} | goal |`, `|---|${header.map(() => '---').join('|')}|---|`]
  for (const row of rows(measured)) {
    const cells = byEngine.flatMap((list) => [...list.map(row.cell), list.length > 1 ? row.ratio(list[0]!, list.at(-1)!) : '-'])
    lines.push(`| ${row.name} | ${cells.join(' | ')} | ${row.goal} |`)
  }
  return lines.join('\n')
}

function seedTable(measured: Measured[]): string {
  const lines = ['| seed | users | rows (users / sessions / watchlists / events) | seeded in | size | prunable at seeding (sessions / tokens / events) | `portcullis migrate` on this build | load avg (1 min) over the cases |', '|---|---|---|---|---|---|---|---|']
  for (const m of measured) {
    const { seed } = m
    lines.push(`| ${seed.engine} | ${seed.users.toLocaleString('en-US')} | ${seed.users} / ${2 * seed.users} / ${seed.users} / ${5 * seed.users} | ${seed.seedSeconds.toFixed(0)} s${seed.reused ? ` (reused, seeded ${seed.seededAt})` : ''} | ${(m.bytes / 1024 ** 3).toFixed(2)} GiB | ${seed.prunable.sessions} / ${seed.prunable.tokens} / ${seed.prunable.events} | ${m.migrate} (${(m.migrateMs / 1000).toFixed(1)} s) | ${Math.min(...m.loads).toFixed(2)}-${Math.max(...m.loads).toFixed(2)} |`)
  }
  return lines.join('\n')
}

function setup(): string {
  const git = (args: string[]) => spawnSync('git', args, { cwd: BUILD, encoding: 'utf8' }).stdout.trim()
  // A tree made by git archive has no .git; its maker may leave the commit in .commit.
  const archived = existsSync(path.join(BUILD, '.commit')) ? readFileSync(path.join(BUILD, '.commit'), 'utf8').trim().split('\n') : undefined
  const commit = archived
    ? `${archived[0]!.slice(0, 7)} (${archived[1] ?? ''}), archived into ${BUILD}`
    : `${git(['rev-parse', '--short', 'HEAD'])} (${git(['log', '-1', '--format=%s']).slice(0, 100)}); ${git(['status', '--porcelain', 'src']).split('\n').filter(Boolean).length} changed files under src/ not committed`
  return [
    `scale benchmark, ${new Date().toISOString()}`,
    `- build: commit ${commit}; dist/server.js built ${statSync(path.join(BUILD, 'dist/server.js')).mtime.toISOString()}`,
    `- node ${process.version}, ${cpus().length} cores, load average at start ${loadavg().map((l) => l.toFixed(2)).join(' ')}`,
    `- the service: \`npm start\`'s node arguments on dist/server.js, a process of its own (bench/lib/server.ts), LOG_LEVEL=${BENCH_ENV.LOG_LEVEL}${process.env.LOG_LEVEL ? '' : ' (the default)'} to /dev/null; per-address limits lifted; PostgreSQL: scripts/pg-throwaway.sh's cluster (fsync=off), pool of 10`,
    `- loader: autocannon ${autocannonVersion} in a child process (bench/lib/load.ts), ${WARMUP} s warm-up then ${SECONDS} s measured per case; p50/p99 from each 2xx response's own time`,
    `- connections: login ${LOGIN_CONNECTIONS} (rotating over ${LOGIN_USERS} seeded users), refresh / bearer read ${CONNECTIONS} (rotating over ${READERS} users' tokens), write ${CONNECTIONS} (over ${WRITERS} users), each connection through all of them from its own starting point; admin queries one at a time with an API key, for ${SECONDS} s and at least 3 queries`,
    `- console pages: ${CONSOLE_CONNECTIONS} connections with an operator's console session cookie (an account registered through the API, its address verified and the operator role given with the CLI, a TOTP factor from oathtool, signed in at /console/sign-in through the provider's pages as a browser: bench/lib/console-session.ts); the search is the middle seeded user's \`local@\`, the user's page that user's`,
    `- /healthz probes: one every ${PROBE_INTERVAL_MS} ms for ${SECONDS} s, open loop (a stall delays every probe sent during it), from this process while a child loops one admin query`,
  ].join('\n')
}

// ----------------------------------------------------------------------------------------- main

mkdirSync(ROOT, { recursive: true })
log(setup())
const clusterUsed = ENGINES.includes('postgres')
const measured: Measured[] = []
const seeds: Seed[] = []
try {
  if (clusterUsed) startCluster()
  for (const engine of ENGINES) for (const users of USERS) seeds.push(await prepareSeed(engine, users))
  for (const engine of ENGINES) measured.push(...(await measureEngine(seeds.filter((seed) => seed.engine === engine))))
  console.log(setup())
  console.log()
  console.log(table(measured))
  console.log()
  console.log(seedTable(measured))
  const shortOf = new Map(adminCases(1000).map((c) => [c.name, c.short]))
  const one = measured.map((m) => `${m.seed.engine} ${label(m.seed.users)}: ${Object.entries(m.matches).map(([name, n]) => `${shortOf.get(name)} ${n}`).join(', ')}`)
  console.log(`\nRows on the admin queries' first page: ${one.join('; ')}`)
  const consoleShort = new Map(consoleCases(1000, '').map((c) => [c.name, c.short]))
  console.log(`The console's pages before they were measured: ${measured.map((m) => `${m.seed.engine} ${label(m.seed.users)}: ${Object.entries(m.consolePages).map(([name, what]) => `${consoleShort.get(name)} ${what}`).join(', ')}`).join('; ')}`)
  const rows = (p: Prunable) => `${p.sessions} sessions, ${p.tokens} tokens, ${p.events} events`
  const kept = measured.filter((m) => m.retention).map((m) => `${m.seed.engine} ${label(m.seed.users)}: put back ${rows(m.retention!.added)}; pruned during the reads ${rows(m.retention!.prunedDuring)}; left when the passes went idle (or after 2 min) ${rows(m.retention!.left)}`)
  if (kept.length) console.log(`Retention case: ${kept.join('; ')}`)
} finally {
  if (clusterUsed) stopCluster()
  if (!KEEP) for (const seed of seeds) rmSync(seedDir(seed.engine, seed.users), { recursive: true, force: true })
  if (!KEEP && !existsSync(pgDir)) rmSync(ROOT, { recursive: true, force: true })
}

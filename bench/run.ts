// npm run bench: the built service (this tree's dist/, built just before) against two peers measured
// in the same run: bare Fastify (the framework's ceiling on this machine) and the previous release
// (BENCH_PREVIOUS, default 6c3cdb5, built from git in a temporary directory). SQLite and PostgreSQL.
// Prints what it ran with first (loader, connections, times, log level, cores), then one Markdown
// table in the shape of bench/RESULTS.md's.
//
// Each round is a bare Fastify run (with raw argon2id, login's ceiling), a run of the previous
// release and a run of this tree, in an order that rotates from round to round; every run is a
// fresh server (and a fresh PostgreSQL database), seeded with READERS users, each case warmed up
// before it is measured. A ratio is the median of the rounds' ratios, its range beside it; req/s,
// p50 and p99 are medians over the rounds. The load comes from a process of its own for every
// measurement (bench/load.ts). A measurement during which other processes used more than
// BENCH_OTHER_MAX (0.15) of a core is measured again, and every run waits for a quiet machine
// first (bench/quiet.ts). The login flood is information, with no target (issue 26).
//
// BENCH_SECONDS (10) measured per case, BENCH_WARMUP_SECONDS (3), BENCH_PAIRS (3) rounds,
// BENCH_ENGINES (sqlite,postgres), BENCH_PREVIOUS (a commit, or "none"), BENCH_SERVER_CPUS and
// BENCH_LOADER_CPUS (taskset core lists; unpinned if unset), LOG_LEVEL (the server's; npm start's
// default, info, if unset). PostgreSQL: DATABASE_URL (its user must be able to create databases),
// or a throwaway cluster started here (scripts/pg-throwaway.sh).
import { execFileSync, execSync, spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { hash, verify } from '@node-rs/argon2'
import { ARGON2ID, OWASP_ARGON2_PARAMS } from '../src/auth/passwords.ts'
import { flowInChild, type FlowResult } from './flows.ts'
import { allowedCpus, autocannonVersion, loadInChild, type LoadResult, type LoadSpec } from './load.ts'
import { benchDatabases } from './databases.ts'
import { machineCpu, OTHER_MAX, waitForQuiet } from './quiet.ts'
import { seedReaders } from './readers.ts'
import { startArgs, startServer, type BenchServer } from './server.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
const WARMUP = Number(process.env.BENCH_WARMUP_SECONDS ?? 3)
const ROUNDS = Number(process.env.BENCH_PAIRS ?? 3)
const ENGINES = (process.env.BENCH_ENGINES ?? 'sqlite,postgres').split(',')
const PREVIOUS = process.env.BENCH_PREVIOUS ?? '6c3cdb5'
const SERVER_CPUS = process.env.BENCH_SERVER_CPUS || undefined
const LOADER_CPUS = process.env.BENCH_LOADER_CPUS || undefined
const LOG_LEVEL = process.env.LOG_LEVEL ?? 'info'
const CONNECTIONS = 50
const HASHING_CONNECTIONS = 8
const FLOOD_CONNECTIONS = 500
const FLOOD_READ_CONNECTIONS = 10
const READERS = 100
const ATTEMPTS = 4
const json = { 'content-type': 'application/json' }
const limits = { RATE_LIMIT_LOGIN_PER_IP: '1000000000', RATE_LIMIT_REGISTER_PER_IP: '1000000000', RATE_LIMIT_MAIL_PER_IP: '1000000000', LOG_LEVEL }
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const mb = (bytes: number) => Math.round(bytes / 1024 / 1024)
const percent = (x: number) => `${(x * 100).toFixed(1)}%`
const git = (...args: string[]) => execFileSync('git', args, { encoding: 'utf8' }).trim()

// What is measured: this tree, and the previous release built from git.
const head = git('rev-parse', '--short', 'HEAD')
const changed = git('status', '--porcelain', '--untracked-files=no') !== ''
const commit = changed ? `${head} + uncommitted changes` : head
const date = new Date().toISOString().slice(0, 10)
interface Build { name: 'previous' | 'current'; tree?: string }
let previous: (Build & { commit: string; note: string }) | undefined
if (PREVIOUS !== 'none') {
  const full = git('rev-parse', `${PREVIOUS}^{commit}`)
  const tree = mkdtempSync(path.join(os.tmpdir(), 'portcullis-bench-previous-'))
  execSync(`git archive ${full} | tar -x -C ${tree}`)
  // Always this tree's node_modules, so both builds run on one runtime and one set of native
  // modules: a release from before the move to Node 24 (8b9d1f9) would otherwise get its own
  // better-sqlite3 12, built for the machine's Node 20, which Node 24 cannot load. Its build is
  // emitted whatever tsc says of it against today's type declarations (only the emit is needed).
  const sameLock = git('show', `${full}:package-lock.json`) === readFileSync('package-lock.json', 'utf8').trim()
  symlinkSync(path.resolve('node_modules'), path.join(tree, 'node_modules'))
  const build = spawnSync('sh', ['-c', 'npx tsc -p tsconfig.build.json; node scripts/bundle.mjs'], { cwd: tree, stdio: ['ignore', 'ignore', 'inherit'] })
  if (build.status !== 0) throw new Error(`bench: could not build ${PREVIOUS} in ${tree}`)
  previous = { name: 'previous', tree, commit: git('rev-parse', '--short', full), note: sameLock ? "this tree's node_modules (same lockfile)" : "this tree's node_modules (its own lockfile differs: same runtime and natives for both)" }
}
const builds: Build[] = [...(previous ? [previous] : []), { name: 'current' }]

// PostgreSQL: a throwaway cluster unless DATABASE_URL names one; every run gets a database of its own.
const databases = benchDatabases(ENGINES, 'run', 55499)

// Every measurement: on a quiet machine, and again if other processes took more than OTHER_MAX of a core meanwhile.
const seen = { serverCpus: new Set<string>(), loaderCpus: new Set<string>(), repeated: 0, disturbed: 0, maxOther: 0, maxSteal: 0, failures: [] as string[] }
async function undisturbed<T>(label: string, server: BenchServer | undefined, measure: () => Promise<{ value: T; loaderCpuMs: number }>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    await waitForQuiet()
    const machine = machineCpu()
    const began = performance.now()
    const self = process.cpuUsage()
    const [serverBefore, databaseBefore] = [server?.cpuMs() ?? 0, databases.cpuMs()]
    const { value, loaderCpuMs } = await measure()
    const { busyMs, stealMs } = machine()
    const own = process.cpuUsage(self)
    const known = (server?.cpuMs() ?? 0) - serverBefore + databases.cpuMs() - databaseBefore + loaderCpuMs + (own.user + own.system) / 1000
    // The processes' own times include the interrupt work done on their behalf (on a quiet machine
    // this reads within a few per cent of zero). Per second of the whole measurement, a sign-in
    // flow's set-up included.
    const wallMs = performance.now() - began
    const other = (busyMs - known) / wallMs
    seen.maxSteal = Math.max(seen.maxSteal, stealMs / wallMs)
    if (other <= OTHER_MAX || attempt === ATTEMPTS) {
      seen.maxOther = Math.max(seen.maxOther, other)
      if (other > OTHER_MAX) seen.disturbed++
      return value
    }
    seen.repeated++
    console.error(`bench: ${label}: other processes took ${percent(other)} of a core; measuring again`)
  }
}
/** A load from its own process: WARMUP seconds not counted, then SECONDS measured. */
async function load(label: string, server: BenchServer, spec: Omit<LoadSpec, 'seconds'>, warmup = WARMUP): Promise<LoadResult> {
  if (warmup > 0) await loadInChild({ ...spec, seconds: warmup }, LOADER_CPUS)
  const result = await undisturbed(label, server, async () => {
    const r = await loadInChild({ ...spec, seconds: SECONDS }, LOADER_CPUS)
    return { value: r, loaderCpuMs: r.loaderProcessCpuMs }
  })
  seen.loaderCpus.add(result.loaderCpus)
  if (result.non2xx || result.errors) seen.failures.push(`${label}: ${result.non2xx} non-2xx, ${result.errors} socket errors`)
  return result
}

async function bareRun(): Promise<LoadResult> {
  await waitForQuiet()
  const server = await startServer({}, { args: ['--import', 'tsx', 'bench/bare.ts'], cpus: SERVER_CPUS })
  seen.serverCpus.add(server.cpus())
  try {
    return await load('bare Fastify', server, { url: `${server.base}/`, connections: CONNECTIONS })
  } finally {
    await server.stop()
  }
}

/** Raw argon2id verifies per second at the service's parameters, two at a time (HASH_CONCURRENCY's default), in this process. */
async function rawArgon2(): Promise<number> {
  const password = 'a benchmark passphrase'
  const encoded = await hash(password, { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS })
  return undisturbed('raw argon2id', undefined, async () => {
    let done = 0
    const until = performance.now() + SECONDS * 1000
    await Promise.all([0, 1].map(async () => {
      while (performance.now() < until) {
        await verify(encoded, password)
        done++
      }
    }))
    return { value: done / SECONDS, loaderCpuMs: 0 }
  })
}

interface ServiceRun {
  watchlists: LoadResult
  me: LoadResult
  refresh: LoadResult
  login: LoadResult
  register: LoadResult
  /** This tree only (the previous release has neither): password + TOTP verify, and a passkey login. */
  mfa?: FlowResult
  passkey?: FlowResult
  rssAfterCases: number
  /** Only in the last round: a restart on the database the cases left. */
  restart?: { readyMs: number; rssIdle: number }
}

async function serviceRun(build: Build, engine: string, restart: boolean): Promise<ServiceRun> {
  await waitForQuiet()
  const database = await databases.fresh(engine)
  const env = { ...limits, ...database.env }
  let server = await startServer(env, { tree: build.tree, cpus: SERVER_CPUS })
  seen.serverCpus.add(server.cpus())
  try {
    const api = `${server.base}/api/v1`
    const readers = await seedReaders(api, READERS)
    const { email, password, refresh_token } = readers[0]!
    const tokens = readers.map((r) => r.access_token)
    const label = `${engine} ${build.name}`
    const run: ServiceRun = {
      watchlists: await load(`${label} GET /watchlists`, server, { url: `${api}/watchlists`, connections: CONNECTIONS, tokens }),
      me: await load(`${label} GET /auth/me`, server, { url: `${api}/auth/me`, connections: CONNECTIONS, tokens }),
      refresh: await load(`${label} refresh`, server, { url: `${api}/auth/refresh`, connections: CONNECTIONS, method: 'POST', headers: json, body: JSON.stringify({ refresh_token }) }),
      // Login and register are argon2id's cost; no warm-up.
      login: await load(`${label} login`, server, { url: `${api}/auth/login`, connections: HASHING_CONNECTIONS, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }, 0),
      register: await load(`${label} register`, server, { url: `${api}/auth/register`, connections: HASHING_CONNECTIONS, registerBody: { password, full_name: 'R' } }, 0),
      rssAfterCases: 0,
    }
    if (build.name === 'current') {
      // The service's default PUBLIC_URL is http://localhost:PORT: the passkeys' origin and RP ID.
      const origin = `http://localhost:${new URL(server.base).port}`
      const flow = (kind: 'mfa' | 'passkey') =>
        undisturbed(`${label} ${kind} sign-in`, server, async () => {
          const result = await flowInChild({ flow: kind, api, origin, outbox: path.join(server.dataDir, 'outbox'), workers: HASHING_CONNECTIONS, seconds: SECONDS, warmupSeconds: kind === 'passkey' ? WARMUP : 0 }, LOADER_CPUS)
          return { value: result, loaderCpuMs: result.loaderProcessCpuMs }
        })
      run.mfa = await flow('mfa')
      run.passkey = await flow('passkey')
    }
    run.rssAfterCases = server.rss()
    if (restart) {
      await server.stop({ keepData: true })
      server = await startServer(env, { tree: build.tree, cpus: SERVER_CPUS, dataDir: server.dataDir })
      await pause(2000)
      run.restart = { readyMs: server.readyMs, rssIdle: server.rss() }
    }
    return run
  } finally {
    await server.stop()
    await database.drop()
  }
}

interface FloodPair { alone: LoadResult; during: LoadResult; flood: LoadResult; ratio: number }

/** Bearer reads alone, then during a login flood from a process of its own, ROUNDS times; this tree only. */
async function floodRuns(engine: string) {
  await waitForQuiet()
  const database = await databases.fresh(engine)
  const server = await startServer({ ...limits, ...database.env }, { cpus: SERVER_CPUS })
  try {
    const api = `${server.base}/api/v1`
    const readers = await seedReaders(api, READERS)
    const { email, password } = readers[0]!
    const reads: Omit<LoadSpec, 'seconds'> = { url: `${api}/auth/me`, connections: FLOOD_READ_CONNECTIONS, tokens: readers.map((r) => r.access_token) }
    const flood: LoadSpec = { url: `${api}/auth/login`, connections: FLOOD_CONNECTIONS, seconds: SECONDS, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }
    await loadInChild({ ...reads, seconds: WARMUP }, LOADER_CPUS)
    let peak = 0
    const pairs: FloodPair[] = []
    for (let i = 0; i < ROUNDS; i++) {
      const alone = await load(`${engine} reads before the flood`, server, reads, 0)
      const sampler = setInterval(() => (peak = Math.max(peak, server.rss())), 50)
      const [during, floodResult] = await undisturbed(`${engine} flood`, server, async () => {
        const both = await Promise.all([loadInChild({ ...reads, seconds: SECONDS }, LOADER_CPUS), loadInChild(flood, LOADER_CPUS)])
        return { value: both, loaderCpuMs: both[0].loaderProcessCpuMs + both[1].loaderProcessCpuMs }
      })
      clearInterval(sampler)
      pairs.push({ alone, during, flood: floodResult, ratio: during.p99 / alone.p99 })
      // The logins still queued when the flood stops wait at most HASH_WAIT_SECONDS (5 s) for a hash.
      await pause(6000)
    }
    return { pairs, peak }
  } finally {
    await server.stop()
    await database.drop()
  }
}

async function engineRun(engine: string) {
  const bare: LoadResult[] = []
  const argon2: number[] = []
  const runs: Record<Build['name'], ServiceRun[]> = { previous: [], current: [] }
  const slots = ['bare', ...builds.map((b) => b.name)] as const
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[(i + round) % slots.length]!
      console.error(`bench: ${engine} round ${round + 1} of ${ROUNDS}: ${slot}`)
      if (slot === 'bare') {
        bare.push(await bareRun())
        argon2.push(await rawArgon2())
      } else {
        runs[slot].push(await serviceRun(builds.find((b) => b.name === slot)!, engine, round === ROUNDS - 1))
      }
    }
  }
  console.error(`bench: ${engine} login flood`)
  return { engine, bare, argon2, runs, flood: await floodRuns(engine) }
}

type EngineResult = Awaited<ReturnType<typeof engineRun>>

/** The rows of the table for one engine. */
function rows(r: EngineResult): string[] {
  const { engine, bare, argon2, runs } = r
  const current = runs.current
  const stats = (results: LoadResult[]) => `${median(results.map((x) => x.rps))} | ${median(results.map((x) => x.p50)).toFixed(2)} | ${median(results.map((x) => x.p99)).toFixed(2)}`
  const ratio = (values: number[], format: (x: number) => string) => `${format(median(values))} (${format(Math.min(...values))}-${format(Math.max(...values))})`
  const times = (x: number) => `x${x.toFixed(2)}`
  const vsPrevious = (pick: (run: ServiceRun) => number) => (runs.previous.length ? ratio(current.map((run, i) => pick(run) / pick(runs.previous[i]!)), times) : '')
  const target = (value: number, goal: number, text: string) => `${text}: ${value >= goal ? 'met' : 'not met'}`
  const readTarget = engine === 'sqlite' ? 0.4 : 0.25
  const share = (pick: (run: ServiceRun) => LoadResult) => current.map((run, i) => pick(run).rps / bare[i]!.rps)
  const out = [`| bare Fastify GET / | ${engine} | ${stats(bare)} | 100% | | baseline | ${date} | ${commit} |`]
  for (const [name, pick] of [['GET /watchlists', (x: ServiceRun) => x.watchlists], ['GET /auth/me', (x: ServiceRun) => x.me]] as const) {
    out.push(`| ${name} | ${engine} | ${stats(current.map(pick))} | ${ratio(share(pick), percent)} | ${vsPrevious((x) => pick(x).rps)} | ${target(median(share(pick)), readTarget, `>= ${readTarget * 100}%`)} | ${date} | ${commit} |`)
  }
  const refreshShare = share((x) => x.refresh)
  out.push(`| POST /auth/refresh | ${engine} | ${stats(current.map((x) => x.refresh))} | ${ratio(refreshShare, percent)} | ${vsPrevious((x) => x.refresh.rps)} | ${engine === 'sqlite' ? target(median(refreshShare), 0.15, '>= 15%') : ''} | ${date} | ${commit} |`)
  out.push(`| raw argon2id verify, 2 at a time | ${engine} | ${Math.round(median(argon2))} | | | 100% | | baseline | ${date} | ${commit} |`)
  const loginShare = current.map((run, i) => run.login.rps / argon2[i]!)
  out.push(`| POST /auth/login, ${HASHING_CONNECTIONS} conns | ${engine} | ${stats(current.map((x) => x.login))} | ${ratio(loginShare, percent)} of raw argon2id | ${vsPrevious((x) => x.login.rps)} | ${target(median(loginShare), 0.9, '>= 90%')} | ${date} | ${commit} |`)
  out.push(`| POST /auth/register, ${HASHING_CONNECTIONS} conns | ${engine} | ${stats(current.map((x) => x.register))} | | ${vsPrevious((x) => x.register.rps)} | | ${date} | ${commit} |`)
  // The sign-ins of more than one request (bench/flows.ts), as whole sign-ins a second, against the password login.
  const flows = (pick: (run: ServiceRun) => FlowResult) => current.map(pick)
  const flowStats = (results: FlowResult[]) => `${median(results.map((x) => x.rps))} | ${median(results.map((x) => x.p50)).toFixed(2)} | ${median(results.map((x) => x.p99)).toFixed(2)}`
  const vsLogin = (pick: (run: ServiceRun) => FlowResult) => ratio(current.map((run) => pick(run).rps / run.login.rps), times)
  const mfa = flows((x) => x.mfa!)
  const verifyOverRead = median(mfa.map((x) => x.secondP50 - x.readP50))
  out.push(`| MFA login: POST /auth/login + /auth/mfa/verify (TOTP), ${HASHING_CONNECTIONS} at once | ${engine} | ${flowStats(mfa)} | ${vsLogin((x) => x.mfa!)} of password login's req/s | | verify p50 ${median(mfa.map((x) => x.secondP50)).toFixed(2)} ms vs a bearer read's ${median(mfa.map((x) => x.readP50)).toFixed(2)} ms beside it: +${verifyOverRead.toFixed(2)} ms (<= 5 ms: ${verifyOverRead <= 5 ? 'met' : 'not met'}) | ${date} | ${commit} |`)
  const passkey = flows((x) => x.passkey!)
  out.push(`| passkey login: options + POST /auth/passkeys/login, ${HASHING_CONNECTIONS} at once | ${engine} | ${flowStats(passkey)} | ${vsLogin((x) => x.passkey!)} of password login's req/s | | information (no argon2id) | ${date} | ${commit} |`)
  const { pairs, peak } = r.flood
  const during = pairs.map((p) => p.during)
  const alone = median(pairs.map((p) => p.alone.p99))
  out.push(`| GET /auth/me, ${FLOOD_READ_CONNECTIONS} conns, during a ${FLOOD_CONNECTIONS}-conn login flood | ${engine} | ${stats(during)} | p99 ${ratio(pairs.map((p) => p.ratio), times)} of alone (${alone.toFixed(2)} ms) | | information | ${date} | ${commit} |`)
  out.push(`| the flood's logins: 2xx / 503 a second | ${engine} | ${median(pairs.map((p) => p.flood.ok / SECONDS)).toFixed(0)} / ${median(pairs.map((p) => p.flood.non2xx / SECONDS)).toFixed(0)} | | | | | information | ${date} | ${commit} |`)
  const last = current.at(-1)!.restart!
  const lastPrevious = runs.previous.at(-1)?.restart
  out.push(`| start to ready, existing database | ${engine} | ${Math.round(last.readyMs)} ms | | | | ${lastPrevious ? times(last.readyMs / lastPrevious.readyMs) : ''} | ${last.readyMs <= 1000 ? '<= 1000 ms: met' : '<= 1000 ms: not met'} | ${date} | ${commit} |`)
  const rssAfter = median(current.map((x) => x.rssAfterCases))
  const rssPrevious = lastPrevious ? `idle ${times(last.rssIdle / lastPrevious.rssIdle)}, after the cases ${times(rssAfter / median(runs.previous.map((x) => x.rssAfterCases)))}` : ''
  out.push(`| RSS: idle after start / after the cases / peak in the floods | ${engine} | ${mb(last.rssIdle)} / ${mb(rssAfter)} / ${mb(peak)} MB | | | | ${rssPrevious} | <= 110 MB idle: ${mb(last.rssIdle) <= 110 ? 'met' : 'not met'}; <= 150 MB peak: ${mb(peak) <= 150 ? 'met' : 'not met'} | ${date} | ${commit} |`)
  return out
}

const placement = (asked: string | undefined, role: string) => (asked ? `${role} pinned to core(s) ${asked}` : `${role} unpinned (cores ${allowedCpus()})`)
console.log([
  `npm run bench, ${new Date().toISOString().slice(0, 16)}Z, ${commit}; Node ${process.version}, ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${os.cpus().length} cores; load average ${os.loadavg()[0]!.toFixed(2)} at the start`,
  `- loader: autocannon ${autocannonVersion} in a process of its own for every measurement (bench/load.ts), never in the bench's process`,
  `- connections: ${CONNECTIONS} for the reads and refresh, ${HASHING_CONNECTIONS} for login and register; the flood ${FLOOD_CONNECTIONS} logins beside ${FLOOD_READ_CONNECTIONS} reads; reads rotate through ${READERS} users' tokens`,
  `- time: ${SECONDS} s measured after ${WARMUP} s of warm-up (none for login, register and the flood) on a fresh server${ENGINES.includes('postgres') ? ' and PostgreSQL database' : ''} each run; ${ROUNDS} rounds`,
  `- server: ${['node', ...startArgs()].join(' ')} (npm start's command), LOG_LEVEL=${LOG_LEVEL}${process.env.LOG_LEVEL ? '' : " (npm start's default)"}, the log to /dev/null`,
  `- cores: ${placement(SERVER_CPUS, 'server')}, ${placement(LOADER_CPUS, 'loader')}`,
  `- peers in the same run: bare Fastify (bench/bare.ts)${previous ? ` and the previous release ${previous.commit} (BENCH_PREVIOUS; built from git with ${previous.note})` : ''}; rounds rotate the order ${['bare', ...builds.map((b) => b.name)].join(', ')}`,
  '',
].join('\n'))

const results: EngineResult[] = []
try {
  for (const engine of ENGINES) results.push(await engineRun(engine))
} finally {
  databases.stop()
  if (previous?.tree) rmSync(previous.tree, { recursive: true, force: true })
}
console.log([
  `- observed: server cores ${[...seen.serverCpus].join(', ')}; loader cores ${[...seen.loaderCpus].join(', ')}; other processes at most ${percent(Math.max(0, seen.maxOther))} of a core during a kept measurement (${seen.repeated} measured again, ${seen.disturbed} kept over ${percent(OTHER_MAX)} after ${ATTEMPTS} tries); steal at most ${percent(seen.maxSteal)}`,
  `- failed requests outside the flood: ${seen.failures.length ? seen.failures.join('; ') : 'none'}`,
  '',
  `| case | engine | req/s | p50 ms | p99 ms | vs bare Fastify | vs ${previous ? `previous (${previous.commit})` : 'previous (not run)'} | target (issue 10) | date | commit |`,
  '|---|---|---|---|---|---|---|---|---|---|',
  ...results.flatMap(rows),
].join('\n'))

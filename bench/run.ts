// npm run bench: the built service (this tree's dist/, built just before) against peers measured
// in the same run: bare Fastify (bench/peers/bare-fastify.ts, the framework's ceiling on this
// machine) and earlier releases built from git (BENCH_PREVIOUS, default 5756967,85d932a: the first
// is "the previous release" of the vs-previous column, and every one of them gets a standing row
// of its own bearer read, so a regression of the read shows at once), on SQLite and PostgreSQL;
// then the login flood (bench/flood.ts) on this tree. 5756967 is main before the turn of issues
// 41-46; 85d932a is the release before the OpenID provider, the read's reference of issue 46.
// Beside them, issue 46's other reference: Better Auth's stateless check of its jwt plugin's token
// (bench/peers/better-auth.ts: jose against its JWKS, no database read), at the same connections
// and with as many users' tokens in turn as the service's read.
//
// Each round is a bare Fastify run (with raw argon2id, login's ceiling), a Better Auth read, a run
// of each earlier release and a run of this tree, in an order that rotates from round to round; every run is a
// fresh server (and PostgreSQL database) with READERS users, each case warmed up before it is
// measured (not login and register: argon2id's cost). A ratio is the median of the rounds' ratios,
// its range beside it; req/s, p50 and p99 are medians over the rounds.
//
// BENCH_SECONDS (10), BENCH_WARMUP_SECONDS (3), BENCH_PAIRS (3) rounds, BENCH_ENGINES
// (sqlite,postgres), BENCH_PREVIOUS (commits, comma-separated, or "none"), BENCH_SERVER_CPUS and BENCH_LOADER_CPUS,
// LOG_LEVEL; PostgreSQL from DATABASE_URL or a throwaway cluster (bench/lib/databases.ts).
import { randomBytes } from 'node:crypto'
import { readFileSync, rmSync } from 'node:fs'
import path from 'node:path'
import { hash, verify } from '@node-rs/argon2'
import { ARGON2ID, OWASP_ARGON2_PARAMS } from '../src/auth/passwords.ts'
import { FLOOD_CONNECTIONS, floodMemory, floodRows, floodRuns, READ_CONNECTIONS } from './flood.ts'
import { benchDatabases } from './lib/databases.ts'
import { flowInChild, type FlowResult } from './lib/flows.ts'
import type { LoadResult } from './lib/load.ts'
import { seedBetterAuthReaders, seedReaders } from './lib/readers.ts'
import { mb, median, met, pause, percent, range, Report, rotation, settings, stats, times } from './lib/report.ts'
import { BENCH_ENV, buildCommit, startArgs, startServer } from './lib/server.ts'

const s = settings()
const PREVIOUS = (process.env.BENCH_PREVIOUS ?? '5756967,85d932a').split(',').filter((commit) => commit && commit !== 'none')
const CONNECTIONS = 50
const HASHING_CONNECTIONS = 8
const READERS = 100
const json = { 'content-type': 'application/json' }

const BETTER_AUTH = (JSON.parse(readFileSync('node_modules/better-auth/package.json', 'utf8')) as { version: string }).version
/** npm start's node flags for the peer too; Node runs its TypeScript itself, no loader. */
const betterAuthArgs = [...startArgs().filter((arg) => arg.startsWith('--')), 'bench/peers/better-auth.ts']

const earlier = PREVIOUS.map(buildCommit)
const previous = earlier[0]
/** 'current' (this tree) or 'previous0', 'previous1', ... (BENCH_PREVIOUS in its order). */
type Build = string
const trees: Record<Build, string | undefined> = { current: undefined, ...Object.fromEntries(earlier.map((build, i) => [`previous${i}`, build.tree])) }
const databases = benchDatabases(s.engines, 'run', 55499)

const report = new Report('npm run bench', s, [
  `connections: ${CONNECTIONS} for the reads and refresh, ${HASHING_CONNECTIONS} for login and register; the flood ${FLOOD_CONNECTIONS} logins beside ${READ_CONNECTIONS} reads; reads rotate through ${READERS} users' tokens`,
  `time: ${s.seconds} s measured after ${s.warmup} s of warm-up (none for login, register and the flood) on a fresh server${s.engines.includes('postgres') ? ' and PostgreSQL database' : ''} each run; ${s.rounds} rounds`,
  `server: node ${startArgs().join(' ')} (npm start's command), LOG_LEVEL=${BENCH_ENV.LOG_LEVEL}${process.env.LOG_LEVEL ? '' : " (npm start's default)"}, the log to /dev/null`,
  `peers in the same run: bare Fastify (bench/peers/bare-fastify.ts), Better Auth ${BETTER_AUTH}'s stateless read (bench/peers/better-auth.ts: GET /api/v1/watchlists checks the jwt plugin's EdDSA token with jose against the server's JWKS, kept after the first fetch, and answers an empty list without a database read; node ${betterAuthArgs.join(' ')})${earlier.length ? ` and the earlier releases ${earlier.map((build) => build.commit).join(', ')} (BENCH_PREVIOUS, the first the previous release; built from git with ${previous!.note})` : ''}; rounds rotate the order bare, Better Auth, ${earlier.map((build) => `${build.commit}, `).join('')}current`,
])

async function bareRun(): Promise<LoadResult> {
  await report.quiet()
  const server = report.server(await startServer({}, { args: ['--import', 'tsx', 'bench/peers/bare-fastify.ts'], cpus: s.serverCpus }))
  try {
    return await report.load('bare Fastify', server.cpuMs, { url: `${server.base}/`, connections: CONNECTIONS })
  } finally {
    await server.stop()
  }
}

/** Better Auth's stateless bearer read (issue 46's peer), READERS users' tokens in turn. */
async function betterAuthRun(): Promise<LoadResult> {
  await report.quiet()
  const env = { BETTER_AUTH_SECRET: randomBytes(32).toString('base64url'), BENCH_REDIRECT_URI: 'https://rp.example/cb' }
  const server = report.server(await startServer(env, { args: betterAuthArgs, cpus: s.serverCpus }))
  try {
    const tokens = await seedBetterAuthReaders(server.base, `http://localhost:${server.port}`, READERS)
    return await report.load('Better Auth GET /api/v1/watchlists', server.cpuMs, { url: `${server.base}/api/v1/watchlists`, connections: CONNECTIONS, tokens })
  } finally {
    await server.stop()
  }
}

/** Raw argon2id verifies per second at the service's parameters, two at a time (HASH_CONCURRENCY's default), in this process. */
async function rawArgon2(): Promise<number> {
  const password = 'a benchmark passphrase'
  const encoded = await hash(password, { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS })
  return report.kept('raw argon2id', () => 0, async () => {
    let done = 0
    const until = performance.now() + s.seconds * 1000
    await Promise.all([0, 1].map(async () => {
      while (performance.now() < until) {
        await verify(encoded, password)
        done++
      }
    }))
    return { value: done / s.seconds, loaderCpuMs: 0 }
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
  await report.quiet()
  const database = await databases.fresh(engine)
  let server = report.server(await startServer(database.env, { tree: trees[build], cpus: s.serverCpus }))
  const dataDir = server.dataDir
  const known = () => server.cpuMs() + databases.cpuMs()
  try {
    const { api } = server
    const readers = await seedReaders(api, READERS)
    const { email, password, refresh_token } = readers[0]!
    const tokens = readers.map((r) => r.access_token)
    const label = `${engine} ${build}`
    const run: ServiceRun = {
      watchlists: await report.load(`${label} GET /watchlists`, known, { url: `${api}/watchlists`, connections: CONNECTIONS, tokens }),
      me: await report.load(`${label} GET /auth/me`, known, { url: `${api}/auth/me`, connections: CONNECTIONS, tokens }),
      refresh: await report.load(`${label} refresh`, known, { url: `${api}/auth/refresh`, connections: CONNECTIONS, method: 'POST', headers: json, body: JSON.stringify({ refresh_token }) }),
      login: await report.load(`${label} login`, known, { url: `${api}/auth/login`, connections: HASHING_CONNECTIONS, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }, 0),
      register: await report.load(`${label} register`, known, { url: `${api}/auth/register`, connections: HASHING_CONNECTIONS, registerBody: { password, full_name: 'R' } }, 0),
      rssAfterCases: 0,
    }
    if (build === 'current') {
      // The service's default PUBLIC_URL is http://localhost:PORT: the passkeys' origin and RP ID.
      const origin = `http://localhost:${server.port}`
      const flow = (kind: 'mfa' | 'passkey') =>
        report.kept(`${label} ${kind} sign-in`, known, async () => {
          const result = await flowInChild({ flow: kind, api, origin, outbox: path.join(dataDir, 'outbox'), workers: HASHING_CONNECTIONS, seconds: s.seconds, warmupSeconds: kind === 'passkey' ? s.warmup : 0 }, s.loaderCpus)
          return { value: result, loaderCpuMs: result.loaderProcessCpuMs }
        })
      run.mfa = await flow('mfa')
      run.passkey = await flow('passkey')
    }
    run.rssAfterCases = server.rss()
    if (restart) {
      await server.stop({ keepData: true })
      server = await startServer(database.env, { tree: trees[build], cpus: s.serverCpus, dataDir })
      await pause(2000)
      run.restart = { readyMs: server.readyMs, rssIdle: server.rss() }
    }
    return run
  } finally {
    await server.stop()
    rmSync(dataDir, { recursive: true, force: true })
    await database.drop()
  }
}

async function engineRun(engine: string) {
  const bare: LoadResult[] = []
  const betterAuth: LoadResult[] = []
  const argon2: number[] = []
  const runs: Record<Build, ServiceRun[]> = Object.fromEntries(Object.keys(trees).map((build) => [build, []]))
  for (let round = 0; round < s.rounds; round++) {
    for (const slot of rotation(['bare', 'betterAuth', ...earlier.map((_, i) => `previous${i}`), 'current'], round)) {
      console.error(`bench: ${engine} round ${round + 1} of ${s.rounds}: ${slot}`)
      if (slot === 'bare') {
        bare.push(await bareRun())
        argon2.push(await rawArgon2())
      } else if (slot === 'betterAuth') {
        betterAuth.push(await betterAuthRun())
      } else {
        runs[slot]!.push(await serviceRun(slot, engine, round === s.rounds - 1))
      }
    }
  }
  console.error(`bench: ${engine} login flood`)
  return { engine, bare, betterAuth, argon2, runs, flood: await floodRuns(report, databases, engine) }
}

/** The rows of the table for one engine: case, engine, req/s | p50 | p99, vs bare, vs previous, target. */
function rows(r: Awaited<ReturnType<typeof engineRun>>): string[][] {
  const { engine, bare, betterAuth, argon2, runs } = r
  const current = runs.current!
  const before = runs.previous0 ?? []
  const vsPrevious = (pick: (run: ServiceRun) => number) => (before.length ? range(current.map((run, i) => pick(run) / pick(before[i]!))) : '')
  const target = (value: number, goal: number, text: string) => `${text}: ${met(value >= goal)}`
  const readTarget = engine === 'sqlite' ? 0.4 : 0.25
  const share = (pick: (run: ServiceRun) => LoadResult) => current.map((run, i) => pick(run).rps / bare[i]!.rps)
  const out = [['bare Fastify GET /', engine, stats(bare), '100%', '', 'baseline']]
  for (const [name, pick] of [['GET /watchlists', (x: ServiceRun) => x.watchlists], ['GET /auth/me', (x: ServiceRun) => x.me]] as const) {
    out.push([name, engine, stats(current.map(pick)), range(share(pick), percent), vsPrevious((x) => pick(x).rps), target(median(share(pick)), readTarget, `>= ${readTarget * 100}%`)])
  }
  // The standing rows of the earlier releases' own bearer read, and this tree's read against each.
  earlier.forEach((build, i) => {
    const theirs = runs[`previous${i}`]!
    const label = i === 0 ? 'the previous release' : 'an earlier release'
    out.push([`GET /watchlists on ${build.commit} (${label})`, engine, stats(theirs.map((x) => x.watchlists)), range(theirs.map((run, j) => run.watchlists.rps / bare[j]!.rps), percent), `this tree ${range(current.map((run, j) => run.watchlists.rps / theirs[j]!.watchlists.rps))}`, 'this tree >= x1.00'])
  })
  const overPeer = current.map((run, j) => run.watchlists.rps / betterAuth[j]!.rps)
  out.push([`GET /watchlists beside Better Auth ${BETTER_AUTH}'s stateless JWT check (its GET /api/v1/watchlists)`, engine, stats(betterAuth), range(betterAuth.map((run, j) => run.rps / bare[j]!.rps), percent), `this tree ${range(overPeer)}`, `this tree >= x2.00 (issue 46): ${met(median(overPeer) >= 2)}`])
  const refreshShare = share((x) => x.refresh)
  out.push(['POST /auth/refresh', engine, stats(current.map((x) => x.refresh)), range(refreshShare, percent), vsPrevious((x) => x.refresh.rps), engine === 'sqlite' ? target(median(refreshShare), 0.15, '>= 15%') : ''])
  out.push(['raw argon2id verify, 2 at a time', engine, `${Math.round(median(argon2))} | | `, '100%', '', 'baseline'])
  const loginShare = current.map((run, i) => run.login.rps / argon2[i]!)
  out.push([`POST /auth/login, ${HASHING_CONNECTIONS} conns`, engine, stats(current.map((x) => x.login)), `${range(loginShare, percent)} of raw argon2id`, vsPrevious((x) => x.login.rps), target(median(loginShare), 0.9, '>= 90%')])
  out.push([`POST /auth/register, ${HASHING_CONNECTIONS} conns`, engine, stats(current.map((x) => x.register)), '', vsPrevious((x) => x.register.rps), ''])
  // The sign-ins of more than one request (bench/lib/flows.ts), as whole sign-ins a second, against the password login.
  const vsLogin = (pick: (run: ServiceRun) => FlowResult) => `${range(current.map((run) => pick(run).rps / run.login.rps))} of password login's req/s`
  const mfa = current.map((x) => x.mfa!)
  const verifyOverRead = median(mfa.map((x) => x.secondP50 - x.readP50))
  out.push([`MFA login: POST /auth/login + /auth/mfa/verify (TOTP), ${HASHING_CONNECTIONS} at once`, engine, stats(mfa), vsLogin((x) => x.mfa!), '', `verify p50 ${median(mfa.map((x) => x.secondP50)).toFixed(2)} ms vs a bearer read's ${median(mfa.map((x) => x.readP50)).toFixed(2)} ms beside it: +${verifyOverRead.toFixed(2)} ms (<= 5 ms: ${met(verifyOverRead <= 5)})`])
  out.push([`passkey login: options + POST /auth/passkeys/login, ${HASHING_CONNECTIONS} at once`, engine, stats(current.map((x) => x.passkey!)), vsLogin((x) => x.passkey!), '', 'information (no argon2id)'])
  out.push(...floodRows(engine, r.flood, s.seconds, ['']))
  const last = current.at(-1)!.restart!
  const lastPrevious = before.at(-1)?.restart
  out.push(['start to ready, existing database', engine, `${Math.round(last.readyMs)} ms | | `, '', lastPrevious ? times(last.readyMs / lastPrevious.readyMs) : '', `<= 1000 ms: ${met(last.readyMs <= 1000)}`])
  const rssAfter = median(current.map((x) => x.rssAfterCases))
  const rssPrevious = lastPrevious ? `idle ${times(last.rssIdle / lastPrevious.rssIdle)}, after the cases ${times(rssAfter / median(before.map((x) => x.rssAfterCases)))}` : ''
  const peak = r.flood.peak.rss
  out.push(['RSS: idle after start / after the cases / peak in the floods', engine, `${mb(last.rssIdle)} / ${mb(rssAfter)} / ${mb(peak)} MB | | `, '', rssPrevious, `<= 110 MB idle: ${met(mb(last.rssIdle) <= 110)}; <= 150 MB peak: ${met(mb(peak) <= 150)}`])
  return out
}

const results = await report.eachEngine(databases, engineRun).finally(() => earlier.forEach((build) => build.remove()))
report.print(
  ['case', 'engine', 'req/s', 'p50 ms', 'p99 ms', 'vs bare Fastify', `vs ${previous ? `previous (${previous.commit})` : 'previous (not run)'}`, 'target (issue 10)'],
  results.flatMap(rows),
  results.map((r) => `the flood's peak on ${r.engine}: ${floodMemory(r.flood)}`),
)

// npm run bench: the built service against a bare Fastify baseline, both as processes of their
// own, on SQLite and on PostgreSQL, in one run; prints one Markdown table of numbers and ratios
// with issue 10's targets. BENCH_SECONDS (default 10) sets each case's length, BENCH_PAIRS (default 3)
// how many pairs each ratio is the median of: (bare Fastify, case) for the reads and refresh, (raw
// argon2id, login) for login, (bearer reads alone, during a login flood) for the flood's p99.
// PostgreSQL: DATABASE_URL, or a throwaway cluster started here (scripts/pg-throwaway.sh).
import { spawnSync } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { hash, verify } from '@node-rs/argon2'
import autocannon from 'autocannon'
import { ARGON2ID, OWASP_ARGON2_PARAMS } from '../src/auth/passwords.ts'
import { loadFromChild } from './child-load.ts'
import { timedLoad } from './latency.ts'
import { startServer, type BenchServer } from './server.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
// Each share of bare Fastify is measured as this many (bare, case) pairs; the table gives the pair
// with the median share and the range of the shares.
const PAIRS = Number(process.env.BENCH_PAIRS ?? 3)
const CONNECTIONS = 50
const READERS = 100
const json = { 'content-type': 'application/json' }
const password = 'a benchmark passphrase'
// The service's own parameters (OWASP), so the comparison is like for like.
const ARGON2 = { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS }

type Result = autocannon.Result
const load = (options: autocannon.Options): Promise<Result> => autocannon({ duration: SECONDS, connections: CONNECTIONS, ...options })
// Each fresh server gets WARMUP seconds of the same load, not counted, before its first measured
// case (the bare baseline as much as the service): the first seconds of a new process run code V8
// has not optimised yet, and which case came first used to decide which one paid for it.
const WARMUP = Number(process.env.BENCH_WARMUP_SECONDS ?? 3)
const warm = (options: autocannon.Options): Promise<Result> => autocannon({ connections: CONNECTIONS, ...options, duration: WARMUP })
const rps = (result: Result) => Math.round(result.requests.average)
const percent = (share: number) => `${(share * 100).toFixed(1)}%`
const mb = (bytes: number) => Math.round(bytes / 1024 / 1024)

/** Raw argon2id verifies per second at the service's parameters and concurrency (HASH_CONCURRENCY=2). */
async function rawArgon2(concurrency = 2): Promise<number> {
  const encoded = await hash(password, ARGON2)
  let done = 0
  const until = performance.now() + SECONDS * 1000
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < until) {
      await verify(encoded, password)
      done++
    }
  }))
  return done / SECONDS
}

/**
 * The bare Fastify baseline as a process of its own, kept up for a whole engine run: each case
 * that is a share of it gets a baseline measured just before it, because this machine's speed
 * drifts by as much as the targets' margins within a minute (bench/RESULTS.md, fourth session).
 */
async function bareBaseline() {
  const server = await startServer({}, { args: ['--import', 'tsx', 'bench/bare.ts'] })
  await warm({ url: `${server.base}/` })
  return {
    measure: async () => rps(await load({ url: `${server.base}/` })),
    stop: () => server.stop(),
  }
}

interface Share {
  bare: number
  rps: number
  share: number
}

/** PAIRS times a baseline run and then the case: the median pair by share, and the lowest and highest share. */
async function shareOfBare(bare: { measure(): Promise<number> }, measureCase: () => Promise<number>) {
  const pairs: Share[] = []
  for (let i = 0; i < PAIRS; i++) {
    const bareRps = await bare.measure()
    const caseRps = await measureCase()
    pairs.push({ bare: bareRps, rps: caseRps, share: caseRps / bareRps })
  }
  pairs.sort((a, b) => a.share - b.share)
  return { median: pairs[Math.floor(pairs.length / 2)]!, low: pairs[0]!.share, high: pairs[pairs.length - 1]!.share }
}

async function engineRun(engine: string, env: Record<string, string>) {
  const limits = { RATE_LIMIT_LOGIN_PER_IP: '1000000000', RATE_LIMIT_REGISTER_PER_IP: '1000000000' }
  let server: BenchServer = await startServer({ ...env, ...limits })
  const api = `${server.base}/api/v1`
  // The bearer reads rotate through READERS users, each with one watchlist, request by request:
  // one user's token over and over would let the PostgreSQL read batches (src/db/batch.ts) answer
  // fifty requests with one index probe, which real traffic would not.
  const users: { email: string; tokens: { access_token: string; refresh_token: string } }[] = []
  for (let u = 0; u < READERS; u++) {
    const email = `bench-${engine}-${Date.now()}-${u}@example.com`
    await fetch(`${api}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password, full_name: 'Bench' }) })
    const tokens = (await (await fetch(`${api}/auth/login`, { method: 'POST', headers: json, body: JSON.stringify({ email, password }) })).json()).data
    await fetch(`${api}/watchlists`, { method: 'POST', headers: { ...json, authorization: `Bearer ${tokens.access_token}` }, body: JSON.stringify({ name: 'Bench', symbols: ['AAPL', 'MSFT'] }) })
    users.push({ email, tokens })
  }
  const { email, tokens } = users[0]!
  let turn = 0
  const rotating = (url: string, connections: number): autocannon.Options => ({
    url,
    connections,
    duration: SECONDS,
    requests: [{ setupRequest: (request) => ({ ...request, headers: { authorization: `Bearer ${users[turn++ % users.length]!.tokens.access_token}` } }) }],
  })
  const bearerReads = (url: string, connections = CONNECTIONS) => load(rotating(url, connections))

  const bare = await bareBaseline()
  const row: Record<string, number | string> = { engine }
  const share = async (name: string, measureCase: () => Promise<number>) => {
    const { median, low, high } = await shareOfBare(bare, measureCase)
    row[`bare_${name}`] = median.bare
    row[name] = `${median.rps} (${percent(median.share)}; ${percent(low)}-${percent(high)})`
  }
  try {
    await warm({ url: `${api}/watchlists`, headers: { authorization: `Bearer ${tokens.access_token}` } })
    await share('watchlists', async () => rps(await bearerReads(`${api}/watchlists`)))
    await share('me', async () => rps(await bearerReads(`${api}/auth/me`)))
    await share('refresh', async () => rps(await load({ url: `${api}/auth/refresh`, method: 'POST', headers: json, body: JSON.stringify({ refresh_token: tokens.refresh_token }) })))
  } finally {
    await bare.stop()
  }
  // Login against raw argon2id the way the reads are against bare Fastify: PAIRS (raw, login) pairs.
  const login = await shareOfBare({ measure: rawArgon2 }, async () => rps(await load({ url: `${api}/auth/login`, connections: 8, method: 'POST', headers: json, body: JSON.stringify({ email, password }) })))
  row.argon2 = Math.round(login.median.bare)
  row.login = `${login.median.rps} (${percent(login.median.share)}; ${percent(login.low)}-${percent(login.high)})`
  let n = 0
  row.register = rps(await load({
    url: `${api}/auth/register`, connections: 8, method: 'POST', headers: json,
    setupClient: (client) => client.setBody(JSON.stringify({ email: `r${Date.now()}-${n++}@example.com`, password, full_name: 'R' })),
    requests: [{ method: 'POST', setupRequest: (request) => ({ ...request, body: JSON.stringify({ email: `r${Date.now()}-${n++}@example.com`, password, full_name: 'R' }) }) }],
  }))

  // Bearer reads alone, then during a 500-connection login flood, PAIRS times like the shares above
  // (one pair read anywhere from x1.4 to x4.5 for the same build, bench/RESULTS.md, seventh
  // session); the row gives the median pair and the range. Memory is sampled through every flood.
  // The p99s are taken from each response's own time (bench/latency.ts), autocannon's whole-ms
  // ones kept beside them.
  row.rss_idle = mb(server.rss())
  let peak = server.rss()
  const floods = []
  for (let i = 0; i < PAIRS; i++) {
    const idle = await timedLoad(rotating(`${api}/auth/me`, 10))
    const sampler = setInterval(() => (peak = Math.max(peak, server.rss())), 50)
    // The flood comes from a process of its own (bench/child-load.ts says why).
    const [during, flood] = await Promise.all([
      timedLoad(rotating(`${api}/auth/me`, 10)),
      loadFromChild({ url: `${api}/auth/login`, connections: 500, seconds: SECONDS, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }),
    ])
    clearInterval(sampler)
    floods.push({ idle, during, flood, ratio: during.percentile(99) / idle.percentile(99) })
    // The logins still queued when the flood stops wait at most HASH_WAIT_SECONDS (5 s) for a hash.
    await new Promise((resolve) => setTimeout(resolve, 6000))
  }
  floods.sort((a, b) => a.ratio - b.ratio)
  const { idle, during, flood, ratio } = floods[Math.floor(floods.length / 2)]!
  row.bearer_p99 = `${idle.percentile(99).toFixed(2)} -> ${during.percentile(99).toFixed(2)} (x${ratio.toFixed(1)}; x${floods[0]!.ratio.toFixed(1)}-x${floods.at(-1)!.ratio.toFixed(1)}) [${idle.result.latency.p99} -> ${during.result.latency.p99}]`
  row.flood_ok = Math.round(flood['2xx'] / SECONDS)
  row.flood_503 = flood.non2xx
  row.flood_errors = flood.errors
  row.rss_peak = mb(peak)

  // Start-up on the existing database (the data directory or database kept).
  await server.stop({ keepData: true })
  server = await startServer({ ...env, ...limits }, { dataDir: server.dataDir })
  row.start_ms = Math.round(server.readyMs)
  await new Promise((resolve) => setTimeout(resolve, 2000))
  row.rss_fresh = mb(server.rss())
  await server.stop()
  return row
}

let cluster: string | undefined
let databaseUrl = process.env.DATABASE_URL
if (!databaseUrl) {
  cluster = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-pg-'))
  const started = spawnSync('scripts/pg-throwaway.sh', ['start', cluster, '55499'], { encoding: 'utf8' })
  if (started.status !== 0) throw new Error(`could not start PostgreSQL: ${started.stderr}`)
  databaseUrl = started.stdout.trim()
}
try {
  const rows = [await engineRun('sqlite', {}), await engineRun('postgres', { DATABASE_URL: databaseUrl! })]
  const lines = [
    `| measure | ${rows.map((r) => r.engine).join(' | ')} | target |`,
    `|---|${rows.map(() => '---').join('|')}|---|`,
    `| bare Fastify GET / (req/s, ${CONNECTIONS} conns), in the median pair of each of the next three | ${rows.map((r) => `${r.bare_watchlists}, ${r.bare_me}, ${r.bare_refresh}`).join(' | ')} | baseline |`,
    `| GET /watchlists (req/s, share of the bare run before it; range over ${PAIRS} pairs) | ${rows.map((r) => r.watchlists).join(' | ')} | >= 40% sqlite, >= 25% postgres |`,
    `| GET /auth/me (req/s, share of the bare run before it; range over ${PAIRS} pairs) | ${rows.map((r) => r.me).join(' | ')} | >= 40% sqlite, >= 25% postgres |`,
    `| POST /auth/refresh (req/s, share of the bare run before it; range over ${PAIRS} pairs) | ${rows.map((r) => r.refresh).join(' | ')} | >= 15% sqlite |`,
    `| raw argon2id verify, 2 at a time (per s), in the median login pair | ${rows.map((r) => r.argon2).join(' | ')} | baseline |`,
    `| POST /auth/login, 8 conns (req/s, share of the raw argon2 run before it; range over ${PAIRS} pairs) | ${rows.map((r) => r.login).join(' | ')} | >= 90% |`,
    `| POST /auth/register, 8 conns (req/s) | ${rows.map((r) => r.register).join(' | ')} | |`,
    `| bearer p99 idle -> during 500-conn login flood (ms, median pair of ${PAIRS}; range of the ratio; autocannon's whole-ms reading in brackets) | ${rows.map((r) => r.bearer_p99).join(' | ')} | <= x2 |`,
    `| login flood, median pair: 2xx per s / 503s / socket errors | ${rows.map((r) => `${r.flood_ok} / ${r.flood_503} / ${r.flood_errors}`).join(' | ')} | excess refused with 503 |`,
    `| start to ready, existing database (ms) | ${rows.map((r) => r.start_ms).join(' | ')} | <= 1000 |`,
    `| RSS idle after start / after the cases / peak in the floods (MB) | ${rows.map((r) => `${r.rss_fresh} / ${r.rss_idle} / ${r.rss_peak}`).join(' | ')} | <= 110 idle, <= 150 peak |`,
  ]
  console.log(lines.join('\n'))
} finally {
  if (cluster) spawnSync('scripts/pg-throwaway.sh', ['stop', cluster])
}

// npx tsx bench/webhooks.ts (after npm run build): webhook delivery (src/webhooks/), two questions.
//
// 1. How many events a second reach one endpoint. A server (dist/server.js, as npm start runs it)
//    with USERS users and one endpoint for user.updated on a receiver in this process that answers
//    204 at once (it does not verify: its cost is not the service's). EVENTS PATCH /auth/me, PRODUCERS
//    at a time spread over the users, each one event; measured from the first request sent to the
//    last distinct webhook-id seen at the receiver. One endpoint is one lane (one delivery at a time,
//    docs/webhooks.md), so this is an endpoint's rate, not the service's. On PostgreSQL also the
//    rows the queue updated per event delivered (pg_stat_user_tables): what the queue writes for
//    each delivery, where three updates (claim, status, close) are the least.
// 2. Whether an endpoint that fails changes login's latency (the issue's goal: login p99 unchanged
//    within noise). POST /auth/login, HASHING_CONNECTIONS connections, SECONDS measured, in three
//    configurations: no endpoint; a dead endpoint (a closed port: refused at once); a hanging
//    endpoint (accepts the connection, never answers: each attempt holds the lane for the 10 s
//    timeout). Both endpoints take `*`. Logins emit no event, so a producer in this process sends
//    PATCH /auth/me every PRODUCE_EVERY_MS (rotating over 10 users) from the endpoint's creation to
//    the measurement's end, BACKLOG seconds before it: a user's events wait behind the user's
//    earlier pending one for its first minute, so a failing endpoint's backlog is retried only
//    after that minute. In the no-endpoint configuration the same requests write no rows. Login is
//    argon2id-bound (HASH_CONCURRENCY 2 hashes at a time), so its p99 is mostly the hasher's queue
//    and moves by tens of per cent between identical runs (bench/RESULTS.md).
//
// Every run is a fresh server (and a fresh PostgreSQL database); ROUNDS rounds, the login
// configurations in an order that rotates from round to round. A ratio is the median of the
// rounds' ratios to the same round's no-endpoint run, its range beside it. Each run waits for a
// quiet machine first and is taken again while other processes used more than BENCH_OTHER_MAX of
// a core during its measurement (bench/quiet.ts). The login load comes from a process of its own
// (bench/load.ts).
//
// BENCH_SECONDS (10), BENCH_WEBHOOK_BACKLOG_SECONDS (70), BENCH_PAIRS (3) rounds, BENCH_ENGINES
// (sqlite,postgres), BENCH_WEBHOOK_EVENTS (2000), LOG_LEVEL (the server's; npm start's default,
// info). PostgreSQL: DATABASE_URL (its user must be able to create databases), or a throwaway
// cluster started here (scripts/pg-throwaway.sh).
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createTcpServer, type Socket } from 'node:net'
import os from 'node:os'
import { promisify } from 'node:util'
import pg from 'pg'
import { openDatabase } from '../src/db/index.ts'
import { autocannonVersion, loadInChild, type LoadResult } from './load.ts'
import { benchDatabases } from './databases.ts'
import { machineCpu, OTHER_MAX, undisturbed, waitForQuiet } from './quiet.ts'
import { seedReaders, type Reader } from './readers.ts'
import { startArgs, startServer, type BenchServer } from './server.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
/** The producer's time before the login measurement: past the first minute, when retries of the backlog start. */
const BACKLOG = Number(process.env.BENCH_WEBHOOK_BACKLOG_SECONDS ?? 70)
const ROUNDS = Number(process.env.BENCH_PAIRS ?? 3)
const ENGINES = (process.env.BENCH_ENGINES ?? 'sqlite,postgres').split(',')
const EVENTS = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 2000)
const LOG_LEVEL = process.env.LOG_LEVEL ?? 'info'
/** Users whose renames make the events: a user's events go in order, one pending at a time. */
const USERS = 100
const PRODUCERS = 16
const HASHING_CONNECTIONS = 8
const PRODUCE_EVERY_MS = 50
/** Measurements taken at most, while other processes disturb them. */
const ATTEMPTS = 3
const CONFIGS = ['none', 'dead', 'hanging'] as const
type Config = (typeof CONFIGS)[number]
const limits = { RATE_LIMIT_LOGIN_PER_IP: '1000000000', RATE_LIMIT_REGISTER_PER_IP: '1000000000', LOG_LEVEL }
const json = { 'content-type': 'application/json' }
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

// PostgreSQL: a throwaway cluster unless DATABASE_URL names one; every run gets a database of its own.
const databases = benchDatabases(ENGINES, 'webhooks', 55497)

const seen = { repeated: 0, maxOther: 0, failures: [] as string[] }
const known = (server: BenchServer) => () => server.cpuMs() + databases.cpuMs()

/** A fresh server on a fresh database, `run` against its API, then both gone. */
async function withServer<T>(engine: string, run: (server: BenchServer, api: string, env: Record<string, string>) => Promise<T>): Promise<T> {
  await waitForQuiet()
  const database = await databases.fresh(engine)
  const env = { ...limits, ...database.env }
  const server = await startServer(env)
  try {
    if (Number.isNaN(server.readyMs)) throw new Error('bench: the service did not answer /healthz')
    return await run(server, `${server.base}/api/v1`, env)
  } finally {
    await server.stop()
    await database.drop()
  }
}

/** An endpoint through the admin API, with an API key made by the CLI on the server's database as an operator would. */
async function addEndpoint(server: BenchServer, env: Record<string, string>, url: string, events: string[]): Promise<void> {
  const { stdout } = await promisify(execFile)(process.execPath, ['bin/portcullis.mjs', 'api-keys', 'create', '--name', 'bench', '--scopes', 'webhooks:write'], {
    env: { ...process.env, DATA_DIR: server.dataDir, ...env },
  })
  const answer = await fetch(`${server.base}/api/v1/admin/webhooks`, { method: 'POST', headers: { ...json, authorization: `Bearer ${stdout.trim()}` }, body: JSON.stringify({ url, events }) })
  if (answer.status !== 201) throw new Error(`bench: POST /admin/webhooks answered ${answer.status}: ${await answer.text()}`)
}

/** One event: the user's name changes (user.updated). */
async function rename(api: string, reader: Reader, n: number): Promise<boolean> {
  const answer = await fetch(`${api}/auth/me`, { method: 'PATCH', headers: { ...json, authorization: `Bearer ${reader.access_token}` }, body: JSON.stringify({ full_name: `Bench ${n}` }) })
  await answer.arrayBuffer()
  return answer.ok
}

/** The receiver of the throughput case: 204 at once; keeps when each webhook-id first arrived. */
async function fastReceiver() {
  const firstSeen = new Map<string, number>()
  let requests = 0
  let waiter: { count: number; resolve: () => void } | null = null
  const server = createHttpServer((request, response) => {
    requests++
    const id = String(request.headers['webhook-id'])
    if (!firstSeen.has(id)) firstSeen.set(id, performance.now())
    if (waiter && firstSeen.size >= waiter.count) waiter.resolve()
    // The body is not needed; reading it to the end lets the connection be used again.
    request.resume()
    request.on('end', () => response.writeHead(204).end())
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
    firstSeen,
    requests: () => requests,
    reset() {
      firstSeen.clear()
      requests = 0
    },
    /** Resolves once `count` distinct webhook-ids have arrived; rejects after `ms`. */
    until(count: number, ms: number): Promise<void> {
      if (firstSeen.size >= count) return Promise.resolve()
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`bench: ${firstSeen.size} of ${count} events delivered after ${ms / 1000} s`)), ms)
        waiter = { count, resolve: () => { clearTimeout(timer); waiter = null; resolve() } }
      })
    },
    close: () => {
      server.closeAllConnections()
      return new Promise((resolve) => server.close(resolve))
    },
  }
}

/** PostgreSQL only: rows of webhook_deliveries updated so far in the server's database (its statistics). */
async function rowUpdates(env: Record<string, string>): Promise<number | null> {
  if (!env.DATABASE_URL) return null
  const client = new pg.Client({ connectionString: env.DATABASE_URL })
  await client.connect()
  try {
    const { rows } = await client.query<{ n: string }>("SELECT n_tup_upd AS n FROM pg_stat_user_tables WHERE relname = 'webhook_deliveries'")
    return Number(rows[0]?.n ?? 0)
  } finally {
    await client.end()
  }
}

interface Throughput { eventsPerSecond: number; producedPerSecond: number; duplicates: number; updatesPerEvent: number | null }

async function throughputRun(engine: string): Promise<Throughput> {
  const receiver = await fastReceiver()
  try {
    return await withServer(engine, async (server, api, env) => {
      const readers = await seedReaders(api, USERS)
      // After the seeding, so that the users' own user.created events are not counted.
      await addEndpoint(server, env, receiver.url, ['user.updated'])
      const { value, other, attempts } = await undisturbed(`${engine} webhook throughput`, known(server), async () => {
        receiver.reset()
        const updatedBefore = await rowUpdates(env)
        const began = performance.now()
        let next = 0
        let failed = 0
        await Promise.all(Array.from({ length: PRODUCERS }, async () => {
          for (let n = next++; n < EVENTS; n = next++) if (!(await rename(api, readers[n % USERS]!, n))) failed++
        }))
        const produced = performance.now()
        if (failed) seen.failures.push(`${engine} throughput: ${failed} PATCH /auth/me failed`)
        await receiver.until(EVENTS - failed, 300_000)
        const last = Math.max(...receiver.firstSeen.values())
        // A little longer: a second delivery of anything would show in the count of requests (and
        // PostgreSQL's statistics of the last updates are flushed, within a second).
        await pause(1500)
        const updated = await rowUpdates(env)
        return {
          value: {
            eventsPerSecond: (EVENTS - failed) / ((last - began) / 1000),
            producedPerSecond: EVENTS / ((produced - began) / 1000),
            duplicates: receiver.requests() - receiver.firstSeen.size,
            updatesPerEvent: updated === null ? null : (updated - updatedBefore!) / (EVENTS - failed),
          },
          loaderCpuMs: 0,
        }
      })
      seen.maxOther = Math.max(seen.maxOther, other)
      seen.repeated += attempts - 1
      return value
    })
  } finally {
    await receiver.close()
  }
}

/** A receiver that accepts connections and never answers: the service's attempt ends at its 10 s timeout (and the connection with it). */
async function hangingReceiver() {
  const sockets: Socket[] = []
  const server = createTcpServer((socket) => {
    sockets.push(socket)
    socket.resume()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
    connections: () => sockets.length,
    close: () => {
      for (const socket of sockets) socket.destroy()
      return new Promise((resolve) => server.close(resolve))
    },
  }
}

/** A port nothing listens on: the dead endpoint's connections are refused at once. */
async function closedPort(): Promise<number> {
  const probe = createTcpServer().listen(0, '127.0.0.1')
  await once(probe, 'listening')
  const { port } = probe.address() as { port: number }
  await new Promise((resolve) => probe.close(resolve))
  return port
}

interface LoginRun { login: LoadResult; other: number; produced: number; rows: number; pending: number; attempts: number; held: number }

/**
 * One login measurement on a fresh server in one configuration. The producer runs from the
 * endpoint's creation to the measurement's end, BACKLOG seconds before it: a user's later events
 * wait behind an earlier pending one for its first minute (docs/webhooks.md), so only after that
 * minute does a failing endpoint's backlog get retried, which is the state to measure login in.
 */
async function loginRunOnce(engine: string, config: Config): Promise<LoginRun> {
  const hanging = config === 'hanging' ? await hangingReceiver() : null
  try {
    return await withServer(engine, async (server, api, env) => {
      const readers = await seedReaders(api, 10)
      const { email, password } = readers[0]!
      if (config === 'dead') await addEndpoint(server, env, `http://127.0.0.1:${await closedPort()}/hook`, ['*'])
      if (hanging) await addEndpoint(server, env, hanging.url, ['*'])
      let produced = 0
      let failed = 0
      const producer = setInterval(() => {
        const n = produced++
        void rename(api, readers[n % readers.length]!, n).then((ok) => ok || failed++, () => failed++)
      }, PRODUCE_EVERY_MS)
      try {
        await pause(BACKLOG * 1000)
        // Not bench/quiet.ts's undisturbed: its wait for a quiet machine would run with the producer
        // and the queue working, which is this measurement's own load. The machine was quiet when
        // the server started (withServer); a disturbed measurement is taken again on a fresh server.
        const machine = machineCpu()
        const began = performance.now()
        const self = process.cpuUsage()
        const knownBefore = known(server)()
        const login = await loadInChild({ url: `${api}/auth/login`, connections: HASHING_CONNECTIONS, seconds: SECONDS, method: 'POST', headers: json, body: JSON.stringify({ email, password }) })
        const { busyMs } = machine()
        const own = process.cpuUsage(self)
        const other = (busyMs - (known(server)() - knownBefore) - login.loaderProcessCpuMs - (own.user + own.system) / 1000) / (performance.now() - began)
        if (login.non2xx || login.errors) seen.failures.push(`${engine} login, ${config}: ${login.non2xx} non-2xx, ${login.errors} socket errors`)
        if (failed) seen.failures.push(`${engine} producer, ${config}: ${failed} PATCH /auth/me failed`)
        // What the queue had to do: its rows as the service left them at the end of the measurement.
        const db = openDatabase({ databaseUrl: env.DATABASE_URL, dataDir: server.dataDir })
        try {
          const rows = await db.kysely.selectFrom('webhook_deliveries').select(['sent_at', 'failed_at', 'attempts']).execute()
          return {
            login,
            other,
            produced,
            rows: rows.length,
            pending: rows.filter((row) => row.sent_at === null && row.failed_at === null).length,
            attempts: rows.reduce((sum, row) => sum + row.attempts, 0),
            held: hanging?.connections() ?? 0,
          }
        } finally {
          await db.close()
        }
      } finally {
        clearInterval(producer)
      }
    })
  } finally {
    await hanging?.close()
  }
}

async function loginRun(engine: string, config: Config): Promise<LoginRun> {
  for (let attempt = 1; ; attempt++) {
    const run = await loginRunOnce(engine, config)
    if (run.other <= OTHER_MAX || attempt === ATTEMPTS) {
      seen.maxOther = Math.max(seen.maxOther, run.other)
      return run
    }
    seen.repeated++
    console.error(`bench: ${engine} login, ${config} endpoint: other processes took ${(run.other * 100).toFixed(1)}% of a core; measuring again`)
  }
}

const began = performance.now()
const throughput: Record<string, Throughput[]> = {}
const logins: Record<string, Record<Config, LoginRun[]>> = {}
try {
  for (const engine of ENGINES) {
    throughput[engine] = []
    for (let round = 0; round < ROUNDS; round++) {
      console.error(`bench: ${engine} throughput, round ${round + 1} of ${ROUNDS}`)
      throughput[engine].push(await throughputRun(engine))
    }
    logins[engine] = { none: [], dead: [], hanging: [] }
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < CONFIGS.length; i++) {
        const config = CONFIGS[(i + round) % CONFIGS.length]!
        console.error(`bench: ${engine} login, round ${round + 1} of ${ROUNDS}: ${config} endpoint`)
        logins[engine][config].push(await loginRun(engine, config))
      }
    }
  }
} finally {
  databases.stop()
}

const range = (values: number[], format: (x: number) => string) => `${format(median(values))} (${format(Math.min(...values))}-${format(Math.max(...values))})`
const times = (x: number) => `x${x.toFixed(2)}`
const whole = (x: number) => Math.round(x).toLocaleString('en')
const date = new Date().toISOString().slice(0, 10)
const label: Record<Config, string> = { none: 'no endpoint', dead: 'a dead endpoint (closed port), `*`', hanging: 'a hanging endpoint (never answers), `*`' }
const out = [
  `npx tsx bench/webhooks.ts, ${new Date().toISOString().slice(0, 16)}Z; Node ${process.version}, ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${os.cpus().length} cores; load average ${os.loadavg()[0]!.toFixed(2)} at the end`,
  `- server: node ${startArgs().join(' ')} (npm start's command), LOG_LEVEL=${LOG_LEVEL}, the log to /dev/null; a fresh server${ENGINES.includes('postgres') ? ' (and PostgreSQL database)' : ''} every run; ${ROUNDS} rounds`,
  `- throughput: ${EVENTS} PATCH /auth/me over ${USERS} users, ${PRODUCERS} at once, one endpoint (user.updated), receiver answering 204 at once in the bench's process`,
  `- login: autocannon ${autocannonVersion} in a process of its own, ${HASHING_CONNECTIONS} connections, ${SECONDS} s, after ${BACKLOG} s of the producer (PATCH /auth/me every ${PRODUCE_EVERY_MS} ms, through the measurement)`,
  `- other processes at most ${(Math.max(0, seen.maxOther) * 100).toFixed(1)}% of a core during a kept measurement (${seen.repeated} measured again); failures: ${seen.failures.length ? seen.failures.join('; ') : 'none'}`,
  `- the whole run took ${((performance.now() - began) / 60_000).toFixed(1)} minutes`,
  '',
  '| case | engine | value | p50 ms | p99 ms | p99 vs no endpoint | the queue during the run | date |',
  '|---|---|---|---|---|---|---|---|',
]
for (const engine of ENGINES) {
  const t = throughput[engine]!
  out.push(`| events delivered to one endpoint, ${EVENTS} events (first sent to last received) | ${engine} | ${range(t.map((x) => x.eventsPerSecond), whole)} events/s | | | | produced at ${whole(median(t.map((x) => x.producedPerSecond)))}/s; ${t.reduce((sum, x) => sum + x.duplicates, 0)} duplicates${t[0]!.updatesPerEvent === null ? '' : `; ${range(t.map((x) => x.updatesPerEvent!), (x) => x.toFixed(1))} row updates per event`} | ${date} |`)
  const runs = logins[engine]!
  for (const config of CONFIGS) {
    const r = runs[config]
    const ratio = config === 'none' ? 'baseline' : range(r.map((run, i) => run.login.p99 / runs.none[i]!.login.p99), times)
    const queue = config === 'none'
      ? `${median(r.map((x) => x.produced))} renames, ${median(r.map((x) => x.rows))} rows`
      : `${median(r.map((x) => x.produced))} renames, ${median(r.map((x) => x.rows))} rows, ${median(r.map((x) => x.attempts))} attempts, ${median(r.map((x) => x.pending))} pending at the end${config === 'hanging' ? `, ${median(r.map((x) => x.held))} connections made to it (one per 10 s attempt)` : ''}`
    out.push(`| POST /auth/login, ${HASHING_CONNECTIONS} conns, ${label[config]} | ${engine} | ${whole(median(r.map((x) => x.login.rps)))} req/s | ${median(r.map((x) => x.login.p50)).toFixed(1)} | ${median(r.map((x) => x.login.p99)).toFixed(1)} | ${ratio} | ${queue} | ${date} |`)
  }
}
console.log(out.join('\n'))

// npm run bench:webhooks: webhook delivery (src/webhooks/), two questions.
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
//    within noise). POST /auth/login, HASHING_CONNECTIONS connections, BENCH_SECONDS measured, in three
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
// Every run is a fresh server (and a fresh PostgreSQL database); BENCH_PAIRS rounds, the login
// configurations in an order that rotates from round to round. A ratio is the median of the
// rounds' ratios to the same round's no-endpoint run, its range beside it. Each run waits for a
// quiet machine first and is taken again while other processes used more than BENCH_OTHER_MAX of
// a core during its measurement (bench/lib/quiet.ts). The login load comes from a process of its own
// (bench/lib/load.ts).
//
// BENCH_SECONDS (10), BENCH_WEBHOOK_BACKLOG_SECONDS (70), BENCH_PAIRS (3) rounds, BENCH_ENGINES
// (sqlite,postgres), BENCH_WEBHOOK_EVENTS (2000), BENCH_SERVER_CPUS and BENCH_LOADER_CPUS (taskset
// core lists), LOG_LEVEL (the server's; npm start's default, info). PostgreSQL: DATABASE_URL (its
// user must be able to create databases), or a throwaway cluster started here
// (scripts/pg-throwaway.sh, bench/lib/databases.ts).
import { once } from 'node:events'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createTcpServer, type Socket } from 'node:net'
import pg from 'pg'
import { openDatabase } from '../src/db/index.ts'
import { benchDatabases } from './lib/databases.ts'
import { loadInChild, type LoadResult } from './lib/load.ts'
import { machineCpu, OTHER_MAX } from './lib/quiet.ts'
import { seedReaders, type Reader } from './lib/readers.ts'
import { median, pause, percent, range, Report, rotation, settings } from './lib/report.ts'
import { BENCH_ENV, freePort, startArgs, startServer, type BenchServer } from './lib/server.ts'

const s = settings({ seconds: 10 })
/** The producer's time before the login measurement: past the first minute, when retries of the backlog start. */
const BACKLOG = Number(process.env.BENCH_WEBHOOK_BACKLOG_SECONDS ?? 70)
const EVENTS = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 2000)
/** Users whose renames make the events: a user's events go in order, one pending at a time. */
const USERS = 100
const PRODUCERS = 16
const HASHING_CONNECTIONS = 8
const PRODUCE_EVERY_MS = 50
/** Login measurements taken at most (each on a fresh server), while other processes disturb them. */
const ATTEMPTS = 3
const CONFIGS = ['none', 'dead', 'hanging'] as const
type Config = (typeof CONFIGS)[number]
const json = { 'content-type': 'application/json' }

// PostgreSQL: a throwaway cluster unless DATABASE_URL names one; every run gets a database of its own.
const databases = benchDatabases(s.engines, 'webhooks', 55497)

const report = new Report('npm run bench:webhooks', s, [
  `server: node ${startArgs().join(' ')} (npm start's command), LOG_LEVEL=${BENCH_ENV.LOG_LEVEL}, the log to /dev/null; a fresh server${s.engines.includes('postgres') ? ' (and PostgreSQL database)' : ''} every run; ${s.rounds} rounds`,
  `throughput: ${EVENTS} PATCH /auth/me over ${USERS} users, ${PRODUCERS} at once, one endpoint (user.updated), receiver answering 204 at once in the bench's process`,
  `login: ${HASHING_CONNECTIONS} connections, ${s.seconds} s, after ${BACKLOG} s of the producer (PATCH /auth/me every ${PRODUCE_EVERY_MS} ms, through the measurement)`,
])

const known = (server: BenchServer) => () => server.cpuMs() + databases.cpuMs()

/** A fresh server on a fresh database, `run` against it (with the database's env), then both gone. */
async function withServer<T>(engine: string, run: (server: BenchServer, env: Record<string, string>) => Promise<T>): Promise<T> {
  await report.quiet()
  const database = await databases.fresh(engine)
  const server = report.server(await startServer(database.env, { cpus: s.serverCpus }))
  try {
    return await run(server, database.env)
  } finally {
    await server.stop()
    await database.drop()
  }
}

/** An endpoint through the admin API, with an API key made by the CLI on the server's database as an operator would. */
async function addEndpoint(server: BenchServer, url: string, events: string[]): Promise<void> {
  const key = server.cli(['api-keys', 'create', '--name', 'bench', '--scopes', 'webhooks:write'])
  const answer = await fetch(`${server.api}/admin/webhooks`, { method: 'POST', headers: { ...json, authorization: `Bearer ${key}` }, body: JSON.stringify({ url, events }) })
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
    return await withServer(engine, async (server, env) => {
      const readers = await seedReaders(server.api, USERS)
      // After the seeding, so that the users' own user.created events are not counted.
      await addEndpoint(server, receiver.url, ['user.updated'])
      return report.kept(`${engine} webhook throughput`, known(server), async () => {
        receiver.reset()
        const updatedBefore = await rowUpdates(env)
        const began = performance.now()
        let next = 0
        let failed = 0
        await Promise.all(Array.from({ length: PRODUCERS }, async () => {
          for (let n = next++; n < EVENTS; n = next++) if (!(await rename(server.api, readers[n % USERS]!, n))) failed++
        }))
        const produced = performance.now()
        if (failed) report.failure(`${engine} throughput: ${failed} PATCH /auth/me failed`)
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
          // The producers are this process, which the check counts itself.
          loaderCpuMs: 0,
        }
      })
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
    return await withServer(engine, async (server, env) => {
      const readers = await seedReaders(server.api, 10)
      const { email, password } = readers[0]!
      // The dead endpoint: a port nothing listens on (a free one), so its connections are refused at once.
      if (config === 'dead') await addEndpoint(server, `http://127.0.0.1:${await freePort()}/hook`, ['*'])
      if (hanging) await addEndpoint(server, hanging.url, ['*'])
      let produced = 0
      let failed = 0
      const producer = setInterval(() => {
        const n = produced++
        void rename(server.api, readers[n % readers.length]!, n).then((ok) => ok || failed++, () => failed++)
      }, PRODUCE_EVERY_MS)
      try {
        await pause(BACKLOG * 1000)
        // Not report.kept (bench/lib/quiet.ts's undisturbed): its wait for a quiet machine would run
        // with the producer and the queue working, which is this measurement's own load. The machine
        // was quiet when the server started (withServer); a disturbed measurement is taken again on a
        // fresh server (loginRun).
        const machine = machineCpu()
        const began = performance.now()
        const self = process.cpuUsage()
        const knownBefore = known(server)()
        const login = await loadInChild({ url: `${server.api}/auth/login`, connections: HASHING_CONNECTIONS, seconds: s.seconds, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }, s.loaderCpus)
        const { busyMs } = machine()
        const own = process.cpuUsage(self)
        const other = (busyMs - (known(server)() - knownBefore) - login.loaderProcessCpuMs - (own.user + own.system) / 1000) / (performance.now() - began)
        report.noteLoad(`${engine} login, ${config}`, login)
        if (failed) report.failure(`${engine} producer, ${config}: ${failed} PATCH /auth/me failed`)
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
      report.judged({ other: run.other, steal: 0, attempts: attempt })
      return run
    }
    console.error(`bench: ${engine} login, ${config} endpoint: other processes took ${percent(run.other)} of a core; measuring again`)
  }
}

/** The throughput rounds, then the login rounds with the configurations in rotating order. */
async function engineRun(engine: string) {
  const throughput: Throughput[] = []
  for (let round = 0; round < s.rounds; round++) {
    console.error(`bench: ${engine} throughput, round ${round + 1} of ${s.rounds}`)
    throughput.push(await throughputRun(engine))
  }
  const logins: Record<Config, LoginRun[]> = { none: [], dead: [], hanging: [] }
  for (let round = 0; round < s.rounds; round++) {
    for (const config of rotation(CONFIGS, round)) {
      console.error(`bench: ${engine} login, round ${round + 1} of ${s.rounds}: ${config} endpoint`)
      logins[config].push(await loginRun(engine, config))
    }
  }
  return { engine, throughput, logins }
}

const whole = (x: number) => Math.round(x).toLocaleString('en')
const label: Record<Config, string> = { none: 'no endpoint', dead: 'a dead endpoint (closed port), `*`', hanging: 'a hanging endpoint (never answers), `*`' }

/** The rows of one engine: case, engine, value, p50, p99, p99 vs no endpoint, the queue. */
function rows({ engine, throughput: t, logins: runs }: Awaited<ReturnType<typeof engineRun>>): string[][] {
  const updates = t[0]!.updatesPerEvent === null ? '' : `; ${range(t.map((x) => x.updatesPerEvent!), (x) => x.toFixed(1))} row updates per event`
  const out = [[`events delivered to one endpoint, ${EVENTS} events (first sent to last received)`, engine, `${range(t.map((x) => x.eventsPerSecond), whole)} events/s`, '', '', '', `produced at ${whole(median(t.map((x) => x.producedPerSecond)))}/s; ${t.reduce((sum, x) => sum + x.duplicates, 0)} duplicates${updates}`]]
  for (const config of CONFIGS) {
    const r = runs[config]
    const ratio = config === 'none' ? 'baseline' : range(r.map((run, i) => run.login.p99 / runs.none[i]!.login.p99))
    const queue = config === 'none'
      ? `${median(r.map((x) => x.produced))} renames, ${median(r.map((x) => x.rows))} rows`
      : `${median(r.map((x) => x.produced))} renames, ${median(r.map((x) => x.rows))} rows, ${median(r.map((x) => x.attempts))} attempts, ${median(r.map((x) => x.pending))} pending at the end${config === 'hanging' ? `, ${median(r.map((x) => x.held))} connections made to it (one per 10 s attempt)` : ''}`
    out.push([`POST /auth/login, ${HASHING_CONNECTIONS} conns, ${label[config]}`, engine, `${whole(median(r.map((x) => x.login.rps)))} req/s`, median(r.map((x) => x.login.p50)).toFixed(1), median(r.map((x) => x.login.p99)).toFixed(1), ratio, queue])
  }
  return out
}

const results = await report.eachEngine(databases, engineRun)
report.print(['case', 'engine', 'value', 'p50 ms', 'p99 ms', 'p99 vs no endpoint', 'the queue during the run'], results.flatMap(rows), [
  'the login measurements are checked for other processes over the login alone (loginRunOnce), and taken again on a fresh server',
])

// Login flood: do bearer-token requests stay fast, and memory bounded, while many connections
// hammer POST /auth/login at full argon2 cost? GET /auth/me alone, then during the flood. The
// server runs in its own process (bench/server.ts), the flood in another (bench/child-load.ts).
//   npx tsx bench/flood.ts [flood connections, default 64]
// BENCH_SERVER=<another tree>/dist/server.js runs that build instead, for an A/B (bench/server.ts).
import { floodBench } from './flood-setup.ts'
import type { TimedLoad } from './latency.ts'
import { startServer } from './server.ts'

const floodConnections = Number(process.argv[2] ?? 64)
// The hashing limits and the database may be set from the environment, to compare settings.
const passed = Object.fromEntries(['HASH_CONCURRENCY', 'HASH_QUEUE', 'HASH_WAIT_SECONDS', 'DATABASE_URL'].flatMap((name) => (process.env[name] ? [[name, process.env[name]!]] : [])))
const server = await startServer({ RATE_LIMIT_LOGIN_PER_IP: '100000000', LOGIN_FREE_FAILURES: '100', ...passed })
const { reads: me, flood: loginFlood } = await floodBench(server)
const waitedBefore = server.eventLoopWaitMs()
const alone = await me()
const waitedAlone = server.eventLoopWaitMs() - waitedBefore
const rssBefore = server.rss()
let peakRss = rssBefore
const sampler = setInterval(() => (peakRss = Math.max(peakRss, server.rss())), 50)
const [during, flood] = await Promise.all([me(), loginFlood(floodConnections)])
clearInterval(sampler)
const waitedDuring = server.eventLoopWaitMs() - waitedBefore - waitedAlone

const mb = (bytes: number) => +(bytes / 1024 / 1024).toFixed(1)
// p50/p99 from each response's own time (bench/latency.ts), autocannon's whole-ms p99 beside them;
// and how long the server's event loop waited for a core meanwhile (the helper threads' priority).
const reads = (load: TimedLoad, waitedMs: number) => ({
  rps: Math.round(load.result.requests.average),
  p50_ms: +load.percentile(50).toFixed(2),
  p99_ms: +load.percentile(99).toFixed(2),
  p99_whole_ms: load.result.latency.p99,
  non2xx: load.result.non2xx,
  event_loop_waiting_ms: Math.round(waitedMs),
})
console.log(JSON.stringify({
  engine: process.env.DATABASE_URL ? 'postgres' : 'sqlite',
  me_alone: reads(alone, waitedAlone),
  me_during_flood: reads(during, waitedDuring),
  hashing: { concurrency: process.env.HASH_CONCURRENCY ?? 'default', queue: process.env.HASH_QUEUE ?? 'default' },
  login_flood: { connections: floodConnections, total: flood.requests.total, status_2xx: flood['2xx'], status_503: flood.non2xx, ok_per_s: Math.round(flood['2xx'] / 10) },
  server_rss_mb: { before_flood: mb(rssBefore), peak_during_flood: mb(peakRss) },
}))
await server.stop()

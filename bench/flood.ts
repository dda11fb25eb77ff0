// The login flood, a scenario of `npm run bench` and runnable alone (`npm run bench:flood`): bearer
// reads (GET /auth/me, READ_CONNECTIONS connections rotating through READERS users' tokens) alone,
// then beside FLOOD_CONNECTIONS connections of POST /auth/login for one account at full argon2id
// cost, each from a process of its own, BENCH_PAIRS times on one server. Information, no target:
// on 2 shared cores a 500-connection flood's p99 is the kernel scheduler's figure, not this code's.
// It gives the peak-RSS row: the server's resident memory sampled every 50 ms through the floods,
// and its anonymous part (heaps, buffers; the rest is the node binary and libraries, which do not move).
import { readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { benchDatabases, type BenchDatabases } from './lib/databases.ts'
import { loadInChild, type LoadResult, type LoadSpec } from './lib/load.ts'
import { seedReaders } from './lib/readers.ts'
import { mb, median, pause, range, Report, settings, stats, times } from './lib/report.ts'
import { startArgs, startServer } from './lib/server.ts'

export const FLOOD_CONNECTIONS = 500
export const READ_CONNECTIONS = 10
const READERS = 100
const json = { 'content-type': 'application/json' }

interface FloodPair { alone: LoadResult; during: LoadResult; flood: LoadResult }
/** What bench/lib/memory-probe.mjs saw inside the server at its highest resident size, in bytes. */
export interface MemoryAtPeak { rss: number; anon: number; file: number; heapTotal: number; heapUsed: number; external: number; arrayBuffers: number }
export interface FloodResult { pairs: FloodPair[]; idle: { rss: number; anon: number }; peak: { rss: number; anon: number }; after?: { rss: number; anon: number }; inside?: { peak: MemoryAtPeak; marks: [MemoryAtPeak, MemoryAtPeak] } }

/**
 * The reads alone and during a flood, `report.settings.rounds` times on one fresh server; with
 * `probe`, the server runs with bench/lib/memory-probe.mjs, which says how its peak is made up.
 */
export async function floodRuns(report: Report, databases: BenchDatabases, engine: string, probe = false): Promise<FloodResult> {
  const { seconds, warmup, rounds, serverCpus, loaderCpus } = report.settings
  await report.quiet()
  const database = await databases.fresh(engine)
  const probeFile = path.join(tmpdir(), `portcullis-memory-${process.pid}-${engine}.json`)
  const args = startArgs()
  const probed = probe ? { args: [...args.slice(0, -1), '--import', './bench/lib/memory-probe.mjs', args.at(-1)!] } : {}
  const server = report.server(await startServer({ ...database.env, ...(probe ? { BENCH_MEMORY_PROBE: probeFile } : {}) }, { cpus: serverCpus, ...probed }))
  const known = () => server.cpuMs() + databases.cpuMs()
  try {
    const readers = await seedReaders(server.api, READERS)
    const { email, password } = readers[0]!
    const reads: Omit<LoadSpec, 'seconds'> = { url: `${server.api}/auth/me`, connections: READ_CONNECTIONS, tokens: readers.map((r) => r.access_token) }
    const flood: LoadSpec = { url: `${server.api}/auth/login`, connections: FLOOD_CONNECTIONS, seconds, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }
    await loadInChild({ ...reads, seconds: warmup }, loaderCpus)
    const { rss, anon } = server.memory()
    if (probe) server.child.kill('SIGUSR2')
    const result: FloodResult = { pairs: [], idle: { rss, anon }, peak: { rss, anon } }
    for (let i = 0; i < rounds; i++) {
      const alone = await report.load(`${engine} reads before the flood`, known, reads, 0)
      const sampler = setInterval(() => {
        const now = server.memory()
        result.peak = { rss: Math.max(result.peak.rss, now.rss), anon: Math.max(result.peak.anon, now.anon) }
      }, 50)
      const [during, floodResult] = await report.kept(`${engine} flood`, known, async () => {
        const both = await Promise.all([loadInChild({ ...reads, seconds }, loaderCpus), loadInChild(flood, loaderCpus)])
        return { value: both, loaderCpuMs: both[0].loaderProcessCpuMs + both[1].loaderProcessCpuMs }
      })
      clearInterval(sampler)
      result.pairs.push({ alone, during, flood: floodResult })
      // The logins still queued when the flood stops wait at most HASH_WAIT_SECONDS (5 s) for a hash.
      await pause(6000)
    }
    result.after = server.memory()
    if (probe) {
      server.child.kill('SIGUSR2')
      await pause(100)
    }
    await server.stop()
    if (probe) result.inside = JSON.parse(readFileSync(probeFile, 'utf8')) as FloodResult['inside']
    return result
  } finally {
    await server.stop()
    await database.drop()
    rmSync(probeFile, { force: true })
  }
}

/**
 * The flood's rows: the reads during it and the logins' outcome, in the columns case, engine,
 * req/s | p50 | p99, the ratio, `between` (empty cells: `npm run bench` has a "vs previous"), target.
 */
export function floodRows(engine: string, r: FloodResult, seconds: number, between: string[] = []): string[][] {
  const alone = median(r.pairs.map((p) => p.alone.p99))
  return [
    [`GET /auth/me, ${READ_CONNECTIONS} conns, during a ${FLOOD_CONNECTIONS}-conn login flood`, engine, stats(r.pairs.map((p) => p.during)), `p99 ${range(r.pairs.map((p) => p.during.p99 / p.alone.p99), times)} of alone (${alone.toFixed(2)} ms)`, ...between, 'information'],
    ["the flood's logins: 2xx / refused (429, 503) a second", engine, `${median(r.pairs.map((p) => p.flood.ok / seconds)).toFixed(0)} / ${median(r.pairs.map((p) => p.flood.non2xx / seconds)).toFixed(0)} | | `, '', ...between, 'information'],
  ]
}

export const floodMemory = (r: FloodResult) =>
  `${mb(r.peak.rss)} MB (anonymous ${mb(r.peak.anon)}; before the floods ${mb(r.idle.rss)}, anonymous ${mb(r.idle.anon)}; 6 s after the last ${mb(r.after!.rss)}, anonymous ${mb(r.after!.anon)})`

/**
 * The peak as the server saw it, each part as before the floods -> at the peak -> 6 s after the
 * last: file-backed, V8's heap, what JS objects hold outside it, and the native rest.
 */
export function peakParts({ peak, marks: [before, after] }: NonNullable<FloodResult['inside']>): string {
  const native = (m: MemoryAtPeak) => m.anon - m.heapTotal - m.external
  const part = (pick: (m: MemoryAtPeak) => number) => `${mb(pick(before))} -> ${mb(pick(peak))} -> ${mb(pick(after))}`
  return `RSS ${part((m) => m.rss)} MB = file-backed ${part((m) => m.file)} + V8 heap ${part((m) => m.heapTotal)} (used ${part((m) => m.heapUsed)}) + held by JS objects outside the heap ${part((m) => m.external)} + native ${part(native)} (argon2id, SQLite, libuv, the allocators' free lists, stacks); before the floods -> peak -> 6 s after`
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const s = settings()
  const report = new Report('npm run bench:flood', s, [
    `the flood: ${FLOOD_CONNECTIONS} connections of POST /auth/login for one account beside ${READ_CONNECTIONS} connections of GET /auth/me rotating through ${READERS} users' tokens, ${s.seconds} s, ${s.rounds} rounds on one fresh server${s.engines.includes('postgres') ? ' (and PostgreSQL database)' : ''} per engine`,
  ])
  const databases = benchDatabases(s.engines, 'flood', 55496)
  const rows = await report.eachEngine(databases, async (engine) => {
    const r = await floodRuns(report, databases, engine, true)
    return [
      ...floodRows(engine, r, s.seconds),
      ['RSS: peak in the floods', engine, `${floodMemory(r)} | | `, '', 'information'],
      ['the peak, from inside the server', engine, `${peakParts(r.inside!)} | | `, '', 'information'],
    ]
  })
  report.print(['case', 'engine', 'req/s', 'p50 ms', 'p99 ms', 'vs alone', 'target'], rows.flat())
}

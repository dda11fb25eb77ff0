// What moves a bearer read's share of bare Fastify (issue 26): one factor at a time, each variant
// a pair of runs (bare Fastify, then the service; the other way round in even rounds), every run
// on a fresh server with BENCH_WARMUP_SECONDS (3) of warm-up and BENCH_SECONDS (10) measured.
// Besides req/s it reports each side's CPU time a request, the steadier measure on a shared machine.
//   npx tsx bench/factors.ts                    (every variant, FACTORS_ROUNDS=3 rounds)
//   npx tsx bench/factors.ts old,child,warn     (some of them)
// BENCH_SERVER=<a tree>/dist/server.js measures another build (bench/server.ts). SQLite only.
import { loadavg } from 'node:os'
import { autocannonVersion, loadInChild, measure, type LoadResult, type LoadSpec } from './load.ts'
import { machineCpu, OTHER_MAX, waitForQuiet } from './quiet.ts'
import { seedReaders } from './readers.ts'
import { startServer } from './server.ts'

interface Variant {
  /** in-process: autocannon in this process, as bench/run.ts ran it before issue 26. */
  loader: 'in-process' | 'child'
  /** rebuilt: 100 users, every request rebuilt (the old rotation); prebuilt: 100 users, built once; one: a single token. */
  tokens: 'rebuilt' | 'prebuilt' | 'one'
  route: '/watchlists' | '/auth/me'
  logLevel: 'info' | 'warn'
  /** split: the server on core 0 and the generator on core 1 (taskset); loader-1: only the generator pinned, to core 1. Both need the child loader. */
  placement: 'unpinned' | 'split' | 'loader-1'
  connections: number
}

// 'old' is bench/run.ts's read case before issue 26; each other variant changes one thing from
// 'child', which is the bench after it, except 'harness', the independent harness of issue 26.
const old: Variant = { loader: 'in-process', tokens: 'rebuilt', route: '/watchlists', logLevel: 'info', placement: 'unpinned', connections: 50 }
const child: Variant = { ...old, loader: 'child', tokens: 'prebuilt' }
const variants: Record<string, Variant> = {
  old,
  'old-prebuilt': { ...old, tokens: 'prebuilt' },
  'old-child': { ...old, loader: 'child' },
  child,
  'one-token': { ...child, tokens: 'one' },
  me: { ...child, route: '/auth/me' },
  warn: { ...child, logLevel: 'warn' },
  split: { ...child, placement: 'split' },
  'loader-1': { ...child, placement: 'loader-1' },
  c10: { ...child, connections: 10 },
  c100: { ...child, connections: 100 },
  harness: { ...child, tokens: 'one', logLevel: 'warn' },
}

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
const WARMUP = Number(process.env.BENCH_WARMUP_SECONDS ?? 3)
const ROUNDS = Number(process.env.FACTORS_ROUNDS ?? 3)
const ATTEMPTS = Number(process.env.FACTORS_ATTEMPTS ?? 6)
const chosen = (process.argv[2] ?? Object.keys(variants).join(',')).split(',')
const limits = { RATE_LIMIT_LOGIN_PER_IP: '1000000000', RATE_LIMIT_REGISTER_PER_IP: '1000000000' }

interface Run extends LoadResult {
  serverUsPerRequest: number
  loaderUsPerRequest: number
  /** CPU time of everything but the server and the generator during the measured run, as a share of one core. */
  otherCpu: number
  /** Interrupt and softirq time (loopback TCP) during the measured run, as a share of one core. */
  irqCpu: number
  /** Steal time (the hypervisor), as a share of one core. */
  stealCpu: number
}

async function oneRun(side: 'bare' | 'service', v: Variant): Promise<Run> {
  await waitForQuiet()
  const cpus = { unpinned: { server: undefined, loader: undefined }, split: { server: '0', loader: '1' }, 'loader-1': { server: undefined, loader: '1' } }[v.placement]
  const server = side === 'bare'
    ? await startServer({}, { args: ['--import', 'tsx', 'bench/bare.ts'], cpus: cpus.server })
    : await startServer({ ...limits, LOG_LEVEL: v.logLevel }, { cpus: cpus.server })
  try {
    let spec: LoadSpec = { url: `${server.base}/`, connections: v.connections, seconds: SECONDS }
    if (side === 'service') {
      const api = `${server.base}/api/v1`
      const readers = await seedReaders(api, 100)
      spec = {
        url: `${api}${v.route}`,
        connections: v.connections,
        seconds: SECONDS,
        tokens: v.tokens === 'one' ? [readers[0]!.access_token] : readers.map((r) => r.access_token),
        rebuildEachRequest: v.tokens === 'rebuilt',
      }
    }
    const load = (s: LoadSpec) => (v.loader === 'child' ? loadInChild(s, cpus.loader) : measure(s))
    await load({ ...spec, seconds: WARMUP })
    const before = server.cpuMs()
    const machine = machineCpu()
    const self = process.cpuUsage()
    const result = await load(spec)
    const { busyMs, irqMs, stealMs } = machine()
    const { user, system } = process.cpuUsage(self)
    const selfMs = v.loader === 'child' ? (user + system) / 1000 : 0
    const serverMs = server.cpuMs() - before
    const requests = result.ok + result.non2xx
    if (result.non2xx || result.errors) console.error(`${side}: ${result.non2xx} non-2xx, ${result.errors} errors`)
    const core = SECONDS * 1000
    const otherCpu = (busyMs - serverMs - (v.loader === 'child' ? result.loaderProcessCpuMs : result.loaderCpuMs) - selfMs) / core
    return { ...result, serverUsPerRequest: (serverMs * 1000) / requests, loaderUsPerRequest: (result.loaderCpuMs * 1000) / requests, otherCpu, irqCpu: irqMs / core, stealCpu: stealMs / core }
  } finally {
    await server.stop()
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const runs: Record<string, { bare: Run; service: Run }[]> = {}
console.log(`autocannon ${autocannonVersion}; ${SECONDS} s measured after ${WARMUP} s of warm-up, fresh server each run; ${ROUNDS} rounds; SQLite; ${process.env.BENCH_SERVER ?? 'dist/server.js'}`)
for (let round = 1; round <= ROUNDS; round++) {
  for (const name of chosen) {
    const v = variants[name]
    if (!v) throw new Error(`no variant ${name}: ${Object.keys(variants).join(', ')}`)
    const first = round % 2 ? 'bare' : 'service'
    // A pair during which other processes took more than OTHER_MAX of a core is run again (FACTORS_ATTEMPTS times at most).
    let pair: { bare: Run; service: Run } | undefined
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const a = await oneRun(first, v)
      const b = await oneRun(first === 'bare' ? 'service' : 'bare', v)
      pair = first === 'bare' ? { bare: a, service: b } : { bare: b, service: a }
      if (Math.max(a.otherCpu, b.otherCpu) <= OTHER_MAX) break
      console.log(`round ${round} ${name}: other processes took ${(Math.max(a.otherCpu, b.otherCpu) * 100).toFixed(0)}% of a core${attempt < ATTEMPTS ? '; again' : '; kept'}`)
    }
    ;(runs[name] ??= []).push(pair!)
    const { bare, service } = pair!
    console.log(`round ${round} ${name} (load average ${loadavg()[0]!.toFixed(2)}): bare ${bare.rps} (server ${bare.serverUsPerRequest.toFixed(1)} us, loader ${bare.loaderUsPerRequest.toFixed(1)} us a request) service ${service.rps} (server ${service.serverUsPerRequest.toFixed(1)} us, loader ${service.loaderUsPerRequest.toFixed(1)} us; p50 ${service.p50.toFixed(2)} p99 ${service.p99.toFixed(2)} ms; loader cores ${service.loaderCpus}; other CPU ${(bare.otherCpu * 100).toFixed(0)}% / ${(service.otherCpu * 100).toFixed(0)}%, irq ${(bare.irqCpu * 100).toFixed(0)}% / ${(service.irqCpu * 100).toFixed(0)}%, steal ${(bare.stealCpu * 100).toFixed(0)}% / ${(service.stealCpu * 100).toFixed(0)}% of a core) share ${((service.rps / bare.rps) * 100).toFixed(1)}%`)
  }
}
console.log('\n| variant | loader | tokens | route | LOG_LEVEL | cores | conns | bare req/s | service req/s | share, median (range) | server us/req bare / service | loader us/req bare / service |')
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|')
for (const name of chosen) {
  const v = variants[name]!
  const pairs = runs[name]!
  const shares = pairs.map((p) => (p.service.rps / p.bare.rps) * 100)
  const m = (f: (p: { bare: Run; service: Run }) => number, digits = 0) => median(pairs.map(f)).toFixed(digits)
  console.log(`| ${name} | ${v.loader} | ${v.tokens} | ${v.route} | ${v.logLevel} | ${v.placement} | ${v.connections} | ${m((p) => p.bare.rps)} | ${m((p) => p.service.rps)} | ${median(shares).toFixed(1)}% (${Math.min(...shares).toFixed(1)}-${Math.max(...shares).toFixed(1)}) | ${m((p) => p.bare.serverUsPerRequest, 1)} / ${m((p) => p.service.serverUsPerRequest, 1)} | ${m((p) => p.bare.loaderUsPerRequest, 1)} / ${m((p) => p.service.loaderUsPerRequest, 1)} |`)
}

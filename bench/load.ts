// One measured load: autocannon for the given seconds, with p50 and p99 taken from each 2xx
// response's own time (autocannon's histogram counts whole
// milliseconds; bench/latency.ts says why that matters). It runs either in the calling process or
// in a process of its own (loadInChild), optionally pinned to given cores with taskset. The
// bench uses the child: a load generator in the process that also starts servers, keeps the
// tokens and takes the time competes with that process's own work and garbage, and how much it
// costs depends on what else the process holds (bench/RESULTS.md, 'How the figures were found').
//   echo '{"url":"http://127.0.0.1:3000/","connections":50,"seconds":10}' | node --import tsx bench/load.ts
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

export interface LoadSpec {
  url: string
  connections: number
  seconds: number
  method?: 'GET' | 'POST'
  headers?: Record<string, string>
  body?: string
  /**
   * Bearer tokens to send in turn. Each connection cycles through all of them request by request,
   * from its own starting point, so concurrent requests carry different users. The requests are
   * built once per connection, not per request, so the rotation costs the generator nothing.
   */
  tokens?: string[]
  /**
   * The rotation as the bench made it before issue 26: autocannon's setupRequest, which rebuilds
   * every request (35-47 us of the generator's CPU a request against 25-27). Kept for
   * bench/factors.ts, which measures what it moved.
   */
  rebuildEachRequest?: boolean
  /** A POST /auth/register body with an address of its own for every request (register case). */
  registerBody?: { password: string; full_name: string }
  /**
   * Bodies to send exactly once each (one-time credentials: authorization codes, rotating refresh
   * tokens), with `method` (POST unless given) and `headers`. Connection k sends its own
   * contiguous share of the list, built once as the tokens' rotation is, and the load ends when
   * the last one is answered (autocannon's `amount`): `seconds` is then not used, and req/s is
   * the answers over the time from the start to the last answer. Needs at least one body per
   * connection.
   */
  bodies?: string[]
  /**
   * With `bodies`: a string field of each 2xx answer's JSON body, given back in `collected` (what
   * the next case can use up in turn: the refresh token of each code exchange).
   */
  collect?: string
}

export interface LoadResult {
  rps: number
  /** From each 2xx response's own time, in ms (nearest rank). */
  p50: number
  p99: number
  ok: number
  non2xx: number
  errors: number
  timeouts: number
  /** CPU time (user + system, all threads) of the generating process during the measured run, in ms. */
  loaderCpuMs: number
  /** The same over the generating process's whole life so far (a child's start-up included), in ms. */
  loaderProcessCpuMs: number
  /** Process id and allowed cores of the process that generated the load. */
  loaderPid: number
  loaderCpus: string
  /** The `collect` field of every 2xx answer, when asked for. */
  collected?: string[]
}

/** The cores a process may run on (Linux), as taskset prints them, e.g. "0-1" or "1". */
export function allowedCpus(pid: number | 'self' = 'self'): string {
  try {
    return /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 'unknown'
  } catch {
    return 'unknown'
  }
}

export const autocannonVersion: string = (createRequire(import.meta.url)('autocannon/package.json') as { version: string }).version

function options(spec: LoadSpec, seconds: number, collected: string[] = []): autocannon.Options {
  const base: autocannon.Options = { url: spec.url, connections: spec.connections, duration: seconds, method: spec.method ?? 'GET', headers: spec.headers, body: spec.body }
  const tokens = spec.tokens
  if (tokens?.length) {
    const request = (token: string) => ({ headers: { ...spec.headers, authorization: `Bearer ${token}` } })
    if (spec.rebuildEachRequest) {
      let turn = 0
      return { ...base, requests: [{ setupRequest: (r) => ({ ...r, headers: { ...r.headers, authorization: `Bearer ${tokens[turn++ % tokens.length]!}` } }) }] }
    }
    let next = 0
    const step = Math.max(1, Math.floor(tokens.length / spec.connections))
    return {
      ...base,
      requests: [request(tokens[0]!)],
      setupClient: (client) => {
        const start = (next++ * step) % tokens.length
        client.setRequests([...tokens.slice(start), ...tokens.slice(0, start)].map(request))
      },
    }
  }
  const bodies = spec.bodies
  if (bodies?.length) {
    if (bodies.length < spec.connections) throw new Error(`bench: ${bodies.length} bodies for ${spec.connections} connections`)
    const field = spec.collect
    const onResponse = (status: number, body: string) => {
      const value = status >= 200 && status < 300 ? (JSON.parse(body) as Record<string, unknown>)[field!] : undefined
      if (typeof value === 'string') collected.push(value)
    }
    const request = (body: string) => ({ method: spec.method ?? 'POST', headers: spec.headers, body, ...(field ? { onResponse } : {}) })
    // autocannon gives connection k (in the order it makes them) floor(n/c) requests, one more if k < n % c.
    const share = (k: number) => Math.floor(bodies.length / spec.connections) + (k < bodies.length % spec.connections ? 1 : 0)
    let next = 0
    let from = 0
    return {
      ...base,
      method: spec.method ?? 'POST',
      amount: bodies.length,
      // It ends an `amount` run at its next sample: every 100 ms rather than every second.
      sampleInt: 100,
      requests: [request(bodies[0]!)],
      setupClient: (client) => {
        const size = share(next++)
        client.setRequests(bodies.slice(from, from + size).map(request))
        from += size
      },
    }
  }
  if (spec.registerBody) {
    const { password, full_name } = spec.registerBody
    let n = 0
    const body = () => JSON.stringify({ email: `r${process.pid}-${Date.now()}-${n++}@example.com`, password, full_name })
    return { ...base, method: 'POST', headers: { ...spec.headers, 'content-type': 'application/json' }, body: body(), requests: [{ method: 'POST', setupRequest: (r) => ({ ...r, body: body() }) }] }
  }
  return base
}

function run(opts: autocannon.Options, times?: number[], answered?: () => void): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const instance = autocannon(opts, (error, result) => (error ? reject(error as Error) : resolve(result)))
    if (times || answered) {
      instance.on('response', (_client, statusCode, _bytes, responseTime) => {
        if (times && statusCode >= 200 && statusCode < 300) times.push(responseTime)
        answered?.()
      })
    }
  })
}

/** The load, in this process. */
export async function measure(spec: LoadSpec): Promise<LoadResult> {
  const times: number[] = []
  const collected: string[] = []
  const cpuBefore = process.cpuUsage()
  const began = performance.now()
  let lastAnswer = began
  const result = await run(options(spec, spec.seconds, collected), times, spec.bodies?.length ? () => (lastAnswer = performance.now()) : undefined)
  const cpu = process.cpuUsage(cpuBefore)
  const life = process.cpuUsage()
  times.sort((a, b) => a - b)
  const percentile = (p: number) => times[Math.min(times.length - 1, Math.max(0, Math.ceil((p / 100) * times.length) - 1))] ?? Number.NaN
  // With `bodies`, autocannon notices that all are answered only at its next one-second tick, so
  // both its duration and its per-second average would count the last, partial second as a whole one.
  const rps = spec.bodies?.length ? (result['2xx'] + result.non2xx) / ((lastAnswer - began) / 1000) : result.requests.average
  return {
    rps: Math.round(rps),
    p50: percentile(50),
    p99: percentile(99),
    ok: result['2xx'],
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    loaderCpuMs: (cpu.user + cpu.system) / 1000,
    loaderProcessCpuMs: (life.user + life.system) / 1000,
    loaderPid: process.pid,
    loaderCpus: allowedCpus(),
    ...(spec.collect ? { collected } : {}),
  }
}

/**
 * A bench script (`script`, a file URL) run as a process of its own with node and tsx, pinned with
 * taskset to `cpus` if given: the spec goes in on stdin, the result comes back as JSON on stdout.
 */
export function inChild<T>(script: string, spec: unknown, cpus?: string): Promise<T> {
  const node = [process.execPath, '--import', 'tsx', fileURLToPath(script)]
  const [command, ...args] = cpus ? ['taskset', '-c', cpus, ...node] : node
  const child = spawn(command!, args, { stdio: ['pipe', 'pipe', 'inherit'] })
  child.stdin.end(JSON.stringify(spec))
  let out = ''
  child.stdout.on('data', (chunk) => (out += chunk))
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as T) : reject(new Error(`${script} exited with ${code}`))))
  })
}

/** The load from a process of its own (this file). */
export function loadInChild(spec: LoadSpec, cpus?: string): Promise<LoadResult> {
  return inChild(import.meta.url, spec, cpus)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  let input = ''
  for await (const chunk of process.stdin) input += chunk
  process.stdout.write(JSON.stringify(await measure(JSON.parse(input) as LoadSpec)))
}

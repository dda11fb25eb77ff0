// The one load generator. A measured load runs in a process of its own (loadInChild): a generator in
// the process that also starts servers, keeps the tokens and takes the time competes with that
// process's own work and garbage, and how much depends on what else the process holds; a
// 500-connection flood generated beside a latency measurement delayed the measurement's own
// callbacks, and that delay was once counted as the server's. Two kinds of load:
//  - autocannon at N connections for some seconds (warm-up first if asked), the requests fixed,
//    rotating bearer tokens or bodies connection by connection, each body sent once (one-time
//    credentials), or a fresh registration each;
//  - one request at a time (an operator with a search box), each timed, for the seconds given or,
//    with `untilStopped`, until the parent closes this process's stdin.
// Latency percentiles come from each 2xx response's own time, in fractional milliseconds:
// autocannon's histogram counts whole milliseconds, so a p99 of 1.0 ms and one of 1.9 ms would both
// read 1. The spec is the first line of stdin; the result is JSON on stdout:
//   echo '{"url":"http://127.0.0.1:3000/healthz","connections":4,"seconds":5}' | node --import tsx bench/lib/load.ts
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import { createRequire } from 'node:module'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

export interface LoadSpec {
  url: string
  connections: number
  seconds: number
  /** Unmeasured seconds before the measured ones, in the same process. */
  warmupSeconds?: number
  method?: 'GET' | 'POST' | 'PATCH'
  headers?: Record<string, string>
  body?: string
  /**
   * Bearer tokens to send in turn. Each connection cycles through all of them request by request,
   * from its own starting point, so concurrent requests carry different users. The requests are
   * built once per connection, not per request, so the rotation costs the generator nothing.
   */
  tokens?: string[]
  /** Bodies to send in turn, as `tokens` are (many users logging in or refreshing); with `tokens`, pairwise. */
  bodiesInTurn?: string[]
  /**
   * Bodies to send exactly once each (one-time credentials: authorization codes, rotating refresh
   * tokens). Connection k sends its own contiguous share of the list, and the load ends when the
   * last one is answered (autocannon's `amount`): `seconds` is then not used, and req/s is the
   * answers over the time from the start to the last answer. Needs a body per connection at least.
   */
  bodies?: string[]
  /** With `bodies`: a string field of each 2xx answer's JSON body, given back in `collected`. */
  collect?: string
  /** A POST /auth/register body with an address of its own for every request (the register case). */
  registerBody?: { password: string; full_name: string }
  /** Stop a phase once this many responses came back (the measured one, the warm-up). */
  maxResponses?: number
  maxWarmupResponses?: number
  /** One request at a time instead of autocannon; at least this many measured whatever the seconds. */
  sequential?: { minRequests: number }
  /** Sequential only: run until stdin closes (after writing "started" on stderr) instead of for `seconds`. */
  untilStopped?: boolean
}

export interface LoadResult {
  /** Answers (any status) a second over the measured time; 2xx only for the sequential kind. */
  rps: number
  /** From each 2xx response's own time, in ms (nearest rank); NaN when none came. */
  p50: number
  p99: number
  max: number
  ok: number
  non2xx: number
  errors: number
  timeouts: number
  statuses: Record<string, number>
  /** CPU time (user + system, all threads) of the generating process during the measured run, in ms. */
  loaderCpuMs: number
  /** The same over the generating process's whole life (its start-up and warm-up included), in ms. */
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

export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN
}

/** Counts of one phase, filled as answers come. */
class Tally {
  times: number[] = []
  statuses: Record<string, number> = {}
  collected: string[] = []
  responses = 0
  lastAnswer = performance.now()
  answer(status: number, ms: number) {
    this.responses++
    this.lastAnswer = performance.now()
    this.statuses[status] = (this.statuses[status] ?? 0) + 1
    if (status >= 200 && status < 300) this.times.push(ms)
  }
}

function options(spec: LoadSpec, seconds: number, tally: Tally): autocannon.Options {
  const json = spec.body !== undefined || spec.bodiesInTurn || spec.bodies || spec.registerBody ? { 'content-type': 'application/json' } : {}
  const headers = { ...json, ...spec.headers }
  const method = spec.method ?? (spec.bodies || spec.registerBody ? 'POST' : 'GET')
  const base: autocannon.Options = { url: spec.url, connections: spec.connections, duration: seconds, method, headers, body: spec.body, timeout: 60 }
  if (spec.tokens?.length || spec.bodiesInTurn?.length) {
    const { tokens, bodiesInTurn: bodies } = spec
    const length = Math.max(tokens?.length ?? 0, bodies?.length ?? 0)
    const request = (n: number) => ({
      method,
      headers: tokens ? { ...headers, authorization: `Bearer ${tokens[n % tokens.length]!}` } : headers,
      ...(bodies ? { body: bodies[n % bodies.length]! } : {}),
    })
    let next = 0
    const step = Math.max(1, Math.floor(length / spec.connections))
    return {
      ...base,
      requests: [request(0)],
      setupClient: (client) => {
        const start = (next++ * step) % length
        client.setRequests(Array.from({ length }, (_, k) => request(start + k)))
      },
    }
  }
  const bodies = spec.bodies
  if (bodies?.length) {
    if (bodies.length < spec.connections) throw new Error(`bench: ${bodies.length} bodies for ${spec.connections} connections`)
    const field = spec.collect
    const onResponse = (status: number, body: string) => {
      const value = status >= 200 && status < 300 ? (JSON.parse(body) as Record<string, unknown>)[field!] : undefined
      if (typeof value === 'string') tally.collected.push(value)
    }
    const request = (body: string) => ({ method, headers, body, ...(field ? { onResponse } : {}) })
    // autocannon gives connection k (in the order it makes them) floor(n/c) requests, one more if k < n % c.
    const share = (k: number) => Math.floor(bodies.length / spec.connections) + (k < bodies.length % spec.connections ? 1 : 0)
    let next = 0
    let from = 0
    return {
      ...base,
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
    return { ...base, body: body(), requests: [{ method, setupRequest: (r) => ({ ...r, body: body() }) }] }
  }
  return base
}

/** One autocannon phase. */
function cannon(spec: LoadSpec, seconds: number, cap: number | undefined) {
  const tally = new Tally()
  const began = performance.now()
  return new Promise<{ tally: Tally; result: autocannon.Result; elapsed: number }>((resolve, reject) => {
    const instance = autocannon(options(spec, seconds, tally), (error, result) =>
      error ? reject(error as Error) : resolve({ tally, result, elapsed: (performance.now() - began) / 1000 }))
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      tally.answer(statusCode, responseTime)
      if (cap !== undefined && tally.responses === cap) (instance as unknown as { stop(): void }).stop()
    })
  })
}

/** One request on a kept-alive connection: the status (0 for a socket error) and the time to the last byte, in ms. */
function once(agent: http.Agent, spec: Pick<LoadSpec, 'url' | 'method' | 'headers' | 'body' | 'bodiesInTurn' | 'tokens'>, n: number): Promise<{ status: number; ms: number }> {
  const body = spec.bodiesInTurn?.[n % spec.bodiesInTurn.length] ?? spec.body
  const token = spec.tokens?.[n % spec.tokens.length]
  const headers = { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...spec.headers, ...(token ? { authorization: `Bearer ${token}` } : {}) }
  const began = performance.now()
  return new Promise((resolve) => {
    const request = http.request(new URL(spec.url), { agent, method: spec.method ?? 'GET', headers }, (response) => {
      response.resume()
      response.on('end', () => resolve({ status: response.statusCode ?? 0, ms: performance.now() - began }))
    })
    request.setTimeout(120_000, () => request.destroy(new Error('timeout')))
    request.on('error', () => resolve({ status: 0, ms: performance.now() - began }))
    request.end(body)
  })
}

async function sequential(spec: LoadSpec, stopped: () => boolean) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  let n = 0
  const warmUntil = performance.now() + (spec.warmupSeconds ?? 0) * 1000
  do await once(agent, spec, n++)
  while (performance.now() < warmUntil)
  if (spec.untilStopped) process.stderr.write('started\n')
  const tally = new Tally()
  const began = performance.now()
  const minimum = spec.sequential?.minRequests ?? 1
  const more = () => (spec.untilStopped ? !stopped() : performance.now() - began < spec.seconds * 1000 || tally.responses < minimum)
  while (more()) {
    const { status, ms } = await once(agent, spec, n++)
    tally.answer(status, ms)
  }
  agent.destroy()
  return { tally, elapsed: (performance.now() - began) / 1000 }
}

function summary(tally: Tally, extra: { rps: number; errors: number; timeouts: number; cpuMs: number }): LoadResult {
  const times = tally.times.sort((a, b) => a - b)
  const life = process.cpuUsage()
  return {
    rps: extra.rps,
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    max: times.at(-1) ?? Number.NaN,
    ok: times.length,
    non2xx: tally.responses - times.length - (tally.statuses[0] ?? 0),
    errors: extra.errors,
    timeouts: extra.timeouts,
    statuses: tally.statuses,
    loaderCpuMs: extra.cpuMs,
    loaderProcessCpuMs: (life.user + life.system) / 1000,
    loaderPid: process.pid,
    loaderCpus: allowedCpus(),
    ...(tally.collected.length ? { collected: tally.collected } : {}),
  }
}

/** The load, in this process. */
export async function measure(spec: LoadSpec, stopped: () => boolean = () => false): Promise<LoadResult> {
  if (spec.sequential) {
    const cpu = process.cpuUsage()
    const { tally, elapsed } = await sequential(spec, stopped)
    const used = process.cpuUsage(cpu)
    const errors = tally.statuses[0] ?? 0
    return summary(tally, { rps: tally.times.length / elapsed, errors, timeouts: 0, cpuMs: (used.user + used.system) / 1000 })
  }
  if (spec.warmupSeconds) await cannon(spec, spec.warmupSeconds, spec.maxWarmupResponses)
  const cpu = process.cpuUsage()
  const began = performance.now()
  const { tally, result, elapsed } = await cannon(spec, spec.seconds, spec.maxResponses)
  const used = process.cpuUsage(cpu)
  // With `bodies` (or a cap), autocannon notices the end only at its next tick, so both its
  // duration and its per-second average would count the last, partial second as a whole one.
  const ended = spec.bodies?.length || spec.maxResponses ? (tally.lastAnswer - began) / 1000 : Math.min(elapsed, spec.seconds)
  return summary(tally, { rps: Math.round(tally.responses / ended), errors: result.errors, timeouts: result.timeouts, cpuMs: (used.user + used.system) / 1000 })
}

/**
 * A bench script (`script`, a file URL) run as a process of its own with node and tsx, pinned with
 * taskset to `cpus` if given: the spec goes in as the first line on stdin, the result comes back
 * as JSON on stdout. `keepOpen` leaves stdin open (closed by the returned `stop`).
 */
export function inChild<T>(script: string, spec: unknown, cpus?: string, keepOpen = false): { result: Promise<T>; started: Promise<void>; stop(): void } {
  const node = [process.execPath, '--import', 'tsx', fileURLToPath(script)]
  const [command, ...args] = cpus ? ['taskset', '-c', cpus, ...node] : node
  const child = spawn(command!, args, { stdio: ['pipe', 'pipe', 'pipe'] })
  child.stdin.write(`${JSON.stringify(spec)}\n`)
  if (!keepOpen) child.stdin.end()
  let out = ''
  let err = ''
  let markStarted = () => {}
  const started = new Promise<void>((resolve) => (markStarted = resolve))
  child.stdout.on('data', (chunk) => (out += chunk))
  // Its stderr passes through, but for the line that says a sequential load has started measuring.
  let line = ''
  child.stderr.on('data', (chunk) => {
    line += chunk
    const lines = line.split('\n')
    line = lines.pop()!
    for (const text of lines) {
      if (text === 'started') markStarted()
      else {
        err = `${err}${text}\n`.slice(-2000)
        process.stderr.write(`${text}\n`)
      }
    }
  })
  const result = new Promise<T>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => {
      markStarted()
      // JSON has no NaN: a percentile of no responses comes back as null.
      if (code === 0) resolve(JSON.parse(out, (key, value) => (value === null && ['p50', 'p99', 'max'].includes(key) ? Number.NaN : value)) as T)
      else reject(new Error(`${fileURLToPath(script)} exited with ${code}: ${err}${line}`))
    })
  })
  return { result, started, stop: () => child.stdin.end() }
}

/** The load from a process of its own (this file). */
export function loadInChild(spec: LoadSpec, cpus?: string): Promise<LoadResult> {
  return inChild<LoadResult>(import.meta.url, spec, cpus).result
}

/** A sequential load that runs until `stop()`: `started` resolves once its warm-up is done and it measures. */
export function loadUntilStopped(spec: Omit<LoadSpec, 'untilStopped' | 'sequential' | 'connections' | 'seconds'>) {
  return inChild<LoadResult>(import.meta.url, { ...spec, connections: 1, seconds: 0, sequential: { minRequests: 1 }, untilStopped: true }, undefined, true)
}

/**
 * Open-loop probes, in this process: a GET every `intervalMs` whether or not the previous ones came
 * back, for `seconds`, each timed from send to last byte. A stall of the server shows as every probe
 * sent during it waiting, which a one-at-a-time probe would count once. `whenSent` is called once
 * the last probe is sent, before their answers are awaited (to end the load the probes ran beside).
 */
export async function trickle(url: string, seconds: number, intervalMs = 10, whenSent: () => void = () => {}): Promise<LoadResult & { sent: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const pending: Promise<{ status: number; ms: number }>[] = []
  const began = performance.now()
  const cpu = process.cpuUsage()
  let n = 0
  await new Promise<void>((resolve) => {
    const tick = () => {
      const elapsed = performance.now() - began
      if (elapsed >= seconds * 1000) return resolve()
      // Catch up on ticks the timer delivered late, so the rate holds even if this process stalls.
      while (n * intervalMs <= elapsed) pending.push(once(agent, { url }, n++))
      setTimeout(tick, Math.max(1, n * intervalMs - elapsed))
    }
    tick()
  })
  whenSent()
  const tally = new Tally()
  for (const { status, ms } of await Promise.all(pending)) tally.answer(status, ms)
  agent.destroy()
  const used = process.cpuUsage(cpu)
  return { ...summary(tally, { rps: tally.times.length / seconds, errors: tally.statuses[0] ?? 0, timeouts: 0, cpuMs: (used.user + used.system) / 1000 }), sent: n }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const lines = createInterface({ input: process.stdin })
  let spec: LoadSpec | undefined
  let stopped = false
  const specRead = new Promise<void>((resolve) => {
    lines.on('line', (line) => {
      spec ??= JSON.parse(line) as LoadSpec
      resolve()
    })
    lines.on('close', () => {
      stopped = true
      resolve()
    })
  })
  await specRead
  if (!spec) throw new Error('bench/lib/load.ts: no spec on stdin')
  process.stdout.write(JSON.stringify(await measure(spec, () => stopped)))
}

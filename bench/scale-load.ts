// The scale benchmark's load generator (bench/scale.ts), run as a process of its own so the
// generator's work never shares an event loop with the process that keeps the tokens and takes
// the time. Two kinds of load:
//  - autocannon at N connections, rotating a list of request headers or bodies request by request
//    (many users, as real traffic has), warm-up first, then the measured seconds; an optional cap
//    on the responses (the watchlist writes stop below each user's 100-list limit);
//  - one request at a time (an operator with a search box), each timed, for the seconds given or,
//    with `untilStopped`, until the parent closes this process's stdin.
// Percentiles come from each 2xx response's own time in fractional ms (autocannon's histogram
// counts whole ms). The spec is the first line of stdin; the result is JSON on stdout.
//   echo '{"url":"http://127.0.0.1:3000/healthz","connections":4,"seconds":5}' | node --import tsx bench/scale-load.ts
import { spawn } from 'node:child_process'
import http from 'node:http'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

export interface LoadSpec {
  url: string
  method?: 'GET' | 'POST'
  headers?: Record<string, string>
  body?: string
  /** Per-request rotation: request n carries headers[n % length] and bodies[n % length] (merged over the above). */
  rotateHeaders?: Record<string, string>[]
  rotateBodies?: string[]
  connections: number
  seconds: number
  warmupSeconds?: number
  /** Stop each phase (warm-up, measured) once this many responses came back. */
  maxResponses?: number
  maxWarmupResponses?: number
  /** One request at a time instead of autocannon; at least this many measured (and one warm-up) whatever the seconds. */
  sequential?: { minRequests: number }
  /** Sequential only: run until stdin closes (after writing "started" on stderr) instead of for `seconds`. */
  untilStopped?: boolean
}

export interface LoadResult {
  seconds: number
  responses: number
  ok: number
  non2xx: number
  errors: number
  statuses: Record<string, number>
  rps: number
  p50: number
  p99: number
  max: number
}

export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN
}

function summary(times: number[], seconds: number, counts: { responses: number; non2xx: number; errors: number; statuses: Record<string, number> }): LoadResult {
  times.sort((a, b) => a - b)
  return {
    seconds,
    ...counts,
    ok: times.length,
    rps: times.length / seconds,
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    max: times.at(-1) ?? Number.NaN,
  }
}

function cannon(spec: LoadSpec, seconds: number, cap: number | undefined): Promise<LoadResult> {
  const times: number[] = []
  const statuses: Record<string, number> = {}
  let turn = 0
  let responses = 0
  const headers = { ...(spec.body || spec.rotateBodies ? { 'content-type': 'application/json' } : {}), ...spec.headers }
  const rotating = spec.rotateHeaders || spec.rotateBodies
  const began = performance.now()
  return new Promise((resolve, reject) => {
    const instance = autocannon({
      url: spec.url,
      method: spec.method ?? 'GET',
      connections: spec.connections,
      duration: seconds,
      timeout: 60,
      headers,
      ...(spec.body === undefined ? {} : { body: spec.body }),
      ...(rotating
        ? {
            requests: [{
              setupRequest: (request: any) => {
                const n = turn++
                const extra = spec.rotateHeaders?.[n % spec.rotateHeaders.length]
                const body = spec.rotateBodies?.[n % spec.rotateBodies.length]
                return { ...request, method: spec.method ?? 'GET', headers: { ...headers, ...extra }, ...(body === undefined ? {} : { body }) }
              },
            }],
          }
        : {}),
    }, (error, result) => {
      if (error) return reject(error as Error)
      const elapsed = (performance.now() - began) / 1000
      resolve(summary(times, Math.min(elapsed, seconds), { responses, non2xx: result.non2xx, errors: result.errors, statuses }))
    })
    instance.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTime: number) => {
      responses++
      statuses[statusCode] = (statuses[statusCode] ?? 0) + 1
      if (statusCode >= 200 && statusCode < 300) times.push(responseTime)
      if (cap !== undefined && responses === cap) (instance as unknown as { stop(): void }).stop()
    })
  })
}

/** One GET/POST on a kept-alive connection: the status and the time to the last byte, in ms. */
function once(agent: http.Agent, spec: LoadSpec, n: number): Promise<{ status: number; ms: number }> {
  const url = new URL(spec.url)
  const body = spec.rotateBodies?.[n % spec.rotateBodies.length] ?? spec.body
  const headers = { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...spec.headers, ...spec.rotateHeaders?.[n % spec.rotateHeaders.length] }
  const began = performance.now()
  return new Promise((resolve) => {
    const request = http.request(url, { agent, method: spec.method ?? 'GET', headers }, (response) => {
      response.resume()
      response.on('end', () => resolve({ status: response.statusCode ?? 0, ms: performance.now() - began }))
    })
    request.setTimeout(120_000, () => request.destroy(new Error('timeout')))
    request.on('error', () => resolve({ status: 0, ms: performance.now() - began }))
    request.end(body)
  })
}

async function sequential(spec: LoadSpec, stopped: () => boolean): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  let n = 0
  const warmUntil = performance.now() + (spec.warmupSeconds ?? 0) * 1000
  do await once(agent, spec, n++)
  while (performance.now() < warmUntil)
  if (spec.untilStopped) process.stderr.write('started\n')
  const times: number[] = []
  const statuses: Record<string, number> = {}
  let responses = 0
  let errors = 0
  const began = performance.now()
  const minimum = spec.sequential?.minRequests ?? 1
  const more = () => (spec.untilStopped ? !stopped() : performance.now() - began < spec.seconds * 1000 || responses < minimum)
  while (more()) {
    const { status, ms } = await once(agent, spec, n++)
    responses++
    if (status === 0) errors++
    statuses[status] = (statuses[status] ?? 0) + 1
    if (status >= 200 && status < 300) times.push(ms)
  }
  agent.destroy()
  return summary(times, (performance.now() - began) / 1000, { responses, non2xx: responses - times.length - errors, errors, statuses })
}

export async function runLoad(spec: LoadSpec, stopped: () => boolean = () => false): Promise<LoadResult> {
  if (spec.sequential) return sequential(spec, stopped)
  if (spec.warmupSeconds) await cannon(spec, spec.warmupSeconds, spec.maxWarmupResponses)
  return cannon(spec, spec.seconds, spec.maxResponses)
}

export interface ChildLoad {
  /** Resolves once a sequential `untilStopped` load has warmed up and started measuring. */
  started: Promise<void>
  /** Closes the child's stdin: an `untilStopped` load finishes its request in flight and reports. */
  stop(): void
  result: Promise<LoadResult>
}

/** `spec` in a process of its own (this file, through tsx). */
export function loadInChild(spec: LoadSpec): ChildLoad {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], { stdio: ['pipe', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  let markStarted = () => {}
  const started = new Promise<void>((resolve) => (markStarted = resolve))
  child.stdout.on('data', (chunk) => (out += chunk))
  child.stderr.on('data', (chunk) => {
    err += chunk
    if (err.includes('started\n')) markStarted()
  })
  child.stdin.write(`${JSON.stringify(spec)}\n`)
  if (!spec.untilStopped) child.stdin.end()
  const result = new Promise<LoadResult>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => {
      markStarted()
      // JSON has no NaN: a percentile of no responses comes back as null.
      if (code === 0) resolve(JSON.parse(out, (key, value) => (value === null && ['p50', 'p99', 'max'].includes(key) ? Number.NaN : value)) as LoadResult)
      else reject(new Error(`scale-load exited with ${code}: ${err}`))
    })
  })
  return { started, stop: () => child.stdin.end(), result }
}

/**
 * Open-loop probes: a GET every `intervalMs` whether or not the previous ones came back, for
 * `seconds`, each timed from send to last byte. A stall of the server shows as every probe sent
 * during it waiting, which a one-at-a-time probe would count once. `whenSent` is called once the
 * last probe is sent, before their answers are awaited (to end the load the probes ran beside).
 */
export async function trickle(url: string, seconds: number, intervalMs = 10, whenSent: () => void = () => {}): Promise<LoadResult & { sent: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const pending: Promise<{ status: number; ms: number }>[] = []
  const began = performance.now()
  let n = 0
  await new Promise<void>((resolve) => {
    const tick = () => {
      const elapsed = performance.now() - began
      if (elapsed >= seconds * 1000) return resolve()
      // Catch up on ticks the timer delivered late, so the rate holds even if this process stalls.
      while (n * intervalMs <= elapsed) pending.push(once(agent, { url, connections: 1, seconds }, n++))
      setTimeout(tick, Math.max(1, n * intervalMs - elapsed))
    }
    tick()
  })
  whenSent()
  const results = await Promise.all(pending)
  agent.destroy()
  const times = results.filter((r) => r.status === 200).map((r) => r.ms)
  const statuses: Record<string, number> = {}
  for (const { status } of results) statuses[status] = (statuses[status] ?? 0) + 1
  const errors = results.filter((r) => r.status === 0).length
  return { ...summary(times, seconds, { responses: results.length, non2xx: results.length - times.length - errors, errors, statuses }), sent: n }
}

const isEntry = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (isEntry) {
  const lines = createInterface({ input: process.stdin })
  let spec: LoadSpec | undefined
  let stopped = false
  let gotSpec = () => {}
  const specRead = new Promise<void>((resolve) => (gotSpec = resolve))
  lines.on('line', (line) => {
    if (!spec) {
      spec = JSON.parse(line) as LoadSpec
      gotSpec()
    }
  })
  lines.on('close', () => {
    stopped = true
    gotSpec()
  })
  await specRead
  if (!spec) throw new Error('scale-load: no spec on stdin')
  process.stdout.write(JSON.stringify(await runLoad(spec, () => stopped)))
}

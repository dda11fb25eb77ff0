// The service as the scale benchmark runs it (bench/scale.ts): the built dist/server.js with the
// node arguments of package.json's start script, as a process of its own, on a given data
// directory or database. Its log (level info, a line a request) goes to /dev/null.
// BENCH_SCALE_BUILD names another tree to run (its dist/, package.json and bin/), for instance
// one made with `git archive COMMIT | tar -x -C DIR`, node_modules linked, `npm run build` there:
// a before-and-after without touching this checkout.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import path from 'node:path'

/** The tree whose build is measured. */
export const BUILD = path.resolve(process.env.BENCH_SCALE_BUILD ?? '.')

export interface Service {
  base: string
  child: ChildProcess
  /** From spawn to the first 200 from /healthz, in ms. */
  readyMs: number
  /** Resident memory of the server process, in bytes (Linux). */
  rss(): number
  stop(): Promise<void>
}

function startArgs(): string[] {
  const start = (JSON.parse(readFileSync(path.join(BUILD, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start
  const [command, ...args] = start.split(/\s+/)
  if (command !== 'node') throw new Error(`bench: the start script does not run node: ${start}`)
  return args.map((arg) => (arg === 'dist/server.js' ? path.join(BUILD, arg) : arg))
}

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}

/** Environment every scale run gives the service: limits that would refuse the benchmark's own traffic lifted, no drain on stop. */
export const BENCH_ENV: Record<string, string> = {
  REQUIRE_EMAIL_VERIFICATION: 'false',
  RATE_LIMIT_LOGIN_PER_IP: '1000000000',
  RATE_LIMIT_REGISTER_PER_IP: '1000000000',
  SHUTDOWN_DRAIN_SECONDS: '0',
}

/**
 * Starts the service on `port` (a free one if not given). Tokens name the service's URL as issuer
 * and audience, and that URL has the port in it: restart on the same port to keep them valid.
 */
export async function startService(env: Record<string, string>, port?: number, timeoutMs = 600_000): Promise<Service> {
  port ??= await freePort()
  const began = performance.now()
  const child = spawn(process.execPath, startArgs(), {
    cwd: BUILD,
    env: { ...process.env, ...BENCH_ENV, PORT: String(port), ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  let exited: number | null = null
  child.once('exit', (code) => (exited = code ?? -1))
  const base = `http://127.0.0.1:${port}`
  let readyMs = Number.NaN
  while (Number.isNaN(readyMs)) {
    if (exited !== null) throw new Error(`the service exited with ${exited} before it was ready`)
    if (performance.now() - began > timeoutMs) throw new Error(`the service was not ready within ${timeoutMs} ms`)
    if (await fetch(`${base}/healthz`).then((r) => r.ok, () => false)) readyMs = performance.now() - began
    else await new Promise((resolve) => setTimeout(resolve, 5))
  }
  return {
    base,
    child,
    readyMs,
    rss: () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0) * 1024,
    async stop() {
      if (exited !== null) return
      const gone = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGTERM')
      await gone
    },
  }
}

/** The service's own CLI (bin/portcullis.mjs, on dist/) with the same environment: its stdout. */
export function cli(args: string[], env: Record<string, string>): string {
  const run = spawnSync(process.execPath, [path.join(BUILD, 'bin/portcullis.mjs'), ...args], { cwd: BUILD, env: { ...process.env, ...env }, encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`portcullis ${args.join(' ')} exited with ${run.status}: ${run.stderr}`)
  return run.stdout.trim()
}

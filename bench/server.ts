// Starts Portcullis as its own process for a benchmark, so the load generator (autocannon, in the
// benchmark's process) never shares the server's event loop. Linux only for the RSS reading.
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'

export interface BenchServer {
  base: string
  child: ChildProcess
  dataDir: string
  /** From spawn to the first 200 from /healthz, in ms. */
  readyMs: number
  /** The cores the server process may run on, as taskset prints them ("0-1" when unpinned on 2 cores). */
  cpus(): string
  /** CPU time (user + system, all threads) the server process has used since it started, in ms (Linux clock ticks of 10 ms). */
  cpuMs(): number
  /** Resident memory of the server process, in bytes. */
  rss(): number
  /** How long the server's event loop has been runnable but without a core, in ms, since it started (Linux schedstat). */
  eventLoopWaitMs(): number
  /** Stops it (SIGTERM, so the drain runs) and removes its data unless asked to keep it. */
  stop(options?: { keepData?: boolean }): Promise<void>
}

/**
 * The node arguments of package.json's start script, so the benchmark runs exactly what `npm start`
 * does: this tree's, or another built source tree's own (run in that tree). BENCH_SERVER names
 * another build to run in place of this tree's dist/server.js (another tree's, for an A/B of a
 * case bench/ab.ts does not cover, such as the flood).
 */
export function startArgs(tree?: string): string[] {
  const start = (JSON.parse(readFileSync(path.join(tree ?? '.', 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start
  const [command, ...args] = start.split(/\s+/)
  if (command !== 'node') throw new Error(`bench: the start script does not run node: ${start}`)
  const build = tree ? undefined : process.env.BENCH_SERVER
  return build ? args.map((arg) => (arg === 'dist/server.js' ? build : arg)) : args
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}

export interface StartOptions {
  /** Keep using this data directory (start-up on an existing database). */
  dataDir?: string
  /** Node arguments to run instead of the service (bench/bare.ts, the baseline). */
  args?: string[]
  /** Another built source tree to run, with its own start script, in place of this one. */
  tree?: string
  /** Cores to pin the process (and so all its threads) to with taskset, e.g. "0"; unpinned if unset. */
  cpus?: string
}

/**
 * The built service (dist/server.js, as `npm start` runs it; npm ci or npm run build makes it),
 * or another script given as node arguments, as a process of its own. Its configuration is
 * npm start's but for its own data directory and port, REQUIRE_EMAIL_VERIFICATION=false (its
 * users log in without a mail) and what `env` sets: the log level is the default (info, a line
 * per request), and the log goes to /dev/null, the cheapest sink there is (a pipe to a collector
 * costs more).
 */
export async function startServer(env: Record<string, string>, options: StartOptions = {}): Promise<BenchServer> {
  const dataDir = options.dataDir ?? mkdtempSync(path.join(tmpdir(), 'portcullis-bench-'))
  const port = await freePort()
  const began = performance.now()
  const node = [process.execPath, ...(options.args ?? startArgs(options.tree))]
  // taskset sets the affinity and then executes node, so the process keeps its pid.
  const [command, ...args] = options.cpus ? ['taskset', '-c', options.cpus, ...node] : node
  const child = spawn(command!, args, {
    cwd: options.tree,
    env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), REQUIRE_EMAIL_VERIFICATION: 'false', ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const base = `http://127.0.0.1:${port}`
  let readyMs = Number.NaN
  for (let i = 0; i < 1000 && Number.isNaN(readyMs); i++) {
    if (await fetch(`${base}/healthz`).then((r) => r.ok, () => false)) readyMs = performance.now() - began
    else await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return {
    base,
    child,
    dataDir,
    readyMs,
    cpus: () => /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 'unknown',
    // stat: fields 14 and 15 (utime, stime) in clock ticks of 10 ms, after the command's closing parenthesis.
    cpuMs: () => readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ').slice(11, 13).reduce((sum, ticks) => sum + Number(ticks) * 10, 0),
    rss: () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0) * 1024,
    // schedstat: time on a core, time waiting for one (ns), timeslices.
    eventLoopWaitMs: () => Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6,
    async stop(stopOptions = {}) {
      child.kill('SIGTERM')
      await new Promise((resolve) => child.once('exit', resolve))
      if (!stopOptions.keepData) rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

// The one server launcher: the built service (dist/server.js, with the node flags of package.json's
// start script, so a bench runs exactly what `npm start` does), another built tree of it, or a peer
// script, as a process of its own, so no load generator shares its event loop. Linux only for the
// CPU, RSS and scheduler readings (/proc).
import { execFileSync, execSync, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'

export interface BenchServer {
  base: string
  /** The service's /api/v1 URL. */
  api: string
  port: number
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
  /** The same, split: anonymous (heaps, stacks, buffers) and file-backed (the node binary and libraries), in bytes. */
  memory(): { rss: number; anon: number; file: number }
  /** How long the server's event loop has been runnable but without a core, in ms, since it started (Linux schedstat). */
  eventLoopWaitMs(): number
  /** The service's CLI (bin/portcullis.mjs) on this server's database and data directory: its stdout. */
  cli(args: string[]): string
  /** Stops it (SIGTERM, so the drain runs) and removes its data directory unless it was given or `keepData` is set. */
  stop(options?: { keepData?: boolean }): Promise<void>
}

/**
 * What every bench gives the service on top of npm start's configuration: its users sign in
 * without a mail, the per-address limits that would refuse the bench's own traffic (all from
 * 127.0.0.1) are lifted, and the log level is npm start's default (info, a line a request) unless
 * LOG_LEVEL says otherwise. The log goes to /dev/null, the cheapest sink there is.
 */
export const BENCH_ENV: Record<string, string> = {
  REQUIRE_EMAIL_VERIFICATION: 'false',
  RATE_LIMIT_LOGIN_PER_IP: '1000000000',
  RATE_LIMIT_REGISTER_PER_IP: '1000000000',
  RATE_LIMIT_MAIL_PER_IP: '1000000000',
  // No drain on stop: a bench stops servers between runs, with nothing in flight.
  SHUTDOWN_DRAIN_SECONDS: '0',
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
}

/**
 * The node arguments of a tree's start script (this checkout's unless `tree` names another built
 * one). BENCH_SERVER names another build to run in place of this tree's dist/server.js; a
 * `tree` given wins over it.
 */
export function startArgs(tree?: string): string[] {
  const start = (JSON.parse(readFileSync(path.join(tree ?? '.', 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start
  const [command, ...args] = start.split(/\s+/)
  if (command !== 'node') throw new Error(`bench: the start script does not run node: ${start}`)
  // Relative to the tree, which is where the server runs (startServer's cwd).
  const build = tree ? undefined : process.env.BENCH_SERVER
  return build ? args.map((arg) => (arg === 'dist/server.js' ? path.resolve(build) : arg)) : args
}

const kb = (status: string, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0)

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}

export interface StartOptions {
  /** A data directory to use (and keep): start-up on an existing database, a seeded one. A fresh temporary one if unset. */
  dataDir?: string
  /** Node arguments to run instead of the service (a peer: bench/peers/). */
  args?: string[]
  /** Another built source tree to run, with its own start script, in place of this one. */
  tree?: string
  /** Cores to pin the process (and so all its threads) to with taskset, e.g. "0"; unpinned if unset. */
  cpus?: string
  /** The port; a free one if unset. Tokens name the URL, port included: restart on the same port to keep them valid. */
  port?: number
  /** How long to wait for /healthz (60 s; a seeded million-user database wants more on its first start). */
  readyTimeoutMs?: number
  /** Sees the process's stderr from its start (it still goes to this process's stderr). */
  onStderr?: (text: string) => void
}

/**
 * Starts the service (or `options.args`) with BENCH_ENV, its own DATA_DIR and PORT, and `env` over
 * them; resolves once /healthz answers 200. Throws if the process exits first or does not answer
 * within the timeout.
 */
export async function startServer(env: Record<string, string>, options: StartOptions = {}): Promise<BenchServer> {
  const ownData = options.dataDir === undefined
  const dataDir = options.dataDir ?? mkdtempSync(path.join(tmpdir(), 'portcullis-bench-'))
  const port = options.port ?? (await freePort())
  const timeoutMs = options.readyTimeoutMs ?? 60_000
  const began = performance.now()
  const node = [process.execPath, ...(options.args ?? startArgs(options.tree))]
  // taskset sets the affinity and then executes node, so the process keeps its pid.
  const [command, ...args] = options.cpus ? ['taskset', '-c', options.cpus, ...node] : node
  const serverEnv = { DATA_DIR: dataDir, PORT: String(port), ...env }
  const child = spawn(command!, args, {
    cwd: options.tree,
    env: { ...process.env, ...BENCH_ENV, ...serverEnv },
    stdio: ['ignore', 'ignore', options.onStderr ? 'pipe' : 'inherit'],
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    process.stderr.write(chunk)
    options.onStderr!(String(chunk))
  })
  let exited: number | null = null
  child.once('exit', (code) => (exited = code ?? -1))
  const base = `http://127.0.0.1:${port}`
  let readyMs = Number.NaN
  while (Number.isNaN(readyMs)) {
    if (exited !== null) throw new Error(`bench: ${options.args?.join(' ') ?? 'the service'} exited with ${exited} before it was ready`)
    if (performance.now() - began > timeoutMs) {
      child.kill('SIGKILL')
      throw new Error(`bench: ${options.args?.join(' ') ?? 'the service'} did not answer /healthz within ${timeoutMs} ms`)
    }
    if (await fetch(`${base}/healthz`).then((r) => r.ok, () => false)) readyMs = performance.now() - began
    else await new Promise((resolve) => setTimeout(resolve, 5))
  }
  const status = () => readFileSync(`/proc/${child.pid}/status`, 'utf8')
  return {
    base,
    api: `${base}/api/v1`,
    port,
    child,
    dataDir,
    readyMs,
    cpus: () => /Cpus_allowed_list:\s*(\S+)/.exec(status())?.[1] ?? 'unknown',
    // stat: fields 14 and 15 (utime, stime) in clock ticks of 10 ms, after the command's closing parenthesis.
    cpuMs: () => readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ').slice(11, 13).reduce((sum, ticks) => sum + Number(ticks) * 10, 0),
    rss: () => kb(status(), 'VmRSS') * 1024,
    memory: () => {
      const text = status()
      return { rss: kb(text, 'VmRSS') * 1024, anon: kb(text, 'RssAnon') * 1024, file: kb(text, 'RssFile') * 1024 }
    },
    // schedstat: time on a core, time waiting for one (ns), timeslices.
    eventLoopWaitMs: () => Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6,
    cli: (cliArgs) => cli(cliArgs, serverEnv, options.tree),
    async stop(stopOptions = {}) {
      if (exited === null) {
        const gone = new Promise((resolve) => child.once('exit', resolve))
        child.kill('SIGTERM')
        await gone
      }
      if (ownData && !stopOptions.keepData) rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

/** The service's own CLI (bin/portcullis.mjs on a tree's dist/) with BENCH_ENV and `env`: its stdout. */
export function cli(args: string[], env: Record<string, string>, tree = '.'): string {
  const run = spawnSync(process.execPath, [path.join(tree, 'bin/portcullis.mjs'), ...args], { cwd: tree, env: { ...process.env, ...BENCH_ENV, ...env }, encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`portcullis ${args.join(' ')} exited with ${run.status}: ${run.stderr}`)
  return run.stdout.trim()
}

/**
 * Another commit of this repository, built in a temporary directory with this checkout's
 * node_modules, so both builds run on one runtime and one set of native modules: a release from
 * before the move to Node 24 (8b9d1f9) would otherwise get its own better-sqlite3 12, built for
 * the machine's Node 20, which Node 24 cannot load. Its build is emitted whatever tsc says of it
 * against today's type declarations (only the emit is needed).
 */
export function buildCommit(commit: string): { tree: string; commit: string; note: string; remove(): void } {
  const git = (...args: string[]) => execFileSync('git', args, { encoding: 'utf8' }).trim()
  const full = git('rev-parse', `${commit}^{commit}`)
  const tree = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-previous-'))
  execSync(`git archive ${full} | tar -x -C ${tree}`)
  const sameLock = git('show', `${full}:package-lock.json`) === readFileSync('package-lock.json', 'utf8').trim()
  symlinkSync(path.resolve('node_modules'), path.join(tree, 'node_modules'))
  const build = spawnSync('sh', ['-c', 'npx tsc -p tsconfig.build.json; node scripts/bundle.mjs'], { cwd: tree, stdio: ['ignore', 'ignore', 'inherit'] })
  if (build.status !== 0) throw new Error(`bench: could not build ${commit} in ${tree}`)
  return {
    tree,
    commit: git('rev-parse', '--short', full),
    note: sameLock ? "this tree's node_modules (same lockfile)" : "this tree's node_modules (its own lockfile differs: same runtime and natives for both)",
    remove: () => rmSync(tree, { recursive: true, force: true }),
  }
}

// Waits for the machine to be quiet before a measurement: on a shared 2-core machine a test run or
// a build beside the bench takes a core and turns any ratio into noise. Linux (/proc/stat).
import { readdirSync, readFileSync } from 'node:fs'

/**
 * The machine's CPU time so far, all cores, in clock ticks of 10 ms (/proc/stat's first line:
 * user nice system idle iowait irq softirq steal ...).
 */
function sample() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number)
  return { idle: fields[3]! + fields[4]!, irq: fields[5]! + fields[6]!, steal: fields[7]!, total: fields.reduce((sum, n) => sum + n, 0) }
}

export interface MachineCpu {
  /** Time any core was busy, steal excluded, in ms. */
  busyMs: number
  /** Of which interrupts and softirqs (on loopback, much of the TCP work of both ends). */
  irqMs: number
  /** Time the hypervisor ran something else while this machine had work (a virtual machine's noise). */
  stealMs: number
}

/** Starts counting the machine's CPU time; the function returned gives it since then, all cores together. */
export function machineCpu(): () => MachineCpu {
  const before = sample()
  return () => {
    const after = sample()
    const d = (key: keyof ReturnType<typeof sample>) => (after[key] - before[key]) * 10
    return { busyMs: d('total') - d('idle') - d('steal'), irqMs: d('irq'), stealMs: d('steal') }
  }
}

/** Busy share of all cores (0-1) over `ms`. */
export async function busyShare(ms = 1000): Promise<number> {
  const before = sample()
  await new Promise((resolve) => setTimeout(resolve, ms))
  const after = sample()
  const total = after.total - before.total
  return total > 0 ? 1 - (after.idle - before.idle) / total : 0
}

/**
 * Resolves once the machine's cores have been at most `threshold` busy for a whole second
 * (BENCH_QUIET_BUSY, default 0.15), or after `maxSeconds` (BENCH_QUIET_MAX_SECONDS, default 600)
 * with a warning. Returns the seconds waited. BENCH_QUIET_BUSY=1 turns the wait off.
 */
export async function waitForQuiet(
  threshold = Number(process.env.BENCH_QUIET_BUSY ?? 0.15),
  maxSeconds = Number(process.env.BENCH_QUIET_MAX_SECONDS ?? 600),
): Promise<number> {
  const began = performance.now()
  for (;;) {
    const busy = await busyShare()
    const waited = (performance.now() - began) / 1000
    if (busy <= threshold) return Math.round(waited)
    if (waited >= maxSeconds) {
      console.error(`bench: the machine is still ${(busy * 100).toFixed(0)}% busy after ${Math.round(waited)} s; measuring anyway`)
      return Math.round(waited)
    }
  }
}

/** CPU time (user + system, all threads) of every process whose command is `command` (e.g. postgres), in ms. */
export function cpuOfCommand(command: string): number {
  let ticks = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) !== command) continue
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      ticks += Number(fields[11]) + Number(fields[12])
    } catch {
      // A process that ended during the scan.
    }
  }
  return ticks * 10
}

/** CPU time (user + system, all threads) of process `root` and all its descendants (a PostgreSQL server and its backends), in ms. */
export function cpuOfTree(root: number): number {
  const processes = new Map<number, { parent: number; ticks: number }>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      processes.set(Number(entry), { parent: Number(fields[1]), ticks: Number(fields[11]) + Number(fields[12]) })
    } catch {
      // A process that ended during the scan.
    }
  }
  const inTree = (pid: number): boolean => pid === root || (pid > 1 && processes.has(pid) && inTree(processes.get(pid)!.parent))
  let ticks = 0
  for (const [pid, { ticks: own }] of processes) if (inTree(pid)) ticks += own
  return ticks * 10
}

/** The share of one core that other processes may use during a measured run before the run is repeated (BENCH_OTHER_MAX). */
export const OTHER_MAX = Number(process.env.BENCH_OTHER_MAX ?? 0.15)

/** What `undisturbed` gives back: the measurement, and how much else ran during the one kept. */
export interface Undisturbed<T> {
  value: T
  /** Other processes' CPU during the kept measurement, as a share of one core. */
  other: number
  /** The hypervisor's steal during it, as a share of one core. */
  steal: number
  /** Measurements taken (1 unless one was disturbed). */
  attempts: number
}

/**
 * A measurement on a quiet machine, taken again (up to `attempts` times, 4 by default) while other
 * processes used more than OTHER_MAX of a core during it. `knownCpuMs` gives the CPU time so far
 * of the processes taking part (servers, a database); `measure` returns the loader's CPU time
 * with its value; this process's own is counted here. `prepare` runs before each attempt, for
 * what a measurement uses up (one-time authorization codes, refresh tokens): after the wait for a
 * quiet machine, and followed by a second wait of at most `settleSeconds` (10), so that what it
 * made is not left to expire while the machine is busy.
 */
export async function undisturbed<T>(
  label: string,
  knownCpuMs: () => number,
  measure: () => Promise<{ value: T; loaderCpuMs: number }>,
  options: { attempts?: number; prepare?: () => Promise<void>; settleSeconds?: number } = {},
): Promise<Undisturbed<T>> {
  const attempts = options.attempts ?? 4
  for (let attempt = 1; ; attempt++) {
    await waitForQuiet()
    if (options.prepare) {
      await options.prepare()
      await waitForQuiet(undefined, options.settleSeconds ?? 10)
    }
    const machine = machineCpu()
    const began = performance.now()
    const self = process.cpuUsage()
    const knownBefore = knownCpuMs()
    const { value, loaderCpuMs } = await measure()
    const { busyMs, stealMs } = machine()
    const own = process.cpuUsage(self)
    const wallMs = performance.now() - began
    const other = (busyMs - (knownCpuMs() - knownBefore) - loaderCpuMs - (own.user + own.system) / 1000) / wallMs
    if (other <= OTHER_MAX || attempt === attempts) return { value, other, steal: stealMs / wallMs, attempts: attempt }
    console.error(`bench: ${label}: other processes took ${(other * 100).toFixed(1)}% of a core; measuring again`)
  }
}

// The one report writer, and what every scenario shares around it: the settings read from the
// environment, the record of how each measurement went (cores, disturbance, failures), the kept
// measurement itself (a quiet machine, taken again if disturbed) and the figures' formats. A
// scenario prints what it ran with first, then the observed lines and one Markdown table in the
// shape of bench/RESULTS.md's; the rows carry the date and the commit measured.
import { execFileSync } from 'node:child_process'
import os from 'node:os'
import { allowedCpus, autocannonVersion, loadInChild, type LoadResult, type LoadSpec } from './load.ts'
import { OTHER_MAX, undisturbed, waitForQuiet } from './quiet.ts'
import type { BenchServer } from './server.ts'

// ------------------------------------------------------------------------------------ settings

export interface Settings {
  /** BENCH_SECONDS: measured per case. */
  seconds: number
  /** BENCH_WARMUP_SECONDS: unmeasured load before a case. */
  warmup: number
  /** BENCH_PAIRS: rounds. */
  rounds: number
  /** BENCH_ENGINES: sqlite, postgres. */
  engines: string[]
  /** BENCH_SERVER_CPUS, BENCH_LOADER_CPUS: taskset core lists; unpinned if unset. */
  serverCpus?: string
  loaderCpus?: string
}

/** The common settings from the environment, over the scenario's own defaults. */
export function settings(defaults: Partial<Settings> = {}): Settings {
  const env = process.env
  return {
    seconds: Number(env.BENCH_SECONDS ?? defaults.seconds ?? 10),
    warmup: Number(env.BENCH_WARMUP_SECONDS ?? defaults.warmup ?? 3),
    rounds: Number(env.BENCH_PAIRS ?? defaults.rounds ?? 3),
    engines: (env.BENCH_ENGINES ?? defaults.engines?.join(',') ?? 'sqlite,postgres').split(','),
    serverCpus: env.BENCH_SERVER_CPUS || undefined,
    loaderCpus: env.BENCH_LOADER_CPUS || undefined,
  }
}

// -------------------------------------------------------------------------------------- formats

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
export const times = (x: number) => (Number.isFinite(x) ? `x${x.toFixed(2)}` : '-')
export const percent = (x: number) => `${(x * 100).toFixed(1)}%`
export const mb = (bytes: number) => Math.round(bytes / 1024 / 1024)
/** The median of `values`, their range in brackets. */
export const range = (values: number[], format: (x: number) => string = times) => `${format(median(values))} (${format(Math.min(...values))}-${format(Math.max(...values))})`
/** req/s | p50 | p99, medians over rounds. */
export const stats = (results: { rps: number; p50: number; p99: number }[]) =>
  `${median(results.map((x) => x.rps))} | ${median(results.map((x) => x.p50)).toFixed(2)} | ${median(results.map((x) => x.p99)).toFixed(2)}`
export const met = (ok: boolean) => (ok ? 'met' : 'not met')
export const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** `slots` in the order of round `round`: each round starts one further on, so drift falls on all alike. */
export function rotation<T>(slots: readonly T[], round: number): T[] {
  return slots.map((_, i) => slots[(i + round) % slots.length]!)
}

// ---------------------------------------------------------------------------------- the run

const git = (...args: string[]) => execFileSync('git', args, { encoding: 'utf8' }).trim()

/** What is measured and when: the commit (and whether the tree differs from it), the date; asked of git on first use. */
export const measured = {
  get commit(): string {
    const head = git('rev-parse', '--short', 'HEAD')
    const changed = git('status', '--porcelain', '--untracked-files=no') !== ''
    const commit = changed ? `${head} + uncommitted changes` : head
    Object.defineProperty(this, 'commit', { value: commit })
    return commit
  },
  date: new Date().toISOString().slice(0, 10),
}

export const placement = (asked: string | undefined, role: string) => (asked ? `${role} pinned to core(s) ${asked}` : `${role} unpinned (cores ${allowedCpus()})`)

/**
 * One benchmark's run: prints its heading and set-up at once, keeps the record of every
 * measurement, and at the end prints the observed lines and the table.
 */
export class Report {
  readonly began = performance.now()
  readonly settings: Settings
  private serverCpus = new Set<string>()
  private loaderCpus = new Set<string>()
  private repeated = 0
  private disturbed = 0
  private maxOther = 0
  private maxSteal = 0
  private checked = 0
  private failures: string[] = []

  /**
   * `command` names how it was run (`npm run bench`); `setup` are the lines saying what it ran
   * with; `loader` says where the load comes from when it is not lib/load.ts's generator.
   */
  constructor(readonly command: string, s: Settings, setup: string[], loader = `autocannon ${autocannonVersion} in a process of its own for every measurement (bench/lib/load.ts)`) {
    this.settings = s
    console.log([
      `${command}, ${new Date().toISOString().slice(0, 16)}Z, ${measured.commit}; Node ${process.version}, ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${os.cpus().length} cores; load average ${os.loadavg()[0]!.toFixed(2)} at the start`,
      `- loader: ${loader}`,
      ...setup.map((line) => `- ${line}`),
      `- cores: ${placement(s.serverCpus, 'server')}, ${placement(s.loaderCpus, 'loader')}`,
      '',
    ].join('\n'))
  }

  /** A server taking part: its cores go into the record. */
  server(server: BenchServer): BenchServer {
    this.serverCpus.add(server.cpus())
    return server
  }

  /** A request failure worth saying (a load's non-2xx, a producer's refusal). */
  failure(text: string): void {
    this.failures.push(text)
  }

  /**
   * A measurement kept only if the machine was otherwise quiet during it (bench/lib/quiet.ts):
   * `knownCpuMs` the CPU so far of the processes taking part, `measure` returns the loader's CPU
   * with its value, `prepare` runs before each attempt (what a measurement uses up).
   */
  async kept<T>(label: string, knownCpuMs: () => number, measure: () => Promise<{ value: T; loaderCpuMs: number }>, options: { prepare?: () => Promise<void>; attempts?: number } = {}): Promise<T> {
    const result = await undisturbed(label, knownCpuMs, measure, options)
    this.judged(result)
    return result.value
  }

  /**
   * The record of a measurement a scenario checked itself (one whose steps must not wait for a
   * quiet machine between them): other processes' and steal's share of a core during the one
   * kept, and how many attempts it took.
   */
  judged(result: { other: number; steal: number; attempts: number }): void {
    this.checked++
    this.maxOther = Math.max(this.maxOther, result.other)
    this.maxSteal = Math.max(this.maxSteal, result.steal)
    this.repeated += result.attempts - 1
    if (result.other > OTHER_MAX) this.disturbed++
  }

  /** The record of a load's generator and failures. */
  noteLoad(label: string, result: LoadResult): LoadResult {
    this.loaderCpus.add(result.loaderCpus)
    if (result.non2xx || result.errors) this.failure(`${label}: ${result.non2xx} non-2xx, ${result.errors} socket errors of ${result.ok + result.non2xx}`)
    return result
  }

  /**
   * A load from its own process against `server` (`knownCpuMs` adds a database's CPU): `warmup`
   * seconds (the settings' by default) not counted, then the settings' seconds, kept.
   */
  async load(label: string, knownCpuMs: () => number, spec: Omit<LoadSpec, 'seconds'>, warmup = this.settings.warmup): Promise<LoadResult> {
    const { seconds, loaderCpus } = this.settings
    if (warmup > 0) await loadInChild({ ...spec, seconds: warmup }, loaderCpus)
    const result = await this.kept(label, knownCpuMs, async () => {
      const r = await loadInChild({ ...spec, seconds }, loaderCpus)
      return { value: r, loaderCpuMs: r.loaderProcessCpuMs }
    })
    console.error(`bench: ${label}: ${result.rps} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms`)
    return this.noteLoad(label, result)
  }

  /** `run` for each engine of the settings in turn, then the databases' throwaway cluster stopped, whatever happened. */
  async eachEngine<T>(databases: { stop(): void }, run: (engine: string) => Promise<T>): Promise<T[]> {
    const results: T[] = []
    try {
      for (const engine of this.settings.engines) results.push(await run(engine))
    } finally {
      databases.stop()
    }
    return results
  }

  /** Waits for a quiet machine (before starting servers, so one run's start-up does not fall in another's measurement). */
  quiet(): Promise<number> {
    return waitForQuiet()
  }

  /** The observed lines and the table: `columns` head it, each row gets the date and commit appended. */
  print(columns: string[], rows: string[][], extra: string[] = []): void {
    const cells = [...columns, 'date', 'commit']
    const others = this.checked
      ? `other processes at most ${percent(Math.max(0, this.maxOther))} of a core during a kept measurement (${this.repeated} measured again, ${this.disturbed} kept over ${percent(OTHER_MAX)}); steal at most ${percent(this.maxSteal)}`
      : 'no measurement checked for other processes (each began on a quiet machine)'
    console.log([
      `- observed: server cores ${[...this.serverCpus].join(', ') || '-'}${this.loaderCpus.size ? `; loader cores ${[...this.loaderCpus].join(', ')}` : ''}; ${others}`,
      `- failed requests: ${this.failures.length ? this.failures.join('; ') : 'none'}`,
      ...extra.map((line) => `- ${line}`),
      `- the whole run took ${((performance.now() - this.began) / 60_000).toFixed(1)} minutes, the waits for a quiet machine included`,
      '',
      `| ${cells.join(' | ')} |`,
      `|${cells.map(() => '---').join('|')}|`,
      ...rows.map((row) => `| ${[...row, measured.date, measured.commit].join(' | ')} |`),
    ].join('\n'))
  }
}

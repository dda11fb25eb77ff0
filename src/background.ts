import type { Logger } from './logger.ts'

/** Tasks waiting or running at once, at most: far above what a busy instance has (a handful), far below what fills memory. */
export const BACKGROUND_LIMIT = 1000

/**
 * Work that must not sit on the request path (mail, and whole flows whose timing would tell
 * whether an address has an account). Failures are logged; shutdown waits for what is running.
 *
 * Bounded: each task is started by a request that has already been answered, so nothing slows
 * the requests that make them, and a flood of such requests faster than the database finishes
 * the tasks would otherwise pile them up without end (memory, and a database queue every other
 * request then waits behind). Past `limit` tasks a new one is dropped, logged (at most one line
 * every 10 s, with the count) and counted; the request that made it was answered the same either
 * way, so its sender can only try again later.
 */
export class Background {
  private readonly pending = new Set<Promise<void>>()
  private dropped = 0
  private lastWarning = -Infinity

  constructor(
    private readonly logger: Logger,
    private readonly options: { limit?: number; onDropped?: (label: string) => void } = {},
  ) {}

  /** Tasks waiting or running now. */
  size(): number {
    return this.pending.size
  }

  /**
   * Starts `task` after the current request's answer is written: in a later turn of the event loop
   * (setImmediate), not a microtask, which would run before the reply's own hooks finish and so put
   * the task's synchronous work (a SQLite query, sealing a mail) in front of the answer, where its
   * time would show. Returns false, and does nothing, when `limit` tasks are already pending.
   */
  run(label: string, task: () => Promise<unknown>): boolean {
    if (this.pending.size >= (this.options.limit ?? BACKGROUND_LIMIT)) {
      this.drop(label)
      return false
    }
    const running: Promise<void> = new Promise<void>((resolve) => setImmediate(resolve))
      .then(task)
      .then(
        () => undefined,
        (error: unknown) => this.logger.error({ err: { message: (error as Error).message }, task: label }, 'background task failed'),
      )
      .finally(() => this.pending.delete(running))
    this.pending.add(running)
    return true
  }

  private drop(label: string): void {
    this.dropped++
    this.options.onDropped?.(label)
    const now = performance.now()
    if (now - this.lastWarning < 10_000) return
    this.lastWarning = now
    this.logger.warn({ task: label, dropped: this.dropped, pending: this.pending.size }, 'background tasks full: dropping new ones')
  }

  /** Resolves once everything started so far (and anything it started) has finished. */
  async drain(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending])
  }
}

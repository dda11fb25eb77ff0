import type { Logger } from './logger.ts'

/**
 * Work that must not sit on the request path (mail, and whole flows whose timing would tell
 * whether an address has an account). Failures are logged; shutdown waits for what is running.
 */
export class Background {
  private readonly pending = new Set<Promise<void>>()

  constructor(private readonly logger: Logger) {}

  /**
   * Starts `task` after the current request's answer is written: in a later turn of the event loop
   * (setImmediate), not a microtask, which would run before the reply's own hooks finish and so put
   * the task's synchronous work (a SQLite query, sealing a mail) in front of the answer, where its
   * time would show.
   */
  run(label: string, task: () => Promise<unknown>): void {
    const running: Promise<void> = new Promise<void>((resolve) => setImmediate(resolve))
      .then(task)
      .then(
        () => undefined,
        (error: unknown) => this.logger.error({ err: { message: (error as Error).message }, task: label }, 'background task failed'),
      )
      .finally(() => this.pending.delete(running))
    this.pending.add(running)
  }

  /** Resolves once everything started so far (and anything it started) has finished. */
  async drain(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending])
  }
}

import type { Logger } from './logger.ts'

/**
 * Work that must not sit on the request path (mail, and whole flows whose timing would tell
 * whether an address has an account). Failures are logged; shutdown waits for what is running.
 */
export class Background {
  private readonly pending = new Set<Promise<void>>()

  constructor(private readonly logger: Logger) {}

  run(label: string, task: () => Promise<unknown>): void {
    const running: Promise<void> = Promise.resolve()
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

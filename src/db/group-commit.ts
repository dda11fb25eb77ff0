import type { Db } from './index.ts'

type Work = (trx: Db['kysely']) => Promise<unknown>

interface Job {
  work: Work
  resolve(): void
  reject(error: unknown): void
}

/**
 * Group commit for small writes that need not cost a commit each (a refresh's `last_used_at` and
 * audit row, a login's session and audit row). A caller's work joins the next transaction and the
 * caller's promise settles once that transaction has committed, so nothing is acknowledged before
 * it is durable. While one group commits, the next gathers: under load many writes share one
 * commit (one fsync on SQLite, one round trip on PostgreSQL); when idle a write commits on the
 * next turn of the event loop, with no timer. If a group fails, each of its jobs runs again alone, so one bad
 * write never sinks the others.
 */
export class GroupCommit {
  private waiting: Job[] = []
  private draining: Promise<void> | undefined
  /** Commits and how many jobs they carried, for /metrics and the tests. */
  readonly stats = { groups: 0, jobs: 0 }

  constructor(
    private readonly db: Db,
    private readonly maxGroup = 256,
  ) {}

  run(work: Work): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ work, resolve, reject })
      // Started on the next turn of the event loop, so writes handed in by other requests handled
      // in this turn join the group (on SQLite a transaction otherwise runs start to finish before
      // any other request gets a look in).
      this.draining ??= new Promise<void>((next) => setImmediate(next)).then(() => this.drain())
    })
  }

  /** Resolves once every write handed in so far has committed (or failed); at shutdown. */
  async flush(): Promise<void> {
    await this.draining
  }

  private async drain(): Promise<void> {
    for (;;) {
      // Finding nothing left and letting the next run() start a drain happen in one step: a write
      // handed in by a caller just acknowledged (its continuation runs before this drain's promise
      // settles) must not join a drain that has already finished.
      if (this.waiting.length === 0) {
        this.draining = undefined
        return
      }
      const group = this.waiting.splice(0, this.maxGroup)
      try {
        await this.db.kysely.transaction().execute(async (trx) => {
          for (const job of group) await job.work(trx)
        })
        this.stats.groups++
        this.stats.jobs += group.length
        for (const job of group) job.resolve()
      } catch {
        for (const job of group) await this.alone(job)
      }
    }
  }

  private async alone(job: Job): Promise<void> {
    try {
      await this.db.kysely.transaction().execute(job.work)
      this.stats.groups++
      this.stats.jobs++
      job.resolve()
    } catch (error) {
      job.reject(error)
    }
  }
}

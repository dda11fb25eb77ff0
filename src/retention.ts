import { auditStore } from './audit/store.ts'
import type { Clock } from './clock.ts'
import type { Db } from './db/index.ts'
import { oneTimeTokens, sessions } from './db/repositories.ts'
import type { Logger } from './logger.ts'
import { outbox } from './mail/outbox.ts'
import { MAIL_RECORD_KEEP_MS } from './mail/queue.ts'
import { challenges } from './mfa/store.ts'

export interface RetentionOptions {
  /** How often a pass runs (RETENTION_INTERVAL_SECONDS). */
  intervalMs: number
  /** Audit events older than this many days are deleted (AUDIT_RETENTION_DAYS); 0 keeps them forever. */
  auditDays: number
  /** Rows deleted by one statement: small enough that no batch holds a lock or the event loop for long. */
  batch?: number
}

/**
 * An ended session or a spent token is kept this long before it is deleted, so what an operator
 * or a user looks at right after the fact (sessions list, a "link no longer works" complaint)
 * still has the row.
 */
export const RETENTION_GRACE_MS = 24 * 3600_000

const DEFAULT_BATCH = 500

export interface RetentionPass {
  sessions: number
  /** Verification and reset tokens, and mfa_tokens. */
  oneTimeTokens: number
  auditEvents: number
  mail: number
}

/**
 * Keeps the database the size of the live data: sessions that expired or were revoked, one-time
 * tokens past their expiry (used or not), the records of delivered mail and, after
 * AUDIT_RETENTION_DAYS, audit events are deleted in small batches, each a range of an index
 * (migration 0008), with a turn of the event loop between batches so requests interleave. Every
 * instance runs it; two passes at once only share the work.
 */
export class Retention {
  private timer: NodeJS.Timeout | undefined
  private running: Promise<RetentionPass> | undefined
  private stopped = false
  private readonly batch: number

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly options: RetentionOptions,
  ) {
    this.batch = options.batch ?? DEFAULT_BATCH
  }

  start(): void {
    this.timer = setInterval(() => {
      this.runOnce().catch((error: unknown) => this.logger.warn({ err: { message: (error as Error).message } }, 'retention pass failed'))
    }, this.options.intervalMs)
    this.timer.unref()
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
    await this.running?.catch(() => undefined)
  }

  /** One pass over every kind of expired row; passes never overlap. Resolves to what it deleted. */
  runOnce(): Promise<RetentionPass> {
    this.running ??= this.pass().finally(() => {
      this.running = undefined
    })
    return this.running
  }

  private async pass(): Promise<RetentionPass> {
    const now = this.clock.now()
    const kysely = this.db.kysely
    const ended = now - RETENTION_GRACE_MS
    const deleted: RetentionPass = {
      sessions: await this.drain((limit) => sessions.deleteEnded(kysely, ended, limit)),
      oneTimeTokens: await this.drain(async (limit) => (await oneTimeTokens.deleteExpired(kysely, ended, limit)) + (await challenges.deleteExpired(kysely, ended, limit))),
      mail: await this.drain((limit) => outbox.deleteClosed(kysely, now - MAIL_RECORD_KEEP_MS, limit)),
      auditEvents: this.options.auditDays > 0 ? await this.drain((limit) => auditStore.deleteOlderThan(kysely, now - this.options.auditDays * 86_400_000, limit)) : 0,
    }
    if (Object.values(deleted).some((count) => count > 0)) this.logger.info({ deleted }, 'retention pass')
    return deleted
  }

  /** Repeats one batched delete until a batch comes back short, yielding between batches. */
  private async drain(deleteBatch: (limit: number) => Promise<number>): Promise<number> {
    let total = 0
    for (;;) {
      const count = await deleteBatch(this.batch)
      total += count
      if (count < this.batch || this.stopped) return total
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
}

import { auditStore } from './audit/store.ts'
import type { Clock } from './clock.ts'
import type { Db } from './db/index.ts'
import { oneTimeTokens, sessions } from './db/repositories.ts'
import type { Logger } from './logger.ts'
import { outbox } from './mail/outbox.ts'
import { MAIL_RECORD_KEEP_MS } from './mail/queue.ts'
import { ceremonies, challenges } from './mfa/store.ts'
import { deleteExpiredLoginCodes } from './auth/login-codes.ts'
import { signIns } from './email/store.ts'
import { emailChanges } from './profile/store.ts'
import { invitationStore } from './authz/org-store.ts'
import { deliveries as webhookDeliveries, deliveryTable as webhookTable } from './webhooks/store.ts'
import { flows } from './oidc/store.ts'
import { pruneLogoutDeliveries } from './provider/logouts.ts'
import { records } from './provider/store.ts'

export interface RetentionOptions {
  /** How often a pass runs (RETENTION_INTERVAL_SECONDS). */
  intervalMs: number
  /** Audit events older than this many days are deleted (AUDIT_RETENTION_DAYS); 0 keeps them forever. */
  auditDays: number
  /** Rows deleted by one statement: small enough that no batch holds a lock or the event loop for long. */
  batch?: number
  /**
   * The share of the time a pass may spend deleting while it has more to do (DEFAULT_DUTY): after
   * each full batch it pauses for the batch's own time divided by this, less that time.
   */
  duty?: number
}

/**
 * An ended session or a spent token is kept this long before it is deleted, so what an operator
 * or a user looks at right after the fact (sessions list, a "link no longer works" complaint)
 * still has the row.
 */
export const RETENTION_GRACE_MS = 24 * 3600_000

const DEFAULT_BATCH = 100
/**
 * At 1M users a batch of 100 deletes takes about 15 ms on SQLite, whose driver holds the event loop
 * meanwhile (the page cache misses; bench/scale.ts). Kept to half a per cent of the time, a
 * catch-up of a quarter million rows no longer moves a bearer read's p99 (fewer than one request in
 * a hundred meets a batch); it deletes some 100,000 rows an hour. On PostgreSQL a batch waits on
 * the server without holding the event loop, so it may take ten times the share.
 */
const DEFAULT_DUTY = { sqlite: 0.005, postgres: 0.05 }
/** A delivered (or given up) webhook's payload is kept a week for the deliveries log, its record a month. */
export const WEBHOOK_PAYLOAD_KEEP_MS = 7 * 24 * 3600_000
export const WEBHOOK_RECORD_KEEP_MS = 30 * 24 * 3600_000
/** The shortest pause between full batches. */
const MIN_PAUSE_MS = 5

export interface RetentionPass {
  sessions: number
  /** Verification and reset tokens, and mfa_tokens. */
  oneTimeTokens: number
  auditEvents: number
  mail: number
  /** The OpenID provider's expired codes, tokens, grants, sessions and interactions, and its delivered logout notices. */
  provider: number
  /** Webhook payloads emptied a week after their outcome, and delivery records deleted after a month. */
  webhooks: number
}

/**
 * Keeps the database the size of the live data: sessions that expired or were revoked, one-time
 * tokens past their expiry (used or not), the records of delivered mail and, after
 * AUDIT_RETENTION_DAYS, audit events are deleted in small batches, each a range of an index
 * (migration 0008), paced so that deleting takes a small share of the time (DEFAULT_DUTY). Every
 * instance runs it; two passes at once only share the work.
 */
export class Retention {
  private timer: NodeJS.Timeout | undefined
  private running: Promise<RetentionPass> | undefined
  private stopped = false
  private readonly batch: number
  private readonly duty: number
  private wake: (() => void) | undefined

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly options: RetentionOptions,
  ) {
    this.batch = options.batch ?? DEFAULT_BATCH
    this.duty = options.duty ?? DEFAULT_DUTY[db.engine]
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
    this.wake?.()
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
      // Every kind of one-time secret: mailed tokens, mfa_tokens, passkey challenges, provider flows, login codes, e-mailed sign-ins.
      oneTimeTokens: await this.drain(async (limit) => {
        let deleted = 0
        for (const table of [oneTimeTokens, challenges, ceremonies, flows]) deleted += await table.deleteExpired(kysely, ended, limit)
        deleted += await deleteExpiredLoginCodes(kysely, ended, limit)
        deleted += await signIns.deleteExpired(kysely, ended, limit)
        deleted += await emailChanges.deleteExpired(kysely, ended, limit)
        deleted += await invitationStore.deleteExpired(kysely, ended, limit)
        return deleted
      }),
      mail: await this.drain((limit) => outbox.deleteClosed(kysely, now - MAIL_RECORD_KEEP_MS, limit)),
      provider: await this.drain(async (limit) => (await records.deleteExpired(kysely, ended, limit)) + (await pruneLogoutDeliveries(kysely, now - MAIL_RECORD_KEEP_MS, limit))),
      webhooks: await this.drain(async (limit) => (await webhookDeliveries.erasePayloads(kysely, now - WEBHOOK_PAYLOAD_KEEP_MS, limit)) + (await webhookTable.deleteClosed(kysely, now - WEBHOOK_RECORD_KEEP_MS, limit))),
      auditEvents: this.options.auditDays > 0 ? await this.drain((limit) => auditStore.deleteOlderThan(kysely, now - this.options.auditDays * 86_400_000, limit)) : 0,
    }
    if (Object.values(deleted).some((count) => count > 0)) this.logger.info({ deleted }, 'retention pass')
    return deleted
  }

  /** Repeats one batched delete until a batch comes back short, pausing between batches (the duty above). */
  private async drain(deleteBatch: (limit: number) => Promise<number>): Promise<number> {
    let total = 0
    for (;;) {
      const began = performance.now()
      const count = await deleteBatch(this.batch)
      total += count
      if (count < this.batch || this.stopped) return total
      const spent = performance.now() - began
      const pause = Math.max(MIN_PAUSE_MS, (spent * (1 - this.duty)) / this.duty)
      // stop() ends the pause at once, so shutdown never waits for it.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => resolve(), pause)
        this.wake = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      this.wake = undefined
    }
  }
}

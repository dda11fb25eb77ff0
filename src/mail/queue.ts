import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import { KeyEncryptionError, KeySealer } from '../auth/key-encryption.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { Database, MailKind } from '../db/schema.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'
import type { MailMessage, MailTransport } from './index.ts'
import { openBodies, outbox, sealBodies, sealedUnder, type OutboxRow } from './outbox.ts'

export interface MailQueueOptions {
  /** How often every instance looks for due mail (a new mail is also sent at once). */
  pollMs: number
  /** How long a claimed mail is this instance's; longer than any send can take. */
  leaseMs: number
  /** The first retry's delay; each further one doubles, up to retryMaxMs. */
  retryBaseMs: number
  retryMaxMs: number
  /** Mail not delivered by this age is given up (MAIL_MAX_AGE_HOURS). */
  maxAgeMs: number
}

export const DEFAULT_MAIL_QUEUE: MailQueueOptions = {
  pollMs: 1000,
  leaseMs: 120_000,
  retryBaseMs: 5000,
  retryMaxMs: 10 * 60_000,
  maxAgeMs: 24 * 3600_000,
}

const BATCH = 10
/** How long the record of a sent or given-up mail (bodies erased) is kept; retention deletes it then. */
export const MAIL_RECORD_KEEP_MS = 7 * 24 * 3600_000

/** An SMTP 5xx: the relay refuses this mail for good, so retrying cannot help. */
function isPermanent(error: unknown): boolean {
  const code = (error as { responseCode?: unknown }).responseCode
  return typeof code === 'number' && code >= 500 && code < 600
}

/**
 * Durable mail. A mail is written to the database in the same transaction as the token it
 * carries (enqueue), so it exists exactly when the token does, and survives a crash or a relay
 * outage. Every instance runs a sender that claims due mail with a lease, so a mail is sent by one
 * instance at a time, once in the normal case and at least once after a crash. Failures are
 * retried with a doubling delay (relay down, 4xx, timeouts); an SMTP 5xx or a mail older than the
 * horizon is given up and recorded.
 */
export class MailQueue {
  private readonly owner = randomUUID()
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null
  private again = false
  private stopped = false
  private readonly sent
  private readonly retried
  private readonly failed

  constructor(
    private readonly db: Db,
    private readonly transport: MailTransport,
    /**
     * Seals the bodies at rest (they carry one-time links) and opens them to send; during a
     * `keys rewrap` an instance given OLD_KEY_ENCRYPTION_KEY as well still opens mail sealed under it.
     */
    private readonly sealers: { current: KeySealer; previous?: KeySealer | undefined },
    private readonly clock: Clock,
    private readonly logger: Logger,
    metrics: Metrics,
    private readonly options: MailQueueOptions = DEFAULT_MAIL_QUEUE,
  ) {
    this.sent = metrics.counter({ name: 'portcullis_mail_sent_total', help: 'Mails handed to the relay by this instance.', labelNames: ['kind'] as const })
    this.retried = metrics.counter({ name: 'portcullis_mail_retried_total', help: 'Mail deliveries that failed and were rescheduled.', labelNames: ['kind'] as const })
    this.failed = metrics.counter({ name: 'portcullis_mail_failed_total', help: 'Mails given up (SMTP 5xx, or older than MAIL_MAX_AGE_HOURS).', labelNames: ['kind'] as const })
    metrics.gauge({ name: 'portcullis_mail_queued', help: 'Mails waiting to be sent, on every instance (read from the database).', read: () => this.queuedCount })
  }

  private get openers(): KeySealer[] {
    return this.sealers.previous ? [this.sealers.current, this.sealers.previous] : [this.sealers.current]
  }

  /** The queue length as of the last pass; the gauge reads it without a query per scrape. */
  private queuedCount = 0

  /** Call inside the transaction that creates the token the mail carries. */
  async enqueue(trx: Kysely<Database>, mail: { userId: string | null; kind: MailKind; message: MailMessage }): Promise<void> {
    await outbox.insert(trx, mail, this.clock.now(), this.sealers.current)
  }

  /**
   * Seals the bodies of mail queued in the clear (by a release before sealing), so an upgrade
   * leaves no link readable at rest. Conditional on the clear value, so two instances starting
   * together seal each row once.
   */
  async sealWaiting(): Promise<number> {
    let sealed = 0
    for (const row of await outbox.waiting(this.db.kysely)) {
      if (sealedUnder(this.sealers.current, row)) continue
      if (await outbox.replaceBodies(this.db.kysely, row.id, row, sealBodies(this.sealers.current, row.id, openBodies(this.sealers.current, row)))) sealed++
    }
    return sealed
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), this.options.pollMs)
    this.timer.unref()
    this.kick()
  }

  /** Looks for due mail now (after a commit that enqueued one); passes never overlap. */
  kick(): void {
    if (this.stopped) return
    if (this.running) {
      this.again = true
      return
    }
    this.running = this.pass()
      .catch((error: unknown) => this.logger.warn({ err: { message: (error as Error).message } }, 'mail queue pass failed'))
      .finally(() => {
        this.running = null
        if (this.again) {
          this.again = false
          this.kick()
        }
      })
  }

  private async pass(): Promise<void> {
    for (;;) {
      const batch = await outbox.claim(this.db, this.owner, this.clock.now(), this.options.leaseMs, BATCH)
      // One at a time: a relay is better served by a steady stream than by a burst of connections.
      for (const row of batch) await this.deliver(row)
      if (batch.length < BATCH || this.stopped) break
    }
    this.queuedCount = await outbox.pending(this.db.kysely)
  }

  private async deliver(row: OutboxRow): Promise<void> {
    const mail = { id: row.id, kind: row.kind, attempts: row.attempts }
    try {
      await this.transport.send({ to: row.recipient, subject: row.subject, ...openBodies(this.openers, row) })
    } catch (error) {
      const now = this.clock.now()
      const reason = ((error as Error).message ?? 'unknown error').slice(0, 300)
      if (isPermanent(error) || now - row.created_at >= this.options.maxAgeMs) {
        await outbox.close(this.db.kysely, row.id, this.owner, { failed_at: now, last_error: reason })
        this.failed.inc({ kind: row.kind })
        this.logger.error({ mail, err: { message: reason } }, 'mail given up')
        return
      }
      const delay = Math.min(this.options.retryBaseMs * 2 ** (row.attempts - 1), this.options.retryMaxMs)
      await outbox.retryAt(this.db.kysely, row.id, this.owner, now + delay, reason)
      this.retried.inc({ kind: row.kind })
      this.logger.warn({ mail, retryInMs: delay, err: { message: reason } }, 'mail delivery failed; will retry')
      return
    }
    await outbox.close(this.db.kysely, row.id, this.owner, { sent_at: this.clock.now(), last_error: null })
    this.sent.inc({ kind: row.kind })
  }

  /** Resolves once every mail due now has been tried once more (tests wait on it). */
  async flush(): Promise<void> {
    await this.running
    this.kick()
    await this.running
  }

  /** Stops claiming; resolves once the pass under way (if any) has finished. */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
    await this.running
  }
}

/**
 * `keys rewrap`'s part for the mail queue: re-seals the bodies of waiting mail from one
 * key-encryption key to the other, inside the caller's transaction. A body the new key already
 * opens is left alone (a repeated rewrap is harmless); one neither key opens stops the rewrap.
 */
export async function rewrapWaitingMail(trx: Kysely<Database>, from: KeySealer, to: KeySealer): Promise<number> {
  let rewrapped = 0
  for (const row of await outbox.waiting(trx)) {
    if (sealedUnder(to, row)) continue
    let bodies: { text: string; html: string }
    try {
      bodies = openBodies([from, to], row)
    } catch {
      throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt queued mail ${row.id}; nothing was changed`)
    }
    await outbox.replaceBodies(trx, row.id, row, sealBodies(to, row.id, bodies))
    rewrapped++
  }
  return rewrapped
}

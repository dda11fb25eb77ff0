import type { Kysely } from 'kysely'
import { KeyEncryptionError, KeySealer } from '../auth/key-encryption.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { Database, MailKind } from '../db/schema.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'
import { DurableQueue, type DurableQueueNames, type DurableQueueOptions } from '../queue/durable.ts'
import type { MailMessage, MailTransport } from './index.ts'
import { openBodies, outbox, outboxStore, sealBodies, sealedUnder, type OutboxRow } from './outbox.ts'

/**
 * The mail queue's timings (leaseMs from MAIL_LEASE_SECONDS, maxAgeMs from MAIL_MAX_AGE_HOURS);
 * the batch size is fixed (BATCH).
 */
export type MailQueueOptions = Omit<DurableQueueOptions, 'batch'>

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

/** Published: operators alert on these metrics and search for these lines, so they are never renamed. */
const MAIL_NAMES: DurableQueueNames<OutboxRow> = {
  sent: { name: 'portcullis_mail_sent_total', help: 'Mails handed to the relay by this instance.' },
  retried: { name: 'portcullis_mail_retried_total', help: 'Mail deliveries that failed and were rescheduled.' },
  failed: { name: 'portcullis_mail_failed_total', help: 'Mails given up (SMTP 5xx, or older than MAIL_MAX_AGE_HOURS).' },
  queued: { name: 'portcullis_mail_queued', help: 'Mails waiting to be sent, on every instance (read from the database).' },
  label: { name: 'kind', of: (row) => row.kind },
  log: {
    givenUp: 'mail given up',
    retrying: 'mail delivery failed; will retry',
    passFailed: 'mail queue pass failed',
    fields: (row) => ({ mail: { id: row.id, kind: row.kind, attempts: row.attempts } }),
  },
}


/**
 * Durable mail, on the shared durable queue (src/queue/durable.ts). A mail is written to the
 * database in the same transaction as the token it carries (enqueue), so it exists exactly when
 * the token does, and survives a crash or a relay outage. Every instance runs a sender that claims
 * due mail with a lease, so a mail is sent by one instance at a time, once in the normal case and
 * at least once after a crash. Failures are retried with a doubling delay (relay down, 4xx,
 * timeouts); an SMTP 5xx or a mail older than the horizon is given up and recorded.
 */
export class MailQueue {
  private readonly queue: DurableQueue<OutboxRow>

  constructor(
    private readonly db: Db,
    transport: MailTransport,
    /**
     * Seals the bodies at rest (they carry one-time links) and opens them to send; during a
     * `keys rewrap` an instance given OLD_KEY_ENCRYPTION_KEY as well still opens mail sealed under it.
     */
    private readonly sealers: { current: KeySealer; previous?: KeySealer | undefined },
    private readonly clock: Clock,
    logger: Logger,
    metrics: Metrics,
    options: MailQueueOptions = DEFAULT_MAIL_QUEUE,
  ) {
    this.queue = new DurableQueue({
      store: outboxStore(db),
      // Opened here, inside the delivery: a body no key opens is a failed attempt, not a failed pass.
      deliver: (row) => transport.send({ to: row.recipient, subject: row.subject, ...openBodies(this.openers, row) }),
      isPermanent,
      clock,
      logger,
      metrics,
      options: { ...options, batch: BATCH },
      names: MAIL_NAMES,
    })
  }

  private get openers(): KeySealer[] {
    return this.sealers.previous ? [this.sealers.current, this.sealers.previous] : [this.sealers.current]
  }

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
    this.queue.start()
  }

  /** Looks for due mail now (after a commit that enqueued one); passes never overlap. */
  kick(): void {
    this.queue.kick()
  }

  /** Resolves once every mail due now has been tried once more (tests wait on it). */
  flush(): Promise<void> {
    return this.queue.flush()
  }

  /** Stops claiming; resolves once the pass under way (if any) has finished. */
  stop(): Promise<void> {
    return this.queue.stop()
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

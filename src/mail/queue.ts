import type { Kysely } from 'kysely'
import { KeyEncryptionError, KeySealer } from '../auth/key-encryption.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { Database, MailKind } from '../db/schema.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'
import { DurableQueue, type DurableQueueNames, type DurableQueueOptions } from '../queue/durable.ts'
import type { MailMessage, MailTransport } from './index.ts'
import { openMail, openSubject, outbox, outboxStore, resealParts, sealClearParts, type OutboxRow } from './outbox.ts'

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

/**
 * The failure of a delivery as the queue records it (in `last_error`, in the clear) and logs it:
 * a relay may quote what it refuses ("550 rejected: <subject>"), so any part of the mail the
 * message repeats (its subject, or a line of its text: the link, the code) is cut out of it first.
 * The error keeps its class and `responseCode`, which decide whether it is retried.
 */
function withoutContent(error: unknown, mail: MailMessage): unknown {
  if (!(error instanceof Error)) return error
  const pieces = [mail.subject, ...mail.text.split('\n').map((line) => line.trim())].filter((piece) => piece.length >= 6)
  let message = error.message
  for (const piece of pieces.sort((a, b) => b.length - a.length)) message = message.split(piece).join('[mail content]')
  if (message !== error.message) error.message = message
  return error
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
     * Seal the mail at rest, subject and bodies (the bodies carry one-time links), and open it to
     * send; during a `keys rewrap` an instance given OLD_KEY_ENCRYPTION_KEY as well still opens
     * mail sealed under it.
     */
    private readonly sealers: { current: KeySealer; previous?: KeySealer | undefined },
    private readonly clock: Clock,
    logger: Logger,
    metrics: Metrics,
    options: MailQueueOptions = DEFAULT_MAIL_QUEUE,
  ) {
    this.queue = new DurableQueue({
      store: outboxStore(db),
      // Opened here, inside the delivery: a mail no key opens is a failed attempt, not a failed pass.
      deliver: async (row) => {
        const mail = { to: row.recipient, ...openMail(this.openers, row) }
        try {
          await transport.send(mail)
        } catch (error) {
          throw withoutContent(error, mail)
        }
      },
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
   * Seals every part of waiting mail still in the clear (queued by a release that sealed only the
   * bodies, or none), so an upgrade leaves no link or code readable at rest. A part already sealed
   * is left under its key: mail an instance still on the old key queued during a `keys rewrap` is
   * opened with OLD_KEY_ENCRYPTION_KEY when sent. Conditional on the values read, so two instances
   * starting together seal each row once.
   */
  async sealWaiting(): Promise<number> {
    let sealed = 0
    for (const row of await outbox.waiting(this.db.kysely)) {
      const next = sealClearParts(this.sealers.current, row)
      if (next && (await outbox.replaceParts(this.db.kysely, row.id, row, next))) sealed++
    }
    return sealed
  }

  /**
   * The clear subject of a mail the queue holds or has sent (the user's export shows it); empty
   * when no key given opens it, which only a record sealed under a key since retired can be.
   */
  subjectOf(row: Pick<OutboxRow, 'id' | 'subject'>): string {
    return openSubject(this.openers, row) ?? ''
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
 * `keys rewrap`'s part for the mail queue: re-seals every sealed part of every row from one
 * key-encryption key to the other (and seals any part still clear), inside the caller's
 * transaction: the subject and bodies of waiting mail, and the subject the record of sent mail
 * keeps (the export opens it). A part the new key already opens is left alone (a repeated rewrap is
 * harmless). Waiting mail neither key opens stops the rewrap; a record neither opens (sealed under
 * a key retired before) is left for retention, since nothing needs to send it.
 */
export async function rewrapMail(trx: Kysely<Database>, from: KeySealer, to: KeySealer): Promise<number> {
  let rewrapped = 0
  for (const row of await outbox.all(trx)) {
    const next = resealParts(from, to, row)
    if (next === 'unopenable') {
      if (row.sent_at === null && row.failed_at === null) throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt queued mail ${row.id}; nothing was changed`)
      continue
    }
    if (next && (await outbox.replaceParts(trx, row.id, row, next))) rewrapped++
  }
  return rewrapped
}

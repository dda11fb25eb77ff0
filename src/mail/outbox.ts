import { randomUUID } from 'node:crypto'
import type { Kysely, Selectable } from 'kysely'
import type { Db } from '../db/index.ts'
import type { Database, MailKind, MailOutboxTable } from '../db/schema.ts'
import { KeyEncryptionError, KeySealer } from '../auth/key-encryption.ts'
import type { MailMessage } from './index.ts'
import { queueTable } from '../queue/table.ts'

/** The mail queue's storage calls (table mail_outbox). */
export type OutboxRow = Selectable<MailOutboxTable>

type Executor = Kysely<Database>

/**
 * What a sealed body is bound to: its mail and its part, so a sealed body copied onto another row
 * (or into the other part) does not open there.
 */
function aadOf(id: string, part: 'text' | 'html'): string {
  return `mail:${id}:${part}`
}

/**
 * The bodies of a queued mail carry a one-time link, so they are stored sealed under
 * KEY_ENCRYPTION_KEY: a copy of the database (WAL and free pages included) never holds a working
 * link in the clear. The clear text exists only in memory, on the way in and on the way out.
 */
export function sealBodies(sealer: KeySealer, id: string, message: Pick<MailMessage, 'text' | 'html'>): { body_text: string; body_html: string } {
  return { body_text: sealer.seal(message.text, aadOf(id, 'text')), body_html: sealer.seal(message.html, aadOf(id, 'html')) }
}

/**
 * The clear bodies of a row, opened with the first of `sealers` that opens them (throws
 * KeyEncryptionError when none does); a row queued before sealing (clear text) is read as it is.
 */
export function openBodies(sealers: KeySealer | KeySealer[], row: Pick<OutboxRow, 'id' | 'body_text' | 'body_html'>): { text: string; html: string } {
  const list = Array.isArray(sealers) ? sealers : [sealers]
  const open = (value: string, part: 'text' | 'html') => {
    if (!KeySealer.isSealed(value)) return value
    for (const sealer of list) {
      const clear = sealer.tryOpen(value, aadOf(row.id, part))
      if (clear !== null) return clear
    }
    throw new KeyEncryptionError(`KEY_ENCRYPTION_KEY does not open queued mail ${row.id}`)
  }
  return { text: open(row.body_text, 'text'), html: open(row.body_html, 'html') }
}

/** True when both bodies are sealed and `sealer` opens them. */
export function sealedUnder(sealer: KeySealer, row: Pick<OutboxRow, 'id' | 'body_text' | 'body_html'>): boolean {
  return (['text', 'html'] as const).every((part) => {
    const value = part === 'text' ? row.body_text : row.body_html
    return KeySealer.isSealed(value) && sealer.tryOpen(value, aadOf(row.id, part)) !== null
  })
}

const mailTable = queueTable<OutboxRow>('mail_outbox', { erase: { body_text: '', body_html: '' } })

/** The mail queue's storage on mail_outbox (src/queue/durable.ts). */
export function outboxStore(db: Db) {
  return mailTable.store(db)
}

export const outbox = {
  async insert(db: Executor, mail: { userId: string | null; kind: MailKind; message: MailMessage }, at: number, sealer: KeySealer): Promise<void> {
    const id = randomUUID()
    await db
      .insertInto('mail_outbox')
      .values({
        id,
        user_id: mail.userId,
        kind: mail.kind,
        recipient: mail.message.to,
        subject: mail.message.subject,
        ...sealBodies(sealer, id, mail.message),
        created_at: at,
        next_attempt_at: at,
      })
      .execute()
  },

  /** Mail still waiting to be sent (bodies not yet erased), for re-sealing. */
  async waiting(db: Executor): Promise<Pick<OutboxRow, 'id' | 'body_text' | 'body_html'>[]> {
    return db
      .selectFrom('mail_outbox')
      .select(['id', 'body_text', 'body_html'])
      .where('sent_at', 'is', null)
      .where('failed_at', 'is', null)
      .execute()
  },

  /** Swaps the bodies only if they are still `previous`, so a mail sent meanwhile (bodies erased) stays erased. */
  async replaceBodies(db: Executor, id: string, previous: { body_text: string; body_html: string }, next: { body_text: string; body_html: string }): Promise<boolean> {
    const result = await db
      .updateTable('mail_outbox')
      .set(next)
      .where('id', '=', id)
      .where('body_text', '=', previous.body_text)
      .where('body_html', '=', previous.body_html)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  // Leasing, closing (the bodies, which hold a link with a token, are erased either way), retrying,
  // counting and retention: the durable queues' shared table calls (src/queue/table.ts).
  claim: mailTable.claim,
  close: mailTable.close,
  retryAt: mailTable.retryAt,
  pending: mailTable.pending,
  deleteClosed: mailTable.deleteClosed,
}

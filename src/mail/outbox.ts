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

/** The parts of a mail stored sealed, by column. */
export type SealedParts = Pick<OutboxRow, 'subject' | 'body_text' | 'body_html'>
/** A stored mail as the sealing calls read it. */
export type StoredMail = Pick<OutboxRow, 'id'> & SealedParts

type Part = 'subject' | 'text' | 'html'
const COLUMNS: Record<Part, keyof SealedParts> = { subject: 'subject', text: 'body_text', html: 'body_html' }
const PARTS = Object.keys(COLUMNS) as Part[]

/**
 * What a sealed part is bound to: its mail and its part, so a sealed part copied onto another row
 * (or into another part) does not open there.
 */
function aadOf(id: string, part: Part): string {
  return `mail:${id}:${part}`
}

/**
 * A queued mail is stored sealed whole under KEY_ENCRYPTION_KEY: the bodies carry a one-time link,
 * and the subject, though no template puts a secret in it any more, is sealed with them so that no
 * part of a mail is ever a place a secret can sit in the clear (a release whose sign-in subject
 * carried the code is what taught this). A copy of the database (WAL and free pages included) holds
 * no part of a mail in the clear; the clear text exists only in memory, on the way in and out.
 */
export function sealMail(sealer: KeySealer, id: string, message: Pick<MailMessage, 'subject' | 'text' | 'html'>): SealedParts {
  return {
    subject: sealer.seal(message.subject, aadOf(id, 'subject')),
    body_text: sealer.seal(message.text, aadOf(id, 'text')),
    body_html: sealer.seal(message.html, aadOf(id, 'html')),
  }
}

/** One part in the clear: as it is when stored before sealing (or erased, ''), else opened by the first of `sealers` that can; null when none can. */
function openPart(sealers: KeySealer[], id: string, part: Part, value: string): string | null {
  if (!KeySealer.isSealed(value)) return value
  for (const sealer of sealers) {
    const clear = sealer.tryOpen(value, aadOf(id, part))
    if (clear !== null) return clear
  }
  return null
}

/**
 * The clear mail of a row, each part opened with the first of `sealers` that opens it (throws
 * KeyEncryptionError when none does); a part stored before sealing (clear text) is read as it is.
 */
export function openMail(sealers: KeySealer | KeySealer[], row: StoredMail): { subject: string; text: string; html: string } {
  const list = Array.isArray(sealers) ? sealers : [sealers]
  const open = (part: Part) => {
    const clear = openPart(list, row.id, part, row[COLUMNS[part]])
    if (clear === null) throw new KeyEncryptionError(`KEY_ENCRYPTION_KEY does not open queued mail ${row.id}`)
    return clear
  }
  return { subject: open('subject'), text: open('text'), html: open('html') }
}

/** The clear subject of a row (the record of a sent mail included), or null when no key opens it. */
export function openSubject(sealers: KeySealer[], row: Pick<OutboxRow, 'id' | 'subject'>): string | null {
  return openPart(sealers, row.id, 'subject', row.subject)
}

/**
 * The row with every part still in the clear sealed under `sealer` (parts already sealed, under
 * whichever key, and bodies erased after sending are left as they are); null when nothing is clear.
 */
export function sealClearParts(sealer: KeySealer, row: StoredMail): SealedParts | null {
  const next: SealedParts = { subject: row.subject, body_text: row.body_text, body_html: row.body_html }
  let changed = false
  for (const part of PARTS) {
    const value = row[COLUMNS[part]]
    if (value === '' || KeySealer.isSealed(value)) continue
    next[COLUMNS[part]] = sealer.seal(value, aadOf(row.id, part))
    changed = true
  }
  return changed ? next : null
}

/**
 * The row's parts moved from `from` to `to`: a clear part is sealed, a part `to` already opens is
 * left alone (a repeated rewrap is harmless), an erased body stays erased. Null when nothing
 * changes; 'unopenable' when a sealed part opens under neither key.
 */
export function resealParts(from: KeySealer, to: KeySealer, row: StoredMail): SealedParts | null | 'unopenable' {
  const next: SealedParts = { subject: row.subject, body_text: row.body_text, body_html: row.body_html }
  let changed = false
  for (const part of PARTS) {
    const value = row[COLUMNS[part]]
    if (value === '' || to.tryOpen(value, aadOf(row.id, part)) !== null) continue
    const clear = openPart([from], row.id, part, value)
    if (clear === null) return 'unopenable'
    next[COLUMNS[part]] = to.seal(clear, aadOf(row.id, part))
    changed = true
  }
  return changed ? next : null
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
        ...sealMail(sealer, id, mail.message),
        created_at: at,
        next_attempt_at: at,
      })
      .execute()
  },

  /** Mail still waiting to be sent (bodies not yet erased), for sealing at start (an index range). */
  async waiting(db: Executor): Promise<StoredMail[]> {
    return db
      .selectFrom('mail_outbox')
      .select(['id', 'subject', 'body_text', 'body_html'])
      .where('sent_at', 'is', null)
      .where('failed_at', 'is', null)
      .execute()
  },

  /**
   * Every row, the records of mail sent or given up included (their subject stays sealed), for
   * `keys rewrap`: a record left under the old key could not be shown in the user's export.
   */
  async all(db: Executor): Promise<(StoredMail & Pick<OutboxRow, 'sent_at' | 'failed_at'>)[]> {
    return db.selectFrom('mail_outbox').select(['id', 'subject', 'body_text', 'body_html', 'sent_at', 'failed_at']).execute()
  },

  /** Swaps the parts only if they are still `previous`, so a mail sent meanwhile (bodies erased) stays erased. */
  async replaceParts(db: Executor, id: string, previous: SealedParts, next: SealedParts): Promise<boolean> {
    const result = await db
      .updateTable('mail_outbox')
      .set(next)
      .where('id', '=', id)
      .where('subject', '=', previous.subject)
      .where('body_text', '=', previous.body_text)
      .where('body_html', '=', previous.body_html)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  // Leasing, closing (the bodies, which hold a link with a token, are erased either way; the sealed
  // subject stays as the record's), retrying, counting and retention: the durable queues' shared
  // table calls (src/queue/table.ts).
  claim: mailTable.claim,
  close: mailTable.close,
  retryAt: mailTable.retryAt,
  pending: mailTable.pending,
  deleteClosed: mailTable.deleteClosed,
}

import { randomUUID } from 'node:crypto'
import type { Kysely, Selectable } from 'kysely'
import type { Db } from '../db/index.ts'
import type { Database, MailKind, MailOutboxTable } from '../db/schema.ts'
import type { MailMessage } from './index.ts'

/** The mail queue's storage calls (table mail_outbox). */
export type OutboxRow = Selectable<MailOutboxTable>

type Executor = Kysely<Database>

export const outbox = {
  async insert(db: Executor, mail: { userId: string | null; kind: MailKind; message: MailMessage }, at: number): Promise<void> {
    await db
      .insertInto('mail_outbox')
      .values({
        id: randomUUID(),
        user_id: mail.userId,
        kind: mail.kind,
        recipient: mail.message.to,
        subject: mail.message.subject,
        body_text: mail.message.text,
        body_html: mail.message.html,
        created_at: at,
        next_attempt_at: at,
      })
      .execute()
  },

  /**
   * Leases up to `limit` due mails to `owner` and counts the attempt. A row is due when unsent, not
   * given up, its next attempt has come, and no live lease holds it; so two instances never send
   * one mail at once, and a mail whose sender died is taken up again when its lease runs out.
   * PostgreSQL skips rows another claimer has locked; SQLite has one writer at a time anyway.
   */
  async claim(db: Db, owner: string, now: number, leaseMs: number, limit: number): Promise<OutboxRow[]> {
    let due = db.kysely
      .selectFrom('mail_outbox')
      .select('id')
      .where('sent_at', 'is', null)
      .where('failed_at', 'is', null)
      .where('next_attempt_at', '<=', now)
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
      .orderBy('next_attempt_at')
      .limit(limit)
    if (db.engine === 'postgres') due = due.forUpdate().skipLocked()
    return db.kysely
      .updateTable('mail_outbox')
      .set((eb) => ({ lease_owner: owner, lease_until: now + leaseMs, attempts: eb('attempts', '+', 1) }))
      .where('id', 'in', due)
      .returningAll()
      .execute()
  },

  /**
   * Sent or given up: either way the bodies (which hold a link with a token) are erased and the
   * row stays as the record. Only the lease holder may close a mail.
   */
  async close(db: Executor, id: string, owner: string, outcome: { sent_at: number; last_error: null } | { failed_at: number; last_error: string }): Promise<void> {
    await db
      .updateTable('mail_outbox')
      .set({ ...outcome, lease_until: null, body_text: '', body_html: '' })
      .where('id', '=', id)
      .where('lease_owner', '=', owner)
      .execute()
  },

  async retryAt(db: Executor, id: string, owner: string, at: number, error: string): Promise<void> {
    await db.updateTable('mail_outbox').set({ next_attempt_at: at, lease_until: null, last_error: error }).where('id', '=', id).where('lease_owner', '=', owner).execute()
  },

  async pending(db: Executor): Promise<number> {
    const row = await db
      .selectFrom('mail_outbox')
      .select((eb) => eb.fn.countAll<string | number>().as('n'))
      .where('sent_at', 'is', null)
      .where('failed_at', 'is', null)
      .executeTakeFirstOrThrow()
    return Number(row.n)
  },

  async prune(db: Executor, before: number): Promise<void> {
    await db.deleteFrom('mail_outbox').where((eb) => eb.or([eb('sent_at', '<', before), eb('failed_at', '<', before)])).execute()
  },
}

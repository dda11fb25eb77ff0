import type { Kysely } from 'kysely'

export async function up(db: Kysely<any>): Promise<void> {
  // Every mail, written in the transaction that creates the token it carries, and delivered from
  // here by whichever instance claims it first (src/mail/queue.ts). Bodies are erased once the mail
  // is sent or given up; the row stays a week as the record.
  await db.schema
    .createTable('mail_outbox')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('recipient', 'text', (c) => c.notNull())
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('body_text', 'text', (c) => c.notNull())
    .addColumn('body_html', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('lease_owner', 'text')
    .addColumn('lease_until', 'bigint')
    .addColumn('sent_at', 'bigint')
    .addColumn('failed_at', 'bigint')
    .addColumn('last_error', 'text')
    .execute()
  await db.schema.createIndex('mail_outbox_due_idx').on('mail_outbox').columns(['sent_at', 'failed_at', 'next_attempt_at']).execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('mail_outbox').execute()
}

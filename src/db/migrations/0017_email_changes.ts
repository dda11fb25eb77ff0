import type { Kysely } from 'kysely'

/**
 * A change of address asked for and not yet confirmed (docs/profile.md): the link mailed to the new
 * address carries a token stored only as its SHA-256, like the other mailed links. At most one is
 * live per account. `session_id` is the session that asked: it is the one kept when the change
 * happens. The rows go with the account.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('email_changes')
    .addColumn('token_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('new_email', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('email_changes_user_idx').on('email_changes').column('user_id').execute()
  await db.schema.createIndex('email_changes_expires_at_idx').on('email_changes').column('expires_at').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('email_changes').execute()
}

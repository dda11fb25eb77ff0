import type { Kysely } from 'kysely'

/**
 * Sign in with an e-mailed code or link (docs/email-sign-in.md): one row
 * per sign-in started, at most one live per address. The 6-digit code is kept as a keyed hash (to
 * judge what is typed) and sealed (to show it on the link's page on another device); the link's
 * token as a keyed hash. `user_id` is null for an address with no account yet (EMAIL_SIGNUP).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('email_sign_ins')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('code_hash', 'text', (c) => c.notNull())
    .addColumn('code_sealed', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('failures', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('redirect_to', 'text')
    .addColumn('code_challenge', 'text')
    .addColumn('browser_hash', 'text')
    .addColumn('credential_epoch', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('email_sign_ins_email_idx').on('email_sign_ins').columns(['email', 'created_at']).execute()
  await db.schema.createIndex('email_sign_ins_user_idx').on('email_sign_ins').column('user_id').execute()
  await db.schema.createIndex('email_sign_ins_expires_at_idx').on('email_sign_ins').column('expires_at').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('email_sign_ins').execute()
}

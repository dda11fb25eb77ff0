import type { Kysely } from 'kysely'

/**
 * The operators' console (docs/console.md): its sessions, each the SHA-256 of the cookie's value,
 * the operator, the account's credential epoch at sign-in (a reset, a change of password, a disable
 * move it) and the provider grant the sign-in made (logout-all ends it): the console session ends
 * with either. 12 hours at most, 30 minutes idle.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('console_sessions')
    .addColumn('id_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('credential_epoch', 'integer', (c) => c.notNull())
    // The reference of the provider grant the sign-in made: logout-all ends it, and the session with it.
    .addColumn('grant_ref', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('last_seen_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('console_sessions_user_idx').on('console_sessions').column('user_id').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('console_sessions').execute()
}

import type { Kysely } from 'kysely'

/**
 * Dynamic client registration (RFC 7591; docs/provider.md, "Dynamic registration"): clients that
 * registered themselves are marked `dynamic` and removed after 30 days unused (`last_used_at`, set
 * when a token is issued to them, at most once an hour); the initial access tokens
 * `portcullis clients registration-token` makes (OP_REGISTRATION=token) are kept as SHA-256 hashes,
 * each good for one registration before it expires.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('op_clients').addColumn('dynamic', 'integer', (c) => c.notNull().defaultTo(0)).execute()
  await db.schema.alterTable('op_clients').addColumn('last_used_at', 'bigint').execute()
  await db.schema
    .createTable('registration_tokens')
    .addColumn('token_hash', 'text', (c) => c.primaryKey())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('registration_tokens').execute()
  await db.schema.alterTable('op_clients').dropColumn('last_used_at').execute()
  await db.schema.alterTable('op_clients').dropColumn('dynamic').execute()
}

import { sql, type Kysely } from 'kysely'

export async function up(db: Kysely<any>): Promise<void> {
  // Operators' API keys: only a keyed hash of the secret is stored; the id is the public part of
  // the key (pcl_<id>_<secret>) and what `api-keys list|revoke` show.
  await db.schema
    .createTable('api_keys')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint')
    .addColumn('revoked_at', 'bigint')
    .addColumn('last_used_at', 'bigint')
    .execute()

  // Who acted, when it was not the user: `api_key:<id>` or `cli`.
  await db.schema.alterTable('audit_events').addColumn('actor', 'text').execute()
  // Newest-first keyset pages of the admin API: (at, id) descending.
  await db.schema.createIndex('audit_events_at_id_idx').on('audit_events').columns(['at', 'id']).execute()

  await db.schema.alterTable('users').addColumn('last_login_at', 'bigint').execute()
  await sql`update users set last_login_at = (select max(s.created_at) from sessions s where s.user_id = users.id)`.execute(db)
  // The admin API pages users by (created_at, id).
  await db.schema.createIndex('users_created_id_idx').on('users').columns(['created_at', 'id']).execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('users_created_id_idx').execute()
  await db.schema.alterTable('users').dropColumn('last_login_at').execute()
  await db.schema.dropIndex('audit_events_at_id_idx').execute()
  await db.schema.alterTable('audit_events').dropColumn('actor').execute()
  await db.schema.dropTable('api_keys').execute()
}

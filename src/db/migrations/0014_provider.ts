import type { Kysely } from 'kysely'

/**
 * Portcullis as an OpenID provider (docs/provider.md):
 *
 * - `sessions.client_name`: the app a session signed in to through the provider's pages.
 * - `op_clients`: the clients operators registered. `metadata` is the client's registration as
 *   JSON (no secret); `secret` is the client secret sealed under KEY_ENCRYPTION_KEY (the library
 *   compares the plaintext, so it cannot be a hash).
 * - `op_records`: what the provider library stores (codes, refresh and opaque access tokens, device
 *   codes, grants, its sessions and interactions), one row each. Every identifier the library hands
 *   out is kept only as a keyed hash (`id_hash`, `grant_hash`, `uid_hash`, `user_code_hash`) and the
 *   payload is sealed, so a copy of the database signs no one in. `user_id` and `client_id` are in the
 *   clear for the user's list of apps, the admin view, deletion and sign-out; `session_id` links the
 *   library's browser session to the Portcullis session it is; `successor` holds a rotated refresh
 *   token's replacement (sealed) for the 10-second retry window.
 * - `op_logout_deliveries`: the durable queue of Back-Channel Logout notices (src/queue/durable.ts):
 *   one row per client to tell that a session ended, with the lease and outcome of the mail queue.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // A session signed in through the provider's pages names the app it was for (GET /auth/sessions).
  await db.schema.alterTable('sessions').addColumn('client_name', 'text').execute()
  await db.schema
    .createTable('op_clients')
    .addColumn('client_id', 'text', (c) => c.primaryKey())
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('secret', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute()

  await db.schema
    .createTable('op_records')
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('id_hash', 'text', (c) => c.notNull())
    .addColumn('grant_hash', 'text')
    .addColumn('uid_hash', 'text')
    .addColumn('user_code_hash', 'text')
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('client_id', 'text')
    .addColumn('session_id', 'text')
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('successor', 'text')
    // A provider session's clients and their `sid`s (JSON), for Back-Channel Logout when it ends; not secret.
    .addColumn('sids', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('last_used_at', 'bigint')
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('consumed_at', 'bigint')
    .addPrimaryKeyConstraint('op_records_pkey', ['model', 'id_hash'])
    .execute()
  await db.schema.createIndex('op_records_grant_idx').on('op_records').column('grant_hash').execute()
  await db.schema.createIndex('op_records_uid_idx').on('op_records').column('uid_hash').execute()
  await db.schema.createIndex('op_records_user_code_idx').on('op_records').column('user_code_hash').execute()
  await db.schema.createIndex('op_records_user_idx').on('op_records').columns(['user_id', 'model']).execute()
  await db.schema.createIndex('op_records_session_idx').on('op_records').column('session_id').execute()
  await db.schema.createIndex('op_records_expires_at_idx').on('op_records').column('expires_at').execute()
  // Removing a client removes everything it holds.
  await db.schema.createIndex('op_records_client_idx').on('op_records').column('client_id').execute()

  await db.schema
    .createTable('op_logout_deliveries')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('client_id', 'text', (c) => c.notNull())
    // The logout token's sub and sid; the token itself is signed at each attempt (it lives 120 s).
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('sid', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('lease_owner', 'text')
    .addColumn('lease_until', 'bigint')
    .addColumn('sent_at', 'bigint')
    .addColumn('failed_at', 'bigint')
    .addColumn('last_error', 'text')
    .execute()
  // As the mail queue's: what is due (claims and the queued gauge), and the closed records retention deletes.
  await db.schema.createIndex('op_logout_deliveries_due_idx').on('op_logout_deliveries').columns(['sent_at', 'failed_at', 'next_attempt_at']).execute()
  await db.schema.createIndex('op_logout_deliveries_failed_at_idx').on('op_logout_deliveries').column('failed_at').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['op_logout_deliveries', 'op_records', 'op_clients']) await db.schema.dropTable(table).execute()
  await db.schema.alterTable('sessions').dropColumn('client_name').execute()
}

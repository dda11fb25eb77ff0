import type { Kysely } from 'kysely'

/**
 * Sign-in with an identity provider (docs/oidc.md): the identities linked to accounts,
 * the flows in progress (state, nonce and PKCE verifier kept server-side, bound to one browser),
 * and the one-time login codes a callback hands to the application instead of tokens.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('user_identities')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    // The configured provider's name, and its `sub` for this person: together they name the identity.
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('subject', 'text', (c) => c.notNull())
    // The address the provider gave when the identity was linked (shown to the user; never used to sign in).
    .addColumn('email', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('last_used_at', 'bigint')
    .addUniqueConstraint('user_identities_provider_subject_key', ['provider', 'subject'])
    .execute()
  await db.schema.createIndex('user_identities_user_idx').on('user_identities').columns(['user_id', 'created_at']).execute()

  await db.schema
    .createTable('oidc_flows')
    // HMAC of the state parameter.
    .addColumn('state_hash', 'text', (c) => c.primaryKey())
    .addColumn('provider', 'text', (c) => c.notNull())
    // HMAC of the portcullis_oidc cookie of the browser that started the flow.
    .addColumn('browser_hash', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text', (c) => c.notNull())
    // The PKCE verifier, sealed under KEY_ENCRYPTION_KEY.
    .addColumn('code_verifier', 'text', (c) => c.notNull())
    .addColumn('redirect_to', 'text', (c) => c.notNull())
    // login, or link (then user_id is the signed-in user who asked).
    .addColumn('purpose', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('oidc_flows_expires_at_idx').on('oidc_flows').column('expires_at').execute()
  await db.schema.createIndex('oidc_flows_user_idx').on('oidc_flows').column('user_id').execute()

  await db.schema
    .createTable('oidc_login_codes')
    .addColumn('code_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('oidc_login_codes_expires_at_idx').on('oidc_login_codes').column('expires_at').execute()
  await db.schema.createIndex('oidc_login_codes_user_idx').on('oidc_login_codes').column('user_id').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['oidc_login_codes', 'oidc_flows', 'user_identities']) await db.schema.dropTable(table).execute()
}

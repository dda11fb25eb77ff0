import type { Kysely } from 'kysely'

/**
 * The one-time login code a sign-in that ends in the browser hands to the application (an identity
 * provider's callback, and next the e-mailed link) is one shared piece (src/auth/login-codes.ts), so
 * its table is no longer the identity-provider module's: `login_codes`, with `source` naming what
 * issued the code (`oidc:{provider}`, `email`). Codes live 60 seconds, so the old table's few rows
 * are not carried over: a sign-in under way during the upgrade is asked to start again.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('oidc_login_codes').execute()
  await db.schema
    .createTable('login_codes')
    // HMAC of the one-time code.
    .addColumn('code_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('source', 'text', (c) => c.notNull())
    // The account's credential_epoch when the sign-in chose the account.
    .addColumn('credential_epoch', 'integer', (c) => c.notNull())
    // The application's S256 challenge, or else the starting browser's cookie hash: the exchange's proof.
    .addColumn('code_challenge', 'text')
    .addColumn('browser_hash', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('login_codes_expires_at_idx').on('login_codes').column('expires_at').execute()
  await db.schema.createIndex('login_codes_user_idx').on('login_codes').column('user_id').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('login_codes').execute()
  await db.schema
    .createTable('oidc_login_codes')
    .addColumn('code_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .addColumn('credential_epoch', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('code_challenge', 'text')
    .addColumn('browser_hash', 'text')
    .execute()
  await db.schema.createIndex('oidc_login_codes_expires_at_idx').on('oidc_login_codes').column('expires_at').execute()
  await db.schema.createIndex('oidc_login_codes_user_idx').on('oidc_login_codes').column('user_id').execute()
}

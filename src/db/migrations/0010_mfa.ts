import type { Kysely } from 'kysely'

/**
 * Second factors (docs/mfa.md). One table of factors, whatever their type: a TOTP
 * factor holds its sealed secret and the last step it accepted; a passkey (a later migration)
 * adds its own columns. Recovery codes and mfa_tokens are stored only as keyed hashes.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('mfa_factors')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    // TOTP: the base32 secret sealed under KEY_ENCRYPTION_KEY; the replay guard.
    .addColumn('secret', 'text')
    .addColumn('last_step', 'bigint')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('confirmed_at', 'bigint')
    .addColumn('last_used_at', 'bigint')
    .execute()
  await db.schema.createIndex('mfa_factors_user_idx').on('mfa_factors').columns(['user_id', 'created_at']).execute()

  await db.schema
    .createTable('mfa_recovery_codes')
    .addColumn('code_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('mfa_recovery_codes_user_idx').on('mfa_recovery_codes').column('user_id').execute()

  // The second step of a login: single-use, five minutes, dead after five wrong codes.
  await db.schema
    .createTable('mfa_challenges')
    .addColumn('token_hash', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    // The first step's methods (`pwd`, or `fed` after a provider) and the login's transport.
    .addColumn('amr', 'text', (c) => c.notNull())
    .addColumn('transport', 'text', (c) => c.notNull())
    .addColumn('failures', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('mfa_challenges_user_idx').on('mfa_challenges').column('user_id').execute()
  await db.schema.createIndex('mfa_challenges_expires_at_idx').on('mfa_challenges').column('expires_at').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['mfa_challenges', 'mfa_recovery_codes', 'mfa_factors']) await db.schema.dropTable(table).execute()
}

import type { Kysely } from 'kysely'

/**
 * Passkeys (docs/mfa.md, Passkeys): one more factor type in mfa_factors, with the columns a WebAuthn
 * credential needs (none of them secret: the private key never leaves the authenticator), and the
 * server-made challenges of the ceremonies, stored only as keyed hashes.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // The credential id (base64url), as the authenticator names it; unique across all accounts.
  await db.schema.alterTable('mfa_factors').addColumn('credential_id', 'text').execute()
  // The COSE public key (base64url) and the last signature counter seen.
  await db.schema.alterTable('mfa_factors').addColumn('public_key', 'text').execute()
  await db.schema.alterTable('mfa_factors').addColumn('sign_count', 'bigint').execute()
  // What the authenticator said about itself: transports (space-separated), backup eligibility and state (0/1), AAGUID.
  await db.schema.alterTable('mfa_factors').addColumn('transports', 'text').execute()
  await db.schema.alterTable('mfa_factors').addColumn('backup_eligible', 'integer').execute()
  await db.schema.alterTable('mfa_factors').addColumn('backed_up', 'integer').execute()
  await db.schema.alterTable('mfa_factors').addColumn('aaguid', 'text').execute()
  await db.schema.createIndex('mfa_factors_credential_id_key').on('mfa_factors').column('credential_id').unique().execute()

  await db.schema
    .createTable('webauthn_challenges')
    .addColumn('id', 'text', (c) => c.primaryKey())
    // HMAC-SHA256 of the challenge the browser signs.
    .addColumn('challenge_hash', 'text', (c) => c.notNull().unique())
    // register, login, second_factor or step_up.
    .addColumn('purpose', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    // What the ceremony is bound to besides the user: the mfa_token's hash, or the session's id.
    .addColumn('binding', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('webauthn_challenges_user_idx').on('webauthn_challenges').column('user_id').execute()
  await db.schema.createIndex('webauthn_challenges_expires_at_idx').on('webauthn_challenges').column('expires_at').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('webauthn_challenges').execute()
  await db.schema.dropIndex('mfa_factors_credential_id_key').execute()
  for (const column of ['aaguid', 'backed_up', 'backup_eligible', 'transports', 'sign_count', 'public_key', 'credential_id']) {
    await db.schema.alterTable('mfa_factors').dropColumn(column).execute()
  }
}

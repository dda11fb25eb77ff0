import type { Kysely } from 'kysely'

/**
 * What binds a sign-in under way to the account's state and to whoever started it (docs/tokens.md;
 * docs/mfa.md, never a bypass; docs/oidc.md, the login-code binding):
 *
 * - `users.credential_epoch` counts the events that end every session of the account (password reset
 *   or change, logout-all, disable, an operator's revocation or MFA reset). A sign-in remembers the
 *   epoch it checked the credential under, and its session opens only if the epoch has not moved, so
 *   a login racing a reset cannot outlive it.
 * - `mfa_challenges` and `oidc_login_codes` keep the epoch their first step saw, for the same check.
 * - `oidc_flows.code_challenge` and `oidc_login_codes.code_challenge`: the RFC 7636 S256 challenge the
 *   application sent at start; the exchange must send its verifier. `oidc_login_codes.browser_hash`:
 *   for a flow started without one, the starting browser's cookie hash the exchange must present.
 * - `oidc_flows.session_id`: the session a link flow was started from; the link completes only while
 *   that session is live.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').addColumn('credential_epoch', 'integer', (c) => c.notNull().defaultTo(0)).execute()
  await db.schema.alterTable('mfa_challenges').addColumn('credential_epoch', 'integer', (c) => c.notNull().defaultTo(0)).execute()
  await db.schema.alterTable('oidc_login_codes').addColumn('credential_epoch', 'integer', (c) => c.notNull().defaultTo(0)).execute()
  await db.schema.alterTable('oidc_login_codes').addColumn('code_challenge', 'text').execute()
  await db.schema.alterTable('oidc_login_codes').addColumn('browser_hash', 'text').execute()
  await db.schema.alterTable('oidc_flows').addColumn('code_challenge', 'text').execute()
  await db.schema.alterTable('oidc_flows').addColumn('session_id', 'text').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('oidc_flows').dropColumn('session_id').execute()
  await db.schema.alterTable('oidc_flows').dropColumn('code_challenge').execute()
  await db.schema.alterTable('oidc_login_codes').dropColumn('browser_hash').execute()
  await db.schema.alterTable('oidc_login_codes').dropColumn('code_challenge').execute()
  await db.schema.alterTable('oidc_login_codes').dropColumn('credential_epoch').execute()
  await db.schema.alterTable('mfa_challenges').dropColumn('credential_epoch').execute()
  await db.schema.alterTable('users').dropColumn('credential_epoch').execute()
}

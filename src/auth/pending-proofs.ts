import { sql, type Expression, type Kysely, type SqlBool } from 'kysely'
import type { Database } from '../db/schema.ts'

type Executor = Kysely<Database>

/**
 * Every table that holds a pending proof: something mailed, shown or handed over that later opens a
 * session, changes the account or adds a way in (docs/SECURITY.md, "Pending proofs die with the
 * account's sessions"). Each row records the account's credential epoch when it was made and, when a
 * session asked for it, that session (`session: true`: the table has a `session_id` column).
 * test/security/pending-proofs.test.ts walks the database's tables and fails on a table shaped like a
 * proof that is not listed here, and on a listed one whose proofs survive logout-all, a reset or a
 * disable.
 */
export const PENDING_PROOFS = {
  /** Verification and reset links (src/auth/one-time-tokens.ts). */
  one_time_tokens: { session: false },
  /** mfa_tokens between a login's two steps (src/mfa/). */
  mfa_challenges: { session: false },
  /** Passkey ceremonies: registration and step-up asked for by a session, a second step by an mfa_token. */
  webauthn_challenges: { session: true },
  /** TOTP enrolments not yet confirmed (a confirmed factor is no longer pending; only its confirmation is judged). */
  mfa_factors: { session: true },
  /** Identity-provider flows; a link flow is a session's. */
  oidc_flows: { session: true },
  /** One-time login codes handed to an application (src/auth/login-codes.ts). */
  login_codes: { session: false },
  /** E-mailed sign-in codes and links (src/email/). */
  email_sign_ins: { session: false },
  /** Changes of address waiting for their link (src/profile/). */
  email_changes: { session: true },
  /** Invitations to an organisation, mailed to an address (src/authz/): judged against the account that had it when invited. */
  invitations: { session: false },
} as const satisfies Record<string, { session: boolean }>

export type ProofTable = keyof typeof PENDING_PROOFS

/**
 * The one judgement a pending proof passes at its point of use, as a condition on its row (put it in
 * the same statement that finds or spends the row, so nothing can end the account's sessions in
 * between): the account's credential epoch is still the one the proof was made under, and the
 * session that asked for it, if any, is still live. Every event that ends all of an account's
 * sessions moves the epoch (src/auth/sign-out.ts), so every proof of every kind dies with them by
 * construction, with no list of kinds to keep up to date. A row with no account yet (an e-mailed
 * sign-up, a provider login before its callback) has nothing to be judged against.
 */
export function proofStands(table: ProofTable, now: number): Expression<SqlBool> {
  const column = (name: string) => sql.ref(`${table}.${name}`)
  const epochHolds = sql<SqlBool>`(${column('user_id')} is null or exists (select 1 from users where users.id = ${column('user_id')} and users.credential_epoch = ${column('credential_epoch')}))`
  if (!PENDING_PROOFS[table].session) return epochHolds
  return sql<SqlBool>`(${epochHolds} and (${column('session_id')} is null or exists (select 1 from sessions where sessions.id = ${column('session_id')} and sessions.revoked_at is null and sessions.expires_at > ${now})))`
}

/** The account's credential epoch now, for a proof about to be made (-1 for an account that is gone: no epoch matches it, so the proof is dead). */
export async function credentialEpochOf(db: Executor, userId: string): Promise<number> {
  return (await db.selectFrom('users').select('credential_epoch').where('id', '=', userId).executeTakeFirst())?.credential_epoch ?? -1
}

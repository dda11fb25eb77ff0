import type { Kysely } from 'kysely'
import type { Database } from '../db/schema.ts'
import { users } from '../db/repositories.ts'

type Executor = Kysely<Database>

/**
 * Ends every proof of the account on its way to a session, in the caller's transaction: each module
 * that keeps some has one (mfa_tokens, unconfirmed enrolments and WebAuthn challenges in src/mfa/,
 * login codes and provider flows in src/oidc/).
 */
export type EndPendingProofs = (trx: Executor, userId: string) => Promise<void>

/**
 * What every event that ends all of an account's sessions also does (API.md, "Pending proofs die
 * with the account's sessions", and Tokens): logout-all, a password reset or change, a disable, an
 * operator's revocation or MFA reset, deletion. In the caller's transaction, before it revokes the
 * sessions: the credential epoch moves, so a sign-in already past its credential check opens no
 * session (src/auth/sessions.ts), and each module's pending proofs end.
 */
export class AccountSignOut {
  constructor(private readonly pending: EndPendingProofs[]) {}

  async endAll(trx: Executor, userId: string): Promise<void> {
    await users.bumpCredentialEpoch(trx, userId)
    for (const end of this.pending) await end(trx, userId)
  }
}

import type { Kysely } from 'kysely'
import type { Database } from '../db/schema.ts'
import type { Clock } from '../clock.ts'
import { users } from '../db/repositories.ts'

type Executor = Kysely<Database>

/**
 * Ends every proof of the account on its way to a session, in the caller's transaction: each module
 * that keeps some has one (mfa_tokens, unconfirmed enrolments and WebAuthn challenges in src/mfa/,
 * login codes and provider flows in src/oidc/).
 */
export type EndPendingProofs = (trx: Executor, userId: string, now: number) => Promise<void>

/** Ends what hangs on some sessions of an account (the OpenID provider's sessions and their clients' logout notices). */
export type EndSessions = (trx: Executor, userId: string, sessionIds: string[], now: number) => Promise<void>

/**
 * What every event that ends all of an account's sessions also does (docs/SECURITY.md: pending proofs die
 * with the account's sessions; docs/tokens.md): logout-all, a password reset or change, a disable, an
 * operator's revocation or MFA reset, deletion. In the caller's transaction, before it revokes the
 * sessions: the credential epoch moves, so a sign-in already past its credential check opens no
 * session (src/auth/sessions.ts), and each module's pending proofs end.
 */
export class AccountSignOut {
  constructor(
    private readonly clock: Clock,
    private readonly pending: EndPendingProofs[],
    private readonly sessionEnds: EndSessions[] = [],
  ) {}

  async endAll(trx: Executor, userId: string): Promise<void> {
    await users.bumpCredentialEpoch(trx, userId)
    const now = this.clock.now()
    for (const end of this.pending) await end(trx, userId, now)
  }

  /** Some sessions of the account end (a logout, one revoked session), not the account's credentials. */
  async endSessions(trx: Executor, userId: string, sessionIds: string[]): Promise<void> {
    const now = this.clock.now()
    for (const end of this.sessionEnds) await end(trx, userId, sessionIds, now)
  }
}

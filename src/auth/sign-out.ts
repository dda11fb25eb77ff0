import type { Kysely } from 'kysely'
import type { Database } from '../db/schema.ts'
import type { Clock } from '../clock.ts'
import { users } from '../db/repositories.ts'

type Executor = Kysely<Database>

/** Ends what hangs on all of an account's sessions besides its pending proofs: the OpenID provider's grants. */
export type EndGrants = (trx: Executor, userId: string, now: number) => Promise<void>

/** Ends what hangs on some sessions of an account (the OpenID provider's sessions and their clients' logout notices). */
export type EndSessions = (trx: Executor, userId: string, sessionIds: string[], now: number) => Promise<void>

/**
 * What every event that ends all of an account's sessions also does (docs/SECURITY.md: pending proofs die
 * with the account's sessions; docs/tokens.md): logout-all, a password reset or change, a disable, an
 * operator's revocation or MFA reset, deletion. In the caller's transaction, before it revokes the
 * sessions, the credential epoch moves. That one write ends everything pending: a sign-in already
 * past its credential check opens no session (src/auth/sessions.ts), and every pending proof of any
 * kind (links, codes, mfa_tokens, enrolments, ceremonies, changes of address) is judged against the
 * epoch where it is used (src/auth/pending-proofs.ts), so a new kind of proof needs nothing here.
 */
export class AccountSignOut {
  constructor(
    private readonly clock: Clock,
    private readonly grantEnds: EndGrants[],
    private readonly sessionEnds: EndSessions[] = [],
  ) {}

  async endAll(trx: Executor, userId: string): Promise<void> {
    await users.bumpCredentialEpoch(trx, userId)
    const now = this.clock.now()
    for (const end of this.grantEnds) await end(trx, userId, now)
  }

  /** Some sessions of the account end (a logout, one revoked session), not the account's credentials. */
  async endSessions(trx: Executor, userId: string, sessionIds: string[]): Promise<void> {
    const now = this.clock.now()
    for (const end of this.sessionEnds) await end(trx, userId, sessionIds, now)
  }
}

import { randomUUID } from 'node:crypto'
import { recordEvent, type AuditType, type RequestContext } from '../audit/events.ts'
import type { ClaimsSource } from '../authz/claims.ts'
import type { Clock } from '../clock.ts'
import type { GroupCommit } from '../db/group-commit.ts'
import { sessions, users, type SessionAuthState, type SessionRow, type UserRow } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import { ACCESS_TTL_SECONDS, type Assurance, type TokenService } from './tokens.ts'

/** RFC 8176 authentication method references a session can carry. */
export type AuthMethod = 'pwd' | 'otp' | 'hwk' | 'user' | 'fed' | 'mfa'

/** How a sign-in was proven: its methods and the assurance level they reach (NIST SP 800-63B). */
export interface SignIn {
  amr: AuthMethod[]
  acr: 'aal1' | 'aal2'
}

/** A password alone. */
export const PASSWORD_ONLY: SignIn = { amr: ['pwd'], acr: 'aal1' }

/** The login body (README.md, Endpoints: POST /auth/login). */
export interface LoginBody {
  access_token: string
  refresh_token: string
  token_type: 'bearer'
  expires_in: number
}

/** What the tokens of a stored session assert: the session holds it, refresh carries it. */
export function assuranceOf(row: Pick<SessionRow, 'amr' | 'acr' | 'auth_time' | 'created_at'>): Assurance {
  return { amr: row.amr.split(' ').filter(Boolean), acr: row.acr, authTime: row.auth_time ?? row.created_at }
}

/**
 * The account a sign-in is for, as its credential check saw it: the session opens only if the
 * account's credential_epoch is still this one (a reset, a password change, logout-all, a disable or
 * an operator's revocation since then moved it), so "every session is revoked" also holds for the
 * sessions being born while it happens (docs/SECURITY.md).
 */
export interface SignInSubject {
  id: string
  credential_epoch: number
}

export interface OpenOptions {
  audit?: { type: AuditType; reason?: string }
  /**
   * Runs first in the session's transaction (a second step uses up its code and its mfa_token
   * there); if it throws, no session is created and the error is the caller's.
   */
  alsoInTransaction?: (trx: Executor) => Promise<void>
  /** What a sign-in whose epoch has moved answers (INVALID_CREDENTIALS unless the caller says). */
  superseded?: () => AppError
  /** The organisation the session starts in (the login's `organization_id`): 403 FORBIDDEN for a non-member. */
  organizationId?: string | null
}

type Executor = Parameters<Parameters<GroupCommit['run']>[0]>[0]

export interface SessionOpenerDeps {
  tokens: TokenService
  clock: Clock
  /** Joins small writes into shared commits (src/db/group-commit.ts). */
  commits: GroupCommit
  /** REQUIRE_EMAIL_VERIFICATION: an unverified address gets no session. */
  requireEmailVerification: boolean
  /** What the access tokens claim the user may do (src/authz/claims.ts). */
  claims: ClaimsSource
}

/**
 * Where every way in ends (a password, a second factor, a passkey, an identity provider): the one
 * place a session is created, with the methods that proved it, and its two tokens signed. Callers
 * have already decided the user may have a session; nothing here checks a credential.
 */
export class SessionOpener {
  constructor(private readonly deps: SessionOpenerDeps) {}

  /**
   * The account checks every way in makes after its credential (docs/SECURITY.md, "Login and enumeration"): a disabled
   * account, then an unverified address when verification is required, gets no session.
   */
  assertMayOpen(user: Pick<UserRow, 'status' | 'email_verified_at'>): void {
    if (user.status === 'disabled') throw new AppError('ACCOUNT_DISABLED')
    if (this.deps.requireEmailVerification && user.email_verified_at === null) throw new AppError('EMAIL_NOT_VERIFIED')
  }

  /**
   * A new access token for a live session, as read just now (`state`): what the session asserts,
   * and the user's claims in its active organisation, or in `switchTo` when given (null: none).
   * Answers the organisation the token is for; the caller keeps it in the session when it changed.
   * A session whose remembered organisation the user has left gets a token without one.
   */
  async reissue(userId: string, sessionId: string, state: SessionAuthState, switchTo?: string | null) {
    const asked = switchTo === undefined ? state.organization_id : switchTo
    const { authz, organizationId } = await this.deps.claims.forToken(userId, asked, state.claims_version)
    if (switchTo != null && organizationId === null) throw new AppError('FORBIDDEN', { message: 'You are not a member of this organisation.' })
    const access = await this.deps.tokens.signAccess(userId, sessionId, assuranceOf(state), authz)
    return { access, organizationId }
  }

  /** Opens a session for `user` if its credential epoch has not moved since the caller's check. */
  async open(user: SignInSubject, signIn: SignIn, context: RequestContext, options: OpenOptions = {}): Promise<LoginBody> {
    const { audit = { type: 'login.succeeded' }, alsoInTransaction, superseded = () => new AppError('INVALID_CREDENTIALS') } = options
    const userId = user.id
    const now = this.deps.clock.now()
    const sessionId = randomUUID()
    const assurance: Assurance = { amr: signIn.amr, acr: signIn.acr, authTime: now }
    const asked = options.organizationId ?? null
    const { authz, organizationId } = await this.deps.claims.forToken(userId, asked)
    if (asked !== null && organizationId === null) throw new AppError('FORBIDDEN', { message: 'You are not a member of this organisation.' })
    const [access, refresh] = await Promise.all([
      this.deps.tokens.signAccess(userId, sessionId, assurance, authz),
      this.deps.tokens.signRefresh(userId, sessionId),
    ])
    // Committed (with others under load) before the tokens are handed out.
    await this.deps.commits.run(async (trx) => {
      await alsoInTransaction?.(trx)
      // First the account's row (its lock, on PostgreSQL): a reset committed meanwhile moved the
      // epoch and this sign-in fails; one that commits after this waits for it and then revokes
      // the session made here with the others.
      if (!(await users.recordLogin(trx, user, now))) throw superseded()
      await sessions.insert(trx, {
        id: sessionId,
        user_id: userId,
        created_at: now,
        last_used_at: now,
        expires_at: refresh.expiresAt,
        revoked_at: null,
        user_agent: context.userAgent?.slice(0, 512) ?? null,
        ip: context.ip,
        amr: signIn.amr.join(' '),
        acr: signIn.acr,
        auth_time: now,
        client_name: null,
        organization_id: organizationId,
      })
      await recordEvent(trx, this.deps.clock, { type: audit.type, userId, reason: audit.reason ?? null, context })
    })
    return { access_token: access.token, refresh_token: refresh.token, token_type: 'bearer', expires_in: ACCESS_TTL_SECONDS }
  }
}

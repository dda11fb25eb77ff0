import { confirmPassword } from '../auth/confirm-password.ts'
import type { PasswordCheck } from '../auth/password-check.ts'
import type { Background } from '../background.ts'
import type { Limits } from '../limits/limits.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { oneTimeTokens, sessions, users } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import { emailProblem, normaliseEmail, throwIfProblems } from '../auth/input.ts'
import { passwordProblems, type PasswordHasher } from '../auth/passwords.ts'
import { publishChanges, sessionRevocations, type ChangeFeed } from '../changes/feed.ts'
import { hashOneTimeToken, issueOneTimeToken, RESET_TTL_MS } from '../auth/one-time-tokens.ts'
import type { Principal } from '../auth/service.ts'
import type { AccountSignOut } from '../auth/sign-out.ts'
import type { TokenService } from '../auth/tokens.ts'
import { passwordResetMail, type MailBrand } from '../mail/index.ts'
import type { MailQueue } from '../mail/queue.ts'
import { isUuid } from '../text.ts'
import { recordEvent, type AuditType, type RequestContext } from '../audit/events.ts'
import type { AccountEvents, WebhookEventType } from '../webhooks/events.ts'


export interface LifecycleDeps {
  db: Db
  clock: Clock
  hasher: PasswordHasher
  /** Judges a password against any stored credential (src/auth/password-check.ts). */
  passwords: PasswordCheck
  tokens: TokenService
  feed: ChangeFeed
  mailQueue: MailQueue
  background: Background
  limits: Limits
  resetPasswordUrl: string
  brand: MailBrand
  /** Ends the sign-ins under way and the pending proofs wherever sessions all end. */
  signOut: AccountSignOut
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
}

export interface SessionView {
  id: string
  created_at: string
  last_used_at: string
  user_agent: string | null
  current: boolean
  client: string | null
}

/** Logout, sessions, and password reset and change: everything after login. */
export class LifecycleService {
  constructor(private readonly deps: LifecycleDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  /**
   * Revokes sessions and publishes them to the revocation feed in one transaction, records the
   * event, and applies the change to this instance at once (others follow within the gate's bound).
   * When every session of the account ends (all, or all but the caller's), so do the sign-ins under
   * way and the pending proofs (src/auth/sign-out.ts). `audit.event` is the webhook event to write
   * with it, if any.
   */
  private async revokeSessions(
    userId: string,
    which: { only?: string; except?: string },
    audit: { type: AuditType; context: RequestContext; event?: { type: WebhookEventType; data: Record<string, unknown> } },
    alsoInTransaction?: (trx: Db['kysely']) => Promise<void>,
  ): Promise<string[]> {
    const now = this.deps.clock.now()
    const revoked = await this.db.transaction().execute(async (trx) => {
      await alsoInTransaction?.(trx)
      if (which.only === undefined) await this.deps.signOut.endAll(trx, userId)
      const ids = await sessions.revoke(trx, userId, now, which)
      if (which.only !== undefined) await this.deps.signOut.endSessions(trx, userId, ids)
      await publishChanges(trx, sessionRevocations(userId, ids))
      await recordEvent(trx, this.deps.clock, { type: audit.type, userId, context: audit.context })
      if (audit.event) {
        const user = await users.findById(trx, userId)
        if (user) await this.deps.events.emit(trx, audit.event.type, user, audit.event.data)
      }
      return ids
    })
    this.deps.feed.applyLocally(sessionRevocations(userId, revoked))
    return revoked
  }

  /**
   * Ends every session of the account but `keep`, as a change of credentials does, with the
   * caller's writes in the same transaction (a change of address, src/profile/). Returns the ids.
   */
  async endOtherSessions(userId: string, keep: string, audit: { type: AuditType; context: RequestContext }, alsoInTransaction: (trx: Db['kysely']) => Promise<void>): Promise<string[]> {
    return this.revokeSessions(userId, { except: keep }, audit, alsoInTransaction)
  }

  /**
   * Accepts any refresh token this service signed, even expired or already revoked (logout must
   * always be possible and is idempotent); a token it did not sign is refused.
   */
  async logout(refreshToken: string, context: RequestContext): Promise<void> {
    const result = await this.deps.tokens.verify(refreshToken, 'refresh')
    if (result.status === 'invalid') throw new AppError('INVALID_REFRESH_TOKEN')
    await this.revokeSessions(result.claims.sub, { only: result.claims.sid }, { type: 'logout', context })
  }

  /** Ends one session of a user, as a logout (the provider's end-session, src/provider/). */
  async endSession(userId: string, sessionId: string, context: RequestContext): Promise<void> {
    await this.revokeSessions(userId, { only: sessionId }, { type: 'logout', context })
  }

  async logoutAll(principal: Principal, context: RequestContext): Promise<number> {
    return (await this.revokeSessions(principal.userId, {}, { type: 'logout.all', context, event: { type: 'session.revoked_all', data: { by: 'user' } } })).length
  }

  async listSessions(principal: Principal): Promise<SessionView[]> {
    const rows = await sessions.listLive(this.db, principal.userId, this.deps.clock.now())
    return rows.map((row) => ({
      id: row.id,
      created_at: new Date(row.created_at).toISOString(),
      last_used_at: new Date(row.last_used_at).toISOString(),
      user_agent: row.user_agent,
      current: row.id === principal.sessionId,
      client: row.client_name,
    }))
  }

  /** Only the caller's own sessions; anyone else's, or none at all, is NOT_FOUND. Idempotent. */
  async revokeSession(principal: Principal, sessionId: string, context: RequestContext): Promise<void> {
    if (!isUuid(sessionId)) throw new AppError('NOT_FOUND')
    const session = await sessions.findOwned(this.db, principal.userId, sessionId)
    if (!session) throw new AppError('NOT_FOUND')
    await this.revokeSessions(principal.userId, { only: sessionId }, { type: 'session.revoked', context })
  }

  /**
   * The answer is the same whatever the address, and all the work (lookup, token, mail) happens
   * after it, so neither the body nor the timing tells whether an account exists.
   */
  forgotPassword(rawEmail: string, context: RequestContext): void {
    const email = normaliseEmail(rawEmail)
    const issue = emailProblem(email)
    if (issue) throwIfProblems([{ field: 'email', message: issue }])
    this.deps.background.run('password reset mail', async () => {
      if (!(await this.deps.limits.mailAllowed(email))) return
      const user = await users.findByEmail(this.db, email)
      if (!user) return
      const now = this.deps.clock.now()
      await this.db.transaction().execute(async (trx) => {
        await recordEvent(trx, this.deps.clock, { type: 'password.reset_requested', userId: user.id, context })
        const token = await issueOneTimeToken(trx, user.id, 'reset_password', RESET_TTL_MS, now)
        const link = this.deps.resetPasswordUrl.replace('{token}', encodeURIComponent(token))
        await this.deps.mailQueue.enqueue(trx, { userId: user.id, kind: 'password_reset', message: passwordResetMail(this.deps.brand, email, link, token) })
      })
      this.deps.mailQueue.kick()
    })
  }

  /**
   * The address a live reset token belongs to, or null; the token is not used up (a GET of the
   * mailed link must not burn it). The holder of the token already knows the address.
   */
  async resetTokenOwner(token: string): Promise<string | null> {
    return (await this.resetTokenUser(hashOneTimeToken(token)))?.email ?? null
  }

  private async resetTokenUser(tokenHash: string) {
    const userId = await oneTimeTokens.findLive(this.db, tokenHash, 'reset_password', this.deps.clock.now())
    return userId ? users.findById(this.db, userId) : null
  }

  /**
   * Sets a new password with a mailed token and revokes every session of the user. The token is
   * only used up once the new password has passed the policy, so a rejected password does not
   * burn the link. Following the link also proves the address, so it counts as verification.
   */
  async resetPassword(token: string, password: string, context: RequestContext): Promise<void> {
    const tokenHash = hashOneTimeToken(token)
    const user = await this.resetTokenUser(tokenHash)
    if (!user) throw new AppError('INVALID_RESET_TOKEN')
    throwIfProblems(passwordProblems(password, user.email))
    const hash = await this.deps.hasher.hash(password)
    await this.revokeSessions(user.id, {}, { type: 'password.reset', context, event: { type: 'user.password_changed', data: { by: 'reset' } } }, async (trx) => {
      const now = this.deps.clock.now()
      // Consumed in the same transaction: two racing resets with one token cannot both succeed.
      if (!(await oneTimeTokens.consume(trx, tokenHash, 'reset_password', now))) throw new AppError('INVALID_RESET_TOKEN')
      await users.setPasswordHash(trx, user.id, hash, now)
      await users.markVerified(trx, user.id, now)
      await oneTimeTokens.retireAll(trx, user.id, 'reset_password', now)
    })
  }

  /**
   * Needs the current password, checked like a login (the same per-account delay, a wrong one an
   * audited failed login), so a stolen access token is not a way to guess it. Keeps the caller's
   * session, revokes every other one and ends the outstanding reset links.
   */
  async changePassword(principal: Principal, currentPassword: string, newPassword: string, context: RequestContext): Promise<number> {
    const user = await users.findById(this.db, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    await confirmPassword(this.deps, user, currentPassword, 'change_password', context)
    throwIfProblems(passwordProblems(newPassword, user.email, 'new_password'))
    const hash = await this.deps.hasher.hash(newPassword)
    const revoked = await this.revokeSessions(principal.userId, { except: principal.sessionId }, { type: 'password.changed', context, event: { type: 'user.password_changed', data: { by: 'change' } } }, async (trx) => {
      const now = this.deps.clock.now()
      await users.setPasswordHash(trx, user.id, hash, now)
      // A reset link mailed before the change would undo it.
      await oneTimeTokens.retireAll(trx, user.id, 'reset_password', now)
    })
    return revoked.length
  }
}

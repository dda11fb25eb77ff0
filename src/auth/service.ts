import { randomUUID } from 'node:crypto'
import type { PasswordCheck } from './password-check.ts'
import type { Clock } from '../clock.ts'
import type { GroupCommit } from '../db/group-commit.ts'
import { isUniqueViolation, type Db } from '../db/index.ts'
import { oneTimeTokens, sessions, users, type UserRow } from '../db/repositories.ts'
import { metadataView } from '../authz/roles.ts'
import { AppError, type ErrorDetail } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { AccountEvents } from '../webhooks/events.ts'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import { OncePerWindow } from '../once-per-window.ts'
import type { Background } from '../background.ts'
import { verificationMail, type MailBrand } from '../mail/index.ts'
import type { MailQueue } from '../mail/queue.ts'
import type { ClaimedAttempt, Limits } from '../limits/limits.ts'
import type { AccountState, SessionGate } from './revocation.ts'
import { emailProblem, normaliseEmail, normaliseFullName, throwIfProblems } from './input.ts'
import { hashOneTimeToken, issueOneTimeToken, VERIFICATION_TTL_MS } from './one-time-tokens.ts'
import { NO_PASSWORD, passwordProblems, type PasswordHasher } from './passwords.ts'
import { assuranceOf, PASSWORD_ONLY, type SessionOpener, type SignIn, type SignInSubject } from './sessions.ts'
import { ACCESS_TTL_SECONDS, type TokenClaims, type TokenService } from './tokens.ts'

export interface Principal {
  userId: string
  sessionId: string
  /**
   * What an OpenID provider access token allows (src/provider/resource.ts), on the resource routes
   * only; absent for Portcullis's own tokens, which allow everything their user may do.
   */
  scopes?: ReadonlySet<string>
  /** The token's active organisation and the caller's permissions in it (src/authz/), when it has one. */
  organization?: { id: string; permissions: readonly string[] }
  /** The caller's global permissions, as the token claims them. */
  permissions?: readonly string[]
}

export interface AuthServiceDeps {
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
  db: Db
  clock: Clock
  hasher: PasswordHasher
  /** Judges a password against any stored credential (src/auth/password-check.ts). */
  passwords: PasswordCheck
  tokens: TokenService
  mailQueue: MailQueue
  background: Background
  gate: SessionGate
  limits: Limits
  logger: Logger
  /** Joins small writes into shared commits (src/db/group-commit.ts). */
  commits: GroupCommit
  /** Opens the session every successful sign-in ends with. */
  sessions: SessionOpener
  /** The one seam to second factors (src/mfa/): after the password and the account checks. */
  secondFactor: SecondFactorSeam
  requireEmailVerification: boolean
  verifyEmailUrl: string
  brand: MailBrand
}

/** What login asks of the second-factor module, and nothing more. */
export interface SecondFactorSeam {
  /** The methods the account can use, or null when it has no second factor. */
  requiredMethods(userId: string): Promise<string[] | null>
  /** Starts the second step; returns the MFA_REQUIRED error (with its mfa_token) to answer with. */
  challenge(user: SignInSubject, methods: string[], first: SignIn, transport: 'body' | 'cookie', context: RequestContext): Promise<AppError>
}

/** A new, active account. */
function newUser(input: { email: string; fullName: string; passwordHash: string; verifiedAt: number | null }, now: number): UserRow {
  return {
    id: randomUUID(),
    email: input.email,
    full_name: input.fullName,
    password_hash: input.passwordHash,
    email_verified_at: input.verifiedAt,
    status: 'active',
    disabled_reason: null,
    created_at: now,
    updated_at: now,
    last_login_at: null,
    credential_epoch: 0,
    app_metadata: null,
    user_metadata: null,
    claims_version: 0,
  }
}

export class AuthService {
  /**
   * A throttled address's refusals are audited once a minute on each instance, not once each: a
   * burst of them is cheap to send and answered at once, and a row apiece (with its lookup) made
   * the database the flood's bottleneck, every other request waiting behind the queue of writes.
   */
  private readonly throttleAudit = new OncePerWindow(60_000)

  constructor(private readonly deps: AuthServiceDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  async register(input: { email: string; password: string; full_name: string }, context: RequestContext) {
    const email = normaliseEmail(input.email)
    const fullName = normaliseFullName(input.full_name)
    const details: ErrorDetail[] = []
    const emailIssue = emailProblem(email)
    if (emailIssue) details.push({ field: 'email', message: emailIssue })
    if (fullName.problem) details.push({ field: 'full_name', message: fullName.problem })
    details.push(...passwordProblems(input.password, email))
    throwIfProblems(details)

    // Registration says EMAIL_EXISTS by design (README.md, Endpoints), so checking first leaks
    // nothing new and spares a hash; the unique index below is what actually guarantees it.
    if (await users.findByEmail(this.db, email)) throw new AppError('EMAIL_EXISTS')

    const now = this.deps.clock.now()
    const row = newUser({ email, fullName: fullName.value, passwordHash: await this.deps.hasher.hash(input.password), verifiedAt: null }, now)
    try {
      await this.db.transaction().execute(async (trx) => {
        await users.insert(trx, row)
        if (this.deps.requireEmailVerification) await this.queueVerification(trx, row.id, email, now)
        await recordEvent(trx, this.deps.clock, { type: 'account.registered', userId: row.id, context })
        await this.deps.events.emit(trx, 'user.created', row, { full_name: row.full_name, email_verified: false, method: 'password' })
      })
    } catch (error) {
      if (isUniqueViolation(error)) throw new AppError('EMAIL_EXISTS')
      throw error
    }
    // The mail was committed with the account; the queue sends it, here or on another instance.
    if (this.deps.requireEmailVerification) this.deps.mailQueue.kick()
    return { user_id: row.id, email, verification_required: this.deps.requireEmailVerification }
  }

  /** A fresh verification token and the mail that carries it, in the caller's transaction. */
  private async queueVerification(trx: Db['kysely'], userId: string, email: string, now: number): Promise<void> {
    const token = await issueOneTimeToken(trx, userId, 'verify_email', VERIFICATION_TTL_MS, now)
    const link = this.deps.verifyEmailUrl.replace('{token}', encodeURIComponent(token))
    await this.deps.mailQueue.enqueue(trx, { userId, kind: 'verification', message: verificationMail(this.deps.brand, email, link, token) })
  }

  async verifyEmail(token: string, context: RequestContext): Promise<{ email: string; verified: true }> {
    const now = this.deps.clock.now()
    const email = await this.db.transaction().execute(async (trx) => {
      const userId = await oneTimeTokens.consume(trx, hashOneTimeToken(token), 'verify_email', now)
      if (!userId) return null
      const newly = await users.markVerified(trx, userId, now)
      await recordEvent(trx, this.deps.clock, { type: 'email.verified', userId, context })
      const user = await users.findById(trx, userId)
      if (newly && user) await this.deps.events.emit(trx, 'user.verified', user)
      return user?.email ?? null
    })
    if (!email) throw new AppError('INVALID_VERIFICATION_TOKEN')
    return { email, verified: true }
  }

  /**
   * Whether a verification token would be accepted now, without using it up: the page behind the
   * mailed link is fetched by mail scanners and link previews, so only a POST may consume it.
   */
  async verificationTokenIsLive(token: string): Promise<boolean> {
    return (await oneTimeTokens.findLive(this.db, hashOneTimeToken(token), 'verify_email', this.deps.clock.now())) !== null
  }

  /**
   * Always ends the same way for the caller: the answer must not tell whether the address has an
   * account or whether it is verified. The mail itself goes out in the background.
   */
  async resendVerification(rawEmail: string): Promise<void> {
    const email = normaliseEmail(rawEmail)
    const issue = emailProblem(email)
    if (issue) throwIfProblems([{ field: 'email', message: issue }])
    // Sent also when verification is not required for signing in: adding a second factor or
    // linking a provider still needs a verified address (docs/mfa.md, docs/oidc.md), and this is how to get one.
    // All of the lookup happens after the answer: its timing then cannot depend on the address.
    this.deps.background.run('resend verification', () => this.resendNow(email))
  }

  private async resendNow(email: string): Promise<void> {
    // Counted for every address, known or not, so the limit itself reveals nothing.
    if (!(await this.deps.limits.mailAllowed(email))) return
    const user = await users.findByEmail(this.db, email)
    if (!user || user.email_verified_at !== null || user.status !== 'active') return
    const now = this.deps.clock.now()
    await this.db.transaction().execute((trx) => this.queueVerification(trx, user.id, email, now))
    this.deps.mailQueue.kick()
  }

  /**
   * An account made by an identity provider's sign-in (docs/oidc.md), or by the first
   * e-mailed sign-in of an address (`reason` email_sign_in): the proven address, verified here too,
   * and no password (forgot-password can give it one).
   * `alsoInTransaction` links the identity in the same transaction. EMAIL_EXISTS if the address
   * was taken meanwhile.
   */
  async registerFederated(input: { email: string; fullName: string }, context: RequestContext, alsoInTransaction: (trx: Db['kysely'], user: UserRow) => Promise<void>, reason = 'identity_provider'): Promise<UserRow> {
    const email = normaliseEmail(input.email)
    if (emailProblem(email)) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'email', message: emailProblem(email)! }] })
    const fullName = normaliseFullName(input.fullName)
    const now = this.deps.clock.now()
    // A name the provider did not give (or one this service would refuse) becomes the address's local part.
    const name = fullName.problem || !fullName.value ? email.slice(0, email.indexOf('@')) : fullName.value
    const row = newUser({ email, fullName: name, passwordHash: NO_PASSWORD, verifiedAt: now }, now)
    try {
      await this.db.transaction().execute(async (trx) => {
        await users.insert(trx, row)
        await recordEvent(trx, this.deps.clock, { type: 'account.registered', userId: row.id, reason, context })
        await this.deps.events.emit(trx, 'user.created', row, { full_name: row.full_name, email_verified: true, method: reason })
        await alsoInTransaction(trx, row)
      })
    } catch (error) {
      if (isUniqueViolation(error)) throw new AppError('EMAIL_EXISTS')
      throw error
    }
    return row
  }

  async login(input: { email: string; password: string; organization_id?: string | null | undefined }, context: RequestContext, transport: 'body' | 'cookie' = 'body') {
    const email = normaliseEmail(input.email)
    // Counted as a failure before the password is judged (a burst counts one by one); it stays
    // counted only if the password is judged wrong. Leaving here any other way takes it back: the
    // database or the hashing refusing before the verdict (503: an outage never throttles anyone),
    // the right password of an account with a second factor (neither failure nor success); a
    // completed login has cleared the count anyway.
    await using attempt = await this.claimAttempt(email, context)
    const user = emailProblem(email) ? null : await users.findByEmail(this.db, email)

    // Password first, whatever the account's state: a wrong password must look exactly like an
    // unknown address (same body, same work), so login never reveals which addresses exist.
    if (!user) {
      await this.deps.hasher.verifyDummy(input.password)
      attempt.judgedWrong()
      await recordEvent(this.db, this.deps.clock, { type: 'login.failed', reason: 'unknown_email', context })
      throw new AppError('INVALID_CREDENTIALS')
    }
    if (!(await this.deps.passwords.matches(user, input.password, context))) {
      attempt.judgedWrong()
      await recordEvent(this.db, this.deps.clock, { type: 'login.failed', userId: user.id, reason: 'wrong_password', context })
      throw new AppError('INVALID_CREDENTIALS')
    }
    const secondFactor = await this.deps.secondFactor.requiredMethods(user.id)
    // With a second factor, the right password is not yet a success for the progressive delay
    // (only a completed login resets it, src/mfa/service.ts), nor a failure: its attempt is taken back.
    if (secondFactor) await this.deps.limits.attemptWasRight(attempt)
    else await this.deps.limits.loginSucceeded(email)
    // Only the owner of the password learns the account's state.
    try {
      this.deps.sessions.assertMayOpen(user)
    } catch (error) {
      const reason = (error as AppError).code === 'ACCOUNT_DISABLED' ? 'account_disabled' : 'email_not_verified'
      await recordEvent(this.db, this.deps.clock, { type: 'login.failed', userId: user.id, reason, context })
      throw error
    }

    // Last, after the account's state (docs/mfa.md): never a token without the second factor.
    // The session opens only if no reset or password change committed since the hash was read.
    // With a second factor the organisation is chosen at a refresh after the second step (docs/authorization.md).
    if (secondFactor) throw await this.deps.secondFactor.challenge(user, secondFactor, PASSWORD_ONLY, transport, context)
    return this.deps.sessions.open(user, PASSWORD_ONLY, context, { organizationId: input.organization_id ?? null })
  }

  /**
   * Claims the login's attempt on the account's delay (src/limits/limits.ts). Throttled before any
   * work: the answer (and its cost) is the same for every address; the refusal is audited at most
   * once a minute per address.
   */
  private async claimAttempt(email: string, context: RequestContext): Promise<ClaimedAttempt> {
    try {
      return await this.deps.limits.claimLoginAttempt(email)
    } catch (error) {
      if (this.throttleAudit.first(email, this.deps.clock.now())) {
        this.deps.background.run('throttle audit', async () => {
          const throttled = await users.findByEmail(this.db, email)
          await recordEvent(this.db, this.deps.clock, { type: 'login.throttled', userId: throttled?.id ?? null, reason: 'account_delay', context })
        })
      }
      throw error
    }
  }

  /** Whether a refresh token is one this service signed, of a session that is neither revoked nor expired. */
  async refreshTokenIsLive(refreshToken: string): Promise<boolean> {
    const result = await this.deps.tokens.verify(refreshToken, 'refresh')
    if (result.status !== 'valid') return false
    const state = await sessions.findAuthState(this.db, result.claims.sid)
    return state !== null && state.user_id === result.claims.sub && state.revoked_at === null && state.expires_at > this.deps.clock.now()
  }

  /**
   * `organizationId`: the organisation to switch the session to (null: none), remembered for its
   * later refreshes; absent, the session's own (docs/authorization.md, "The active organisation").
   */
  async refresh(refreshToken: string, context: RequestContext, organizationId?: string | null) {
    const result = await this.deps.tokens.verify(refreshToken, 'refresh')
    // Expired, forged, malformed or an access token: all the same to the client.
    if (result.status !== 'valid') throw new AppError('INVALID_REFRESH_TOKEN')
    const { sub, sid } = result.claims
    const now = this.deps.clock.now()
    const state = await sessions.findAuthState(this.db, sid)
    if (!state || state.user_id !== sub || state.revoked_at !== null || state.expires_at <= now) {
      throw new AppError('INVALID_REFRESH_TOKEN')
    }
    this.deps.sessions.assertMayOpen(state)
    // The new access token asserts what the session holds now (a step-up since is carried), and
    // the user's claims as they are now, in the session's organisation.
    const { access, organizationId: active } = await this.deps.sessions.reissue(sub, sid, state, organizationId)
    await this.deps.commits.run(async (trx) => {
      await sessions.touch(trx, sid, now)
      if (active !== state.organization_id) await sessions.setOrganization(trx, sid, active)
      await recordEvent(trx, this.deps.clock, { type: 'token.refreshed', userId: sub, context })
    })
    return { access_token: access.token, expires_in: ACCESS_TTL_SECONDS }
  }

  /**
   * Bearer authentication. The order is the contract: a forged or malformed token is INVALID_TOKEN
   * whatever its `exp`; a revoked session is INVALID_TOKEN; the account state is checked on every
   * request (a disable bites within the gate's bound); only then may a genuine token be
   * TOKEN_EXPIRED. Live tokens are checked against the in-memory gate; the rare expired one is
   * checked against the database, so "expired" is never said of a session revoked long ago.
   */
  async authenticate(accessToken: string): Promise<Principal> {
    const result = await this.deps.tokens.verify(accessToken, 'access')
    if (result.status === 'invalid') throw new AppError('INVALID_TOKEN')
    const { sub, sid } = result.claims
    if (result.status === 'expired') {
      const state = await sessions.findAuthState(this.db, sid)
      if (!state || state.user_id !== sub || state.revoked_at !== null) throw new AppError('INVALID_TOKEN')
      this.deps.sessions.assertMayOpen(state)
      throw new AppError('TOKEN_EXPIRED')
    }
    return this.principalOf(result.claims, await this.deps.gate.check(sid, sub))
  }

  /**
   * authenticate()'s answer when memory holds all of it (the token verified before, its session
   * and account in the gate), without a promise: the bearer path of nearly every request. The same
   * checks in the same order, throwing the same errors; undefined when something must be read.
   */
  authenticateFromMemory(accessToken: string): Principal | undefined {
    const claims = this.deps.tokens.remembered(accessToken, 'access')
    if (!claims) return undefined
    const state = this.deps.gate.known(claims.sid, claims.sub)
    return state === undefined ? undefined : this.principalOf(claims, state)
  }

  /** A live token's caller, once its session's state is known (null: revoked, or another user's). */
  private principalOf(claims: TokenClaims, state: AccountState | null): Principal {
    if (!state) throw new AppError('INVALID_TOKEN')
    this.deps.sessions.assertMayOpen(state)
    // Claims made before the user's roles, memberships or app_metadata last changed are out of date:
    // refreshing brings the new ones (docs/authorization.md). Known from memory, like the state.
    if (claims.cv < state.claims_version) throw new AppError('TOKEN_EXPIRED')
    const principal: Principal = { userId: claims.sub, sessionId: claims.sid }
    if (claims.org) principal.organization = claims.org
    if (claims.permissions) principal.permissions = claims.permissions
    return principal
  }

  async me(principal: Principal) {
    const user = await users.read(this.deps.db, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    return {
      user_id: user.id,
      email: user.email,
      full_name: user.full_name,
      email_verified: user.email_verified_at !== null,
      created_at: new Date(user.created_at).toISOString(),
      app_metadata: metadataView(user.app_metadata),
      user_metadata: metadataView(user.user_metadata),
    }
  }
}

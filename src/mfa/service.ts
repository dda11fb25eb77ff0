import { randomUUID } from 'node:crypto'
import type { AccountEvents } from '../webhooks/events.ts'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import { KeyEncryptionError, type KeySealer } from '../auth/key-encryption.ts'
import { NO_PASSWORD } from '../auth/passwords.ts'
import type { Principal } from '../auth/service.ts'
import { assuranceOf, type AuthMethod, type LoginBody, type SessionOpener, type SignIn, type SignInSubject } from '../auth/sessions.ts'
import { ACCESS_TTL_SECONDS, type TokenService } from '../auth/tokens.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { sessions, users, type UserRow } from '../db/repositories.ts'
import type { FactorType } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import type { ClaimedAttempt, Limits } from '../limits/limits.ts'
import { securityNoticeMail, type MailBrand } from '../mail/index.ts'
import { outbox } from '../mail/outbox.ts'
import type { MailQueue } from '../mail/queue.ts'
import { isUuid } from '../text.ts'
import { newMfaToken, newRecoveryCode, normaliseRecoveryCode, RECOVERY_CODE_COUNT, SecretHasher } from './codes.ts'
import { PasskeyCeremonies, storedPasskey, userHandleOf, type CeremonyBinding } from './passkeys.ts'
import { ceremonies, challenges, factors, recoveryCodes, type FactorRow } from './store.ts'
import { newTotpSecret, qrSvg, totpStep } from './totp.ts'
import { CeremonyFailed, counterWentBackwards, type AssertionCredential, type RegistrationCredential, type RelyingParty } from './webauthn.ts'

/** The mfa_token's life (docs/mfa.md). */
export const MFA_TOKEN_TTL_SECONDS = 300
/** An enrolment not confirmed within this long is dead. */
const ENROLMENT_TTL_MS = 10 * 60_000
/** Confirmed factors an account may hold. */
const MAX_FACTORS = 10

export type Method = 'totp' | 'recovery_code' | 'passkey'

/** What a second step presents: a code, or a passkey's assertion. */
export type Proof = { method: 'totp' | 'recovery_code'; code: string } | { method: 'passkey'; credential: AssertionCredential }

/**
 * A proof matched to what it would use up: a TOTP factor's step, a recovery code's hash, or a
 * passkey's ceremony and the counter move its signature showed.
 */
type CodeMatch =
  | { kind: 'totp'; factorId: string; step: number }
  | { kind: 'recovery_code'; hash: string }
  | { kind: 'passkey'; factorId: string; ceremonyId: string; from: number; to: number; backedUp: boolean }

/** The methods a passkey login proves (docs/tokens.md): the key, the user's verification on it. */
const PASSKEY_LOGIN = { amr: ['hwk', 'user', 'mfa'] as AuthMethod[], acr: 'aal2' as const }
export type Transport = 'body' | 'cookie'

export interface FactorView {
  id: string
  type: FactorType
  name: string
  created_at: string
  last_used_at: string | null
}

export interface MfaDeps {
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
  db: Db
  clock: Clock
  sealer: KeySealer
  hasher: SecretHasher
  sessions: SessionOpener
  tokens: TokenService
  limits: Limits
  mailQueue: MailQueue
  brand: MailBrand
  /** MFA_STEP_UP_SECONDS, in ms. */
  stepUpMs: number
  /** The passkey relying party (WEBAUTHN_RP_ID, WEBAUTHN_ORIGINS). */
  rp: RelyingParty
  /** Whether the account has a linked provider identity, read in the caller's transaction: a way in LAST_SIGN_IN_METHOD counts (src/oidc/). */
  hasIdentity(trx: Db['kysely'], userId: string): Promise<boolean>
}

/** The passkey columns of a factor of another type. */
const NOT_A_PASSKEY = { credential_id: null, public_key: null, sign_count: null, transports: null, backup_eligible: null, backed_up: null, aaguid: null }

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())

/** What a TOTP factor's sealed secret is bound to: moved to another row, it does not open. */
function secretAad(factorId: string): string {
  return `mfa_factor:${factorId}`
}

/** The method a matched proof adds to the session's `amr`. */
const methodOf = (match: CodeMatch): AuthMethod => (match.kind === 'passkey' ? 'hwk' : 'otp')

function view(row: FactorRow): FactorView {
  return { id: row.id, type: row.type, name: row.name, created_at: iso(row.created_at)!, last_used_at: iso(row.last_used_at) }
}

/** A session's methods after a second factor: the first step's, then the factor's, then `mfa`. */
function withSecondFactor(first: string[], added: AuthMethod): AuthMethod[] {
  const base = first.filter((method) => method === 'pwd' || method === 'fed' || method === 'user') as AuthMethod[]
  return [...new Set<AuthMethod>([...base, added, 'mfa'])]
}

/**
 * Second factors (docs/mfa.md): TOTP and recovery codes today, passkeys as one more
 * factor type. Login hands over through one seam (`requiredMethods`, then `challenge`), and a
 * completed second step ends in the same SessionOpener as every other way in. The rules that make
 * a code worth something (a step used once, an mfa_token used once and dead after five wrong
 * codes, wrong codes feeding the account's login delay) live here, in our code and database.
 */
export class MfaService {
  private readonly ceremonies: PasskeyCeremonies

  constructor(private readonly deps: MfaDeps) {
    this.ceremonies = new PasskeyCeremonies(deps)
  }

  private get db() {
    return this.deps.db.kysely
  }

  private async user(userId: string): Promise<UserRow> {
    const user = await users.findById(this.db, userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    return user
  }

  /**
   * The account, if a factor may be added to it now: never while its address is unverified (docs/mfa.md,
   * unverified addresses): a stranger who registered someone else's address must not leave a way
   * in that survives the owner's password reset.
   */
  private async userAddingFactor(userId: string): Promise<UserRow> {
    const user = await this.user(userId)
    if (user.email_verified_at === null) throw new AppError('EMAIL_NOT_VERIFIED')
    return user
  }

  /**
   * In the transaction that adds a factor, with the account's row locked so two additions happen
   * one after the other (docs/mfa.md, "The rules"): to an account that already has MFA only from a
   * recent session, so a session from before MFA cannot finish an enrolment it parked then. The
   * account's first factor ends every other enrolment and passkey registration under way.
   * Returns whether this is the first factor.
   */
  private async admitNewFactor(trx: Db['kysely'], principal: Principal, keep: string | null): Promise<boolean> {
    await users.lockRow(trx, principal.userId)
    const confirmed = await factors.listConfirmed(trx, principal.userId)
    if (confirmed.length > 0) {
      const state = await sessions.findAuthState(trx, principal.sessionId)
      if (!state || !this.isRecent(state)) throw this.stepUpRequired(await this.requiredMethods(principal.userId, trx))
      return false
    }
    await factors.deleteUnconfirmed(trx, principal.userId, keep)
    await ceremonies.deleteRegistrations(trx, principal.userId)
    return true
  }

  private isRecent(state: Parameters<typeof assuranceOf>[0]): boolean {
    const assurance = assuranceOf(state)
    return assurance.acr === 'aal2' && assurance.authTime >= this.deps.clock.now() - this.deps.stepUpMs
  }

  private stepUpRequired(methods: string[] | null): AppError {
    return new AppError('MFA_REQUIRED', { message: 'This action needs a second factor verified in the last minutes.', mfa: { step_up: true, methods: methods ?? [] } })
  }

  /** The methods this account can use, or null when it has no second factor (the password login answers as usual). */
  async requiredMethods(userId: string, db: Db['kysely'] = this.db): Promise<string[] | null> {
    const confirmed = await factors.listConfirmed(db, userId)
    if (confirmed.length === 0) return null
    const methods = [...new Set(confirmed.map((factor) => factor.type))] as string[]
    if ((await recoveryCodes.remaining(db, userId)) > 0) methods.push('recovery_code')
    return methods
  }

  /**
   * The login's second step begins: an mfa_token (stored only as a keyed hash, single-use, five
   * minutes) that remembers what the first step proved and the login's transport. Returns the
   * MFA_REQUIRED error to answer with; no session exists yet.
   */
  async challenge(user: SignInSubject, methods: string[], first: SignIn, transport: Transport, context: RequestContext): Promise<AppError> {
    const userId = user.id
    const token = newMfaToken()
    const now = this.deps.clock.now()
    await this.db.transaction().execute(async (trx) => {
      await challenges.insert(trx, {
        token_hash: this.deps.hasher.hash('mfa_token', token),
        user_id: userId,
        amr: first.amr.join(' '),
        transport,
        // The session it leads to opens only under this epoch (src/auth/sessions.ts).
        credential_epoch: user.credential_epoch,
        created_at: now,
        expires_at: now + MFA_TOKEN_TTL_SECONDS * 1000,
        used_at: null,
      })
      await recordEvent(trx, this.deps.clock, { type: 'mfa.challenge_issued', userId, context })
    })
    return new AppError('MFA_REQUIRED', { mfa: { mfa_token: token, expires_in: MFA_TOKEN_TTL_SECONDS, methods } })
  }

  /**
   * The second step of a login. The session is created here, not before. A wrong code counts as a
   * failed login of the account (the same progressive delay as wrong passwords, so six digits
   * cannot be guessed across many mfa_tokens) and against the token; the fifth wrong code is still
   * INVALID_MFA_CODE, and the token is dead after it.
   */
  async verify(input: { mfa_token: string } & Proof, context: RequestContext): Promise<{ body: LoginBody; transport: Transport }> {
    const hash = this.deps.hasher.hash('mfa_token', input.mfa_token)
    const challenge = await challenges.findLive(this.db, hash, this.deps.clock.now())
    if (!challenge) throw new AppError('INVALID_MFA_TOKEN')
    const user = await users.findById(this.db, challenge.user_id)
    if (!user) throw new AppError('INVALID_MFA_TOKEN')
    // Counted before judged, for the account and then for the token (docs/SECURITY.md, "Guesses sent
    // at once"): a burst of guesses counts one by one on every engine and instance.
    // Only a wrong code stays counted; one not judged (a dead token, a database failure) is taken back.
    await using attempt = await this.deps.limits.claimLoginAttempt(user.email)
    // Disabled between the two steps: no session.
    if (user.status === 'disabled') throw new AppError('ACCOUNT_DISABLED')
    if (!(await challenges.claimAttempt(this.db, hash, this.deps.clock.now()))) throw new AppError('INVALID_MFA_TOKEN')
    const refused = () => this.wrongCode(user, context, 'login', attempt)
    const match = await this.matchProof(user, input, { userId: user.id, binding: hash }, 'second_factor', context)
    if (!match) throw await refused()
    // One transaction (shared with other sign-ins by the group commit): the code used up, the
    // mfa_token used up and the session created, or none of it. Of two racing verifications of one
    // token, or of one code, the second finds its conditional update matching nothing.
    let body: LoginBody
    try {
      const signIn: SignIn = { amr: withSecondFactor(challenge.amr.split(' '), methodOf(match)), acr: 'aal2' }
      body = await this.deps.sessions.open({ id: user.id, credential_epoch: challenge.credential_epoch }, signIn, context, {
        audit: { type: 'login.succeeded', reason: input.method },
        alsoInTransaction: async (trx) => {
          if (!(await challenges.consume(trx, hash, this.deps.clock.now()))) throw new AppError('INVALID_MFA_TOKEN')
          if (!(await this.useCode(trx, user, match, context))) throw new AppError('INVALID_MFA_CODE')
        },
        // The account's sessions ended after the first step: the mfa_token died with them.
        superseded: () => new AppError('INVALID_MFA_TOKEN'),
      })
    } catch (error) {
      if (error instanceof AppError && error.code === 'INVALID_MFA_CODE') throw await refused()
      throw error
    }
    if (match.kind === 'recovery_code') this.deps.mailQueue.kick()
    // Only a completed login resets the delay, never the password step alone.
    await this.deps.limits.loginSucceeded(user.email)
    return { body, transport: challenge.transport }
  }

  /** A second factor verified in a live session: it becomes aal2 and recent, and the answer is its new access token. */
  async stepUp(principal: Principal, input: Proof, context: RequestContext): Promise<{ access_token: string; expires_in: number }> {
    const user = await this.user(principal.userId)
    await using attempt = await this.deps.limits.claimLoginAttempt(user.email)
    const match = await this.matchProof(user, input, { userId: user.id, binding: principal.sessionId }, 'step_up', context)
    const used = match !== null && (await this.db.transaction().execute((trx) => this.useCode(trx, user, match, context)))
    if (!used) throw await this.wrongCode(user, context, 'step_up', attempt)
    await this.deps.limits.loginSucceeded(user.email)
    if (match.kind === 'recovery_code') this.deps.mailQueue.kick()
    await this.raiseSession(principal, methodOf(match))
    await recordEvent(this.db, this.deps.clock, { type: 'mfa.step_up', userId: user.id, reason: input.method, context })
    const raised = await sessions.findAuthState(this.db, principal.sessionId)
    if (!raised) throw new AppError('INVALID_TOKEN')
    const { access } = await this.deps.sessions.reissue(principal.userId, principal.sessionId, raised)
    return { access_token: access.token, expires_in: ACCESS_TTL_SECONDS }
  }

  /**
   * The sensitive actions (README.md, "Recent"): for an account with MFA, a second factor verified in
   * this session within MFA_STEP_UP_SECONDS; otherwise 403 MFA_REQUIRED with `step_up`. An account
   * without MFA passes (enrolling the first factor needs only the bearer token).
   */
  async assertRecent(principal: Principal): Promise<void> {
    const methods = await this.requiredMethods(principal.userId)
    if (!methods) return
    const state = await sessions.findAuthState(this.db, principal.sessionId)
    if (state && this.isRecent(state)) return
    throw this.stepUpRequired(methods)
  }

  async list(principal: Principal) {
    const confirmed = await factors.listConfirmed(this.db, principal.userId)
    return { factors: confirmed.map(view), recovery_codes_remaining: confirmed.length > 0 ? await recoveryCodes.remaining(this.db, principal.userId) : 0 }
  }

  /** An unconfirmed TOTP factor: the secret is shown this once; it counts only once confirmed. */
  async enrolTotp(principal: Principal, name: string | undefined, context: RequestContext) {
    const user = await this.userAddingFactor(principal.userId)
    const now = this.deps.clock.now()
    if ((await factors.listConfirmed(this.db, user.id)).length >= MAX_FACTORS) throw new AppError('LIMIT_EXCEEDED', { message: `An account holds at most ${MAX_FACTORS} second factors.` })
    const id = randomUUID()
    const { secret, uri } = newTotpSecret(this.deps.brand.appName, user.email)
    await this.db.transaction().execute(async (trx) => {
      await factors.deleteUnconfirmedBefore(trx, user.id, now - ENROLMENT_TTL_MS)
      await factors.insert(trx, {
        id,
        user_id: user.id,
        type: 'totp',
        name: name ?? 'Authenticator app',
        secret: this.deps.sealer.seal(secret, secretAad(id)),
        last_step: null,
        // A pending proof (src/auth/pending-proofs.ts): confirmed only while this session and the account's epoch stand.
        credential_epoch: user.credential_epoch,
        session_id: principal.sessionId,
        created_at: now,
        confirmed_at: null,
        last_used_at: null,
        ...NOT_A_PASSKEY,
      })
      await recordEvent(trx, this.deps.clock, { type: 'mfa.totp_enrolment_started', userId: user.id, context })
    })
    return { factor_id: id, secret, otpauth_uri: uri, qr_svg: await qrSvg(uri) }
  }

  /**
   * Confirms an enrolment with a valid code. The code's step is remembered (it cannot be replayed
   * at login), the confirming session becomes aal2 and recent, and the account's first factor
   * brings ten recovery codes, shown once.
   */
  async confirmTotp(principal: Principal, factorId: string, code: string, context: RequestContext) {
    const user = await this.userAddingFactor(principal.userId)
    const now = this.deps.clock.now()
    const factor = isUuid(factorId) ? await factors.findPendingEnrolment(this.db, user.id, factorId, now) : null
    if (!factor || factor.type !== 'totp' || factor.created_at < now - ENROLMENT_TTL_MS) throw new AppError('NOT_FOUND')
    const step = totpStep(this.deps.sealer.open(factor.secret!, secretAad(factor.id)), code, now)
    if (step === null) throw new AppError('INVALID_MFA_CODE')
    const result = await this.db.transaction().execute(async (trx) => {
      const first = await this.admitNewFactor(trx, principal, factor.id)
      if (!(await factors.confirm(trx, user.id, factor.id, step, now))) throw new AppError('NOT_FOUND')
      const codes = first ? await this.issueRecoveryCodes(trx, user.id, context) : undefined
      await recordEvent(trx, this.deps.clock, { type: 'mfa.factor_added', userId: user.id, reason: 'totp', context })
      if (first) await this.deps.events.emit(trx, 'user.mfa_enabled', user, { method: 'totp' })
      await this.notify(trx, user, 'A sign-in method was added to your account', `An authenticator app ("${factor.name}") was added as a second factor to your ${this.deps.brand.appName} account.`)
      return { factor: view({ ...factor, confirmed_at: now, last_used_at: now }), ...(codes ? { recovery_codes: codes } : {}) }
    })
    this.deps.mailQueue.kick()
    await this.raiseSession(principal, 'otp')
    return result
  }

  /** Registration's options (docs/mfa.md, Passkeys): a challenge bound to this account and session, the account's passkeys excluded. */
  async passkeyRegistrationOptions(principal: Principal) {
    const user = await this.userAddingFactor(principal.userId)
    const existing = (await factors.listConfirmed(this.db, user.id)).filter((f) => f.type === 'passkey').map(storedPasskey)
    const { options } = await this.ceremonies.begin('register', { userId: user.id, binding: principal.sessionId }, (challenge) => this.deps.rp.creationOptions(user, existing, challenge))
    return { options }
  }

  /**
   * A new passkey, verified (origin, RP ID, user verification, the challenge made for this session)
   * and enrolled at once; the account's first factor brings recovery codes, and the session becomes
   * aal2 and recent, as a confirmed TOTP enrolment makes it. A credential that does not verify is
   * VALIDATION_ERROR naming why, and nothing is stored.
   */
  async registerPasskey(principal: Principal, input: { credential: RegistrationCredential; name?: string | undefined }, context: RequestContext) {
    const user = await this.userAddingFactor(principal.userId)
    const refused = (reason: string) => new AppError('VALIDATION_ERROR', { message: `The passkey was not registered: ${reason}.`, details: [{ field: 'credential', message: reason }] })
    const ceremony = await this.ceremonies.find(input.credential, 'register', { userId: user.id, binding: principal.sessionId })
    if (!ceremony) throw refused('the challenge is unknown, used, expired or not this session\'s')
    let passkey
    try {
      passkey = await this.deps.rp.verifyRegistration(input.credential, ceremony.challenge)
    } catch (error) {
      if (error instanceof CeremonyFailed) throw refused(error.message)
      throw error
    }
    if (await factors.findPasskey(this.db, passkey.credentialId)) throw refused('this passkey is already registered')
    if ((await factors.listConfirmed(this.db, user.id)).length >= MAX_FACTORS) throw new AppError('LIMIT_EXCEEDED', { message: `An account holds at most ${MAX_FACTORS} second factors.` })
    const now = this.deps.clock.now()
    const row: FactorRow = {
      id: randomUUID(),
      user_id: user.id,
      type: 'passkey',
      name: input.name ?? 'Passkey',
      secret: null,
      last_step: null,
      // Confirmed at once: nothing about it is pending.
      credential_epoch: user.credential_epoch,
      session_id: null,
      created_at: now,
      confirmed_at: now,
      last_used_at: now,
      credential_id: passkey.credentialId,
      public_key: passkey.publicKey,
      sign_count: passkey.counter,
      transports: passkey.transports.join(' ') || null,
      backup_eligible: passkey.backupEligible ? 1 : 0,
      backed_up: passkey.backedUp ? 1 : 0,
      aaguid: passkey.aaguid,
    }
    const result = await this.db.transaction().execute(async (trx) => {
      if (!(await ceremonies.consume(trx, ceremony.row.id, now))) throw refused('the challenge was used meanwhile')
      const first = await this.admitNewFactor(trx, principal, null)
      await factors.insert(trx, row)
      const codes = first ? await this.issueRecoveryCodes(trx, user.id, context) : undefined
      await recordEvent(trx, this.deps.clock, { type: 'mfa.factor_added', userId: user.id, reason: 'passkey', context })
      if (first) await this.deps.events.emit(trx, 'user.mfa_enabled', user, { method: 'passkey' })
      await this.notify(trx, user, 'A sign-in method was added to your account', `A passkey ("${row.name}") was added to your ${this.deps.brand.appName} account. It signs you in without a password and serves as a second factor.`)
      return { factor: view(row), ...(codes ? { recovery_codes: codes } : {}) }
    })
    this.deps.mailQueue.kick()
    await this.raiseSession(principal, 'hwk')
    return result
  }

  /** A passwordless login's options: a challenge bound to nothing yet, for any discoverable passkey. */
  async passkeyLoginOptions() {
    const { id, options } = await this.ceremonies.begin('login', { userId: null, binding: null }, (challenge) => this.deps.rp.requestOptions([], challenge))
    return { challenge_id: id, options }
  }

  /**
   * A login with a passkey alone (docs/mfa.md, Passkeys): refused as a login is (INVALID_CREDENTIALS for
   * an unknown or removed credential, a bad signature, a wrong origin or RP ID, no user
   * verification, a used challenge, a counter gone backwards), then the account checks, then the
   * session, opened where every way in ends, aal2 with `hwk user mfa`.
   */
  async loginWithPasskey(input: { challenge_id: string; credential: AssertionCredential }, context: RequestContext): Promise<LoginBody> {
    const failed = async (user: UserRow | null, reason: string, attempt?: ClaimedAttempt) => {
      attempt?.judgedWrong()
      await recordEvent(this.db, this.deps.clock, { type: 'login.failed', userId: user?.id ?? null, reason, context })
      return new AppError('INVALID_CREDENTIALS')
    }
    const ceremony = await this.ceremonies.find(input.credential, 'login')
    if (!ceremony || ceremony.row.id !== input.challenge_id) throw await failed(null, 'passkey_unknown_challenge')
    const factor = await factors.findPasskey(this.db, input.credential.id)
    const user = factor && (await users.findById(this.db, factor.user_id))
    if (!factor || !user) throw await failed(null, 'passkey_unknown')
    // Counted before the signature is judged; a completed login clears it, and one not judged wrong is taken back.
    await using attempt = await this.deps.limits.claimLoginAttempt(user.email)
    // The handle the authenticator keeps is the account id registration gave it.
    const handle = input.credential.response.userHandle
    if (handle && handle !== userHandleOf(user.id)) throw await failed(user, 'passkey_wrong_user', attempt)
    const seen = await this.checkAssertion(input.credential, ceremony.challenge, factor, context)
    if (!seen) throw await failed(user, 'passkey_refused', attempt)
    try {
      this.deps.sessions.assertMayOpen(user)
    } catch (error) {
      await recordEvent(this.db, this.deps.clock, { type: 'login.failed', userId: user.id, reason: (error as AppError).code === 'ACCOUNT_DISABLED' ? 'account_disabled' : 'email_not_verified', context })
      throw error
    }
    const body = await this.deps.sessions.open(user, PASSKEY_LOGIN, context, {
      audit: { type: 'login.succeeded', reason: 'passkey' },
      alsoInTransaction: async (trx) => {
        const now = this.deps.clock.now()
        const used = (await ceremonies.consume(trx, ceremony.row.id, now)) && (await factors.advanceCounter(trx, factor.id, factor.sign_count ?? 0, seen.counter, seen.backedUp, now))
        // A used challenge or a counter overtaken meanwhile: refused like a wrong credential, and counted.
        if (!used) {
          attempt.judgedWrong()
          throw new AppError('INVALID_CREDENTIALS')
        }
      },
    })
    await this.deps.limits.loginSucceeded(user.email)
    return body
  }

  /**
   * A passkey as the second step of a login (bound to the mfa_token) or for step-up (bound to the
   * session): request options limited to the account's passkeys.
   */
  async passkeyOptions(by: { mfaToken: string } | { principal: Principal }) {
    let bound: CeremonyBinding
    if ('mfaToken' in by) {
      const hash = this.deps.hasher.hash('mfa_token', by.mfaToken)
      const challenge = await challenges.findLive(this.db, hash, this.deps.clock.now())
      if (!challenge) throw new AppError('INVALID_MFA_TOKEN')
      bound = { userId: challenge.user_id, binding: hash }
    } else {
      bound = { userId: by.principal.userId, binding: by.principal.sessionId }
    }
    const passkeys = (await factors.listConfirmed(this.db, bound.userId!)).filter((f) => f.type === 'passkey').map(storedPasskey)
    if (passkeys.length === 0) throw new AppError('VALIDATION_ERROR', { message: 'This account has no passkey.', details: [{ field: 'method', message: 'no passkey is registered' }] })
    const { options } = await this.ceremonies.begin('mfaToken' in by ? 'second_factor' : 'step_up', bound, (challenge) => this.deps.rp.requestOptions(passkeys, challenge))
    return { options }
  }

  /** A factor's name, as the user calls it ("work laptop", "phone"). */
  async renameFactor(principal: Principal, factorId: string, name: string, context: RequestContext) {
    const factor = isUuid(factorId) ? await factors.findOwned(this.db, principal.userId, factorId) : null
    if (!factor || factor.confirmed_at === null || !(await factors.rename(this.db, principal.userId, factor.id, name))) throw new AppError('NOT_FOUND')
    await recordEvent(this.db, this.deps.clock, { type: 'mfa.factor_renamed', userId: principal.userId, reason: factor.type, context })
    return { factor: view({ ...factor, name }) }
  }

  /** Removing the last factor removes the recovery codes too: the account is back to a password alone. */
  async removeFactor(principal: Principal, factorId: string, context: RequestContext) {
    const user = await this.user(principal.userId)
    const factor = isUuid(factorId) ? await factors.findOwned(this.db, user.id, factorId) : null
    if (!factor) throw new AppError('NOT_FOUND')
    await this.db.transaction().execute(async (trx) => {
      await users.lockRow(trx, user.id)
      if (factor.type === 'passkey' && factor.confirmed_at !== null && !(await this.otherWayIn(trx, user.id, factor.id))) throw new AppError('LAST_SIGN_IN_METHOD')
      if (!(await factors.delete(trx, user.id, factor.id))) throw new AppError('NOT_FOUND')
      if (factor.confirmed_at === null) return
      if ((await factors.listConfirmed(trx, user.id)).length === 0) {
        await recoveryCodes.deleteAllOf(trx, user.id)
        await this.deps.events.emit(trx, 'user.mfa_disabled', user, { by: 'user' })
      }
      await recordEvent(trx, this.deps.clock, { type: 'mfa.factor_removed', userId: user.id, reason: factor.type, context })
      await this.notify(trx, user, 'A sign-in method was removed from your account', `The second factor "${factor.name}" was removed from your ${this.deps.brand.appName} account.`)
    })
    this.deps.mailQueue.kick()
    return { id: factor.id, deleted: true as const }
  }

  /** Whether the account keeps a way in without this passkey: a password, another passkey or a linked identity (read with its row locked). */
  private async otherWayIn(trx: Db['kysely'], userId: string, passkeyId: string): Promise<boolean> {
    const account = await users.findById(trx, userId)
    if (account && account.password_hash !== NO_PASSWORD) return true
    if ((await factors.listConfirmed(trx, userId)).some((f) => f.type === 'passkey' && f.id !== passkeyId)) return true
    return this.deps.hasIdentity(trx, userId)
  }

  /** A new set of ten; the old set dies. Only for an account with a second factor. */
  async regenerateRecoveryCodes(principal: Principal, context: RequestContext) {
    if (!(await this.requiredMethods(principal.userId))) {
      throw new AppError('VALIDATION_ERROR', { message: 'Recovery codes come with a second factor; this account has none.', details: [{ field: 'account', message: 'has no second factor' }] })
    }
    return { recovery_codes: await this.db.transaction().execute((trx) => this.issueRecoveryCodes(trx, principal.userId, context)) }
  }

  /** Whether the account holds a passkey (a way in of its own, for the identity module's LAST_SIGN_IN_METHOD). */
  async hasPasskey(userId: string, trx: Db['kysely'] = this.db): Promise<boolean> {
    return (await factors.listConfirmed(trx, userId)).some((factor) => factor.type === 'passkey')
  }

  /** What export and the admin view show: the confirmed factors, never a secret. */
  async summaryOf(userId: string): Promise<{ enabled: boolean; factors: FactorView[] }> {
    const confirmed = (await factors.listConfirmed(this.db, userId)).map(view)
    return { enabled: confirmed.length > 0, factors: confirmed }
  }

  private async issueRecoveryCodes(trx: Db['kysely'], userId: string, context: RequestContext): Promise<string[]> {
    const codes = Array.from({ length: RECOVERY_CODE_COUNT }, newRecoveryCode)
    const hashes = codes.map((code) => this.deps.hasher.hash('recovery_code', normaliseRecoveryCode(code)!))
    await recoveryCodes.replaceAll(trx, userId, hashes, this.deps.clock.now())
    await recordEvent(trx, this.deps.clock, { type: 'mfa.recovery_codes_issued', userId, context })
    return codes
  }

  /**
   * Which of the account's factors a proof belongs to, without using it up (reads only): a TOTP code
   * of the current step or one either side of a confirmed factor, or one of the account's unused
   * recovery codes. Null when it is neither.
   */
  private async matchProof(user: UserRow, proof: Proof, bound: CeremonyBinding, purpose: 'second_factor' | 'step_up', context: RequestContext): Promise<CodeMatch | null> {
    if (proof.method === 'passkey') return this.matchPasskey(user, proof.credential, purpose, bound, context)
    return this.matchCode(user, proof.method, proof.code)
  }

  /**
   * A passkey assertion as a second factor: over a live challenge made for this purpose and this
   * mfa_token or session, by one of this account's passkeys, with a valid signature, user
   * verification and a counter that moved forward (one that went back is recorded). Reads only.
   */
  private async matchPasskey(user: UserRow, credential: AssertionCredential, purpose: 'second_factor' | 'step_up', bound: CeremonyBinding, context: RequestContext): Promise<CodeMatch | null> {
    const ceremony = await this.ceremonies.find(credential, purpose, bound)
    if (!ceremony) return null
    const factor = await factors.findPasskey(this.db, credential.id)
    if (!factor || factor.user_id !== user.id) return null
    const seen = await this.checkAssertion(credential, ceremony.challenge, factor, context)
    return seen && { kind: 'passkey', factorId: factor.id, ceremonyId: ceremony.row.id, from: factor.sign_count ?? 0, to: seen.counter, backedUp: seen.backedUp }
  }

  /** The signature, origin, RP ID and user verification, then the counter rule; null when any fails. */
  private async checkAssertion(credential: AssertionCredential, challenge: string, factor: FactorRow, context: RequestContext) {
    let seen
    try {
      seen = await this.deps.rp.verifyAssertion(credential, challenge, storedPasskey(factor))
    } catch (error) {
      if (error instanceof CeremonyFailed) return null
      throw error
    }
    if (counterWentBackwards(factor.sign_count ?? 0, seen.counter)) {
      // A cloned authenticator, or a replayed signature: refused, and worth an operator's look.
      await recordEvent(this.db, this.deps.clock, { type: 'mfa.passkey_counter_regressed', userId: factor.user_id, reason: `${factor.sign_count} -> ${seen.counter}`, context })
      return null
    }
    return seen
  }

  private async matchCode(user: UserRow, method: 'totp' | 'recovery_code', code: string): Promise<CodeMatch | null> {
    const now = this.deps.clock.now()
    if (method === 'totp') {
      for (const factor of await factors.listConfirmed(this.db, user.id)) {
        if (factor.type !== 'totp' || factor.secret === null) continue
        const step = totpStep(this.deps.sealer.open(factor.secret, secretAad(factor.id)), code, now)
        // A step this factor has already accepted (or a later one) is a replay.
        if (step !== null && (factor.last_step === null || step > factor.last_step)) return { kind: 'totp', factorId: factor.id, step }
      }
      return null
    }
    const normalised = normaliseRecoveryCode(code)
    if (normalised === null) return null
    // Checked here too, so a wrong code is refused before any token is signed or a commit joined.
    const hash = this.deps.hasher.hash('recovery_code', normalised)
    return (await recoveryCodes.isUnused(this.db, user.id, hash)) ? { kind: 'recovery_code', hash } : null
  }

  /**
   * Uses a matched code up inside the caller's transaction; false when it was taken meanwhile. A
   * TOTP step is accepted once per factor (it must be later than every step used before, checked
   * again in the update itself); a recovery code once, recorded and mailed to the account.
   */
  private async useCode(trx: Db['kysely'], user: UserRow, match: CodeMatch, context: RequestContext): Promise<boolean> {
    const now = this.deps.clock.now()
    if (match.kind === 'totp') return factors.acceptStep(trx, match.factorId, match.step, now)
    if (match.kind === 'passkey') {
      return (await ceremonies.consume(trx, match.ceremonyId, now)) && factors.advanceCounter(trx, match.factorId, match.from, match.to, match.backedUp, now)
    }
    if (!(await recoveryCodes.consume(trx, user.id, match.hash, now))) return false
    await recordEvent(trx, this.deps.clock, { type: 'mfa.recovery_code_used', userId: user.id, context })
    await this.notify(trx, user, 'A recovery code was used', `One of your recovery codes was used to sign in to your ${this.deps.brand.appName} account. Each code works once; you can make a new set in your account settings.`)
    return true
  }

  /** A wrong code: its attempt, counted against the account before it was judged, stays counted; audited. */
  private async wrongCode(user: UserRow, context: RequestContext, step: 'login' | 'step_up', attempt: ClaimedAttempt): Promise<AppError> {
    attempt.judgedWrong()
    await recordEvent(this.db, this.deps.clock, { type: 'mfa.verify_failed', userId: user.id, reason: step, context })
    return new AppError('INVALID_MFA_CODE')
  }

  /** The session now holds a second factor verified this moment: aal2, and the methods that proved it. */
  private async raiseSession(principal: Principal, added: AuthMethod) {
    const state = await sessions.findAuthState(this.db, principal.sessionId)
    if (!state) throw new AppError('INVALID_TOKEN')
    const now = this.deps.clock.now()
    const amr = withSecondFactor(assuranceOf(state).amr, added)
    await sessions.raiseAssurance(this.db, principal.sessionId, { amr: amr.join(' '), acr: 'aal2', auth_time: now })
    return { amr, acr: 'aal2' as const, authTime: now }
  }

  /** The operator's reset with this instance's key and brand (src/accounts/service.ts runs it in its transaction). */
  resetFor(trx: Db['kysely'], user: Pick<UserRow, 'id' | 'email'>): Promise<number> {
    return resetSecondFactors(trx, user, { sealer: this.deps.sealer, brand: this.deps.brand, now: this.deps.clock.now() })
  }

  /**
   * Removes every factor, recovery code and ceremony of an account, in the caller's transaction and
   * without a mail of its own (the e-mailed sign-in's first proof of an address tells the owner).
   */
  async removeAllFor(trx: Db['kysely'], userId: string): Promise<void> {
    await factors.deleteAllOf(trx, userId)
    await recoveryCodes.deleteAllOf(trx, userId)
    await challenges.deleteAllOf(trx, userId)
    await ceremonies.deleteAllOf(trx, userId)
  }

  /** Mail written by a reset goes out now rather than at the next poll. */
  kickMail(): void {
    this.deps.mailQueue.kick()
  }

  private async notify(trx: Db['kysely'], user: UserRow, subject: string, what: string): Promise<void> {
    await this.deps.mailQueue.enqueue(trx, { userId: user.id, kind: 'security_notice', message: securityNoticeMail(this.deps.brand, user.email, { subject, what }) })
  }
}

/**
 * `keys rewrap`'s part for second factors: re-seals every TOTP secret from one key-encryption key to
 * the other inside the caller's transaction. A secret the new key already opens is left alone; one
 * neither key opens stops the rewrap.
 */
export async function rewrapTotpSecrets(trx: Db['kysely'], from: KeySealer, to: KeySealer): Promise<number> {
  let rewrapped = 0
  for (const row of await factors.sealedSecrets(trx)) {
    if (to.tryOpen(row.secret, secretAad(row.id)) !== null) continue
    const clear = from.tryOpen(row.secret, secretAad(row.id))
    if (clear === null) throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt the secret of second factor ${row.id}; nothing was changed`)
    await factors.replaceSecret(trx, row.id, row.secret, to.seal(clear, secretAad(row.id)))
    rewrapped++
  }
  return rewrapped
}

/**
 * An import's TOTP secrets (src/imports/): each becomes a confirmed factor of its new account,
 * sealed under KEY_ENCRYPTION_KEY and bound to its row like an enrolled one. No recovery codes come
 * with it: the user makes them from their settings.
 */
export async function importTotpFactors(trx: Db['kysely'], sealer: KeySealer, rows: readonly { userId: string; secret: string }[], now: number): Promise<void> {
  const factorRows: FactorRow[] = rows.map(({ userId, secret }) => {
    const id = randomUUID()
    return {
      id, user_id: userId, type: 'totp', name: 'Authenticator app',
      secret: sealer.seal(secret, secretAad(id)),
      last_step: null, credential_epoch: 0, session_id: null,
      created_at: now, confirmed_at: now, last_used_at: null,
      ...NOT_A_PASSKEY,
    }
  })
  await factors.insertMany(trx, factorRows)
}

/**
 * An operator's reset (docs/admin.md): every factor, recovery code and pending mfa_token of the account
 * goes, inside the caller's transaction (which also revokes every session), and the user is told
 * through the durable mail queue. Shared by the admin API and the CLI, which has no running queue
 * but writes the same sealed mail for the server to send. Returns how many factors were removed.
 */
export async function resetSecondFactors(trx: Db['kysely'], user: Pick<UserRow, 'id' | 'email'>, mail: { sealer: KeySealer; brand: MailBrand; now: number }): Promise<number> {
  const removed = await factors.deleteAllOf(trx, user.id)
  await recoveryCodes.deleteAllOf(trx, user.id)
  await challenges.deleteAllOf(trx, user.id)
  await ceremonies.deleteAllOf(trx, user.id)
  const message = securityNoticeMail(mail.brand, user.email, {
    subject: 'Your second factors were reset',
    what: `An operator removed every second factor and recovery code from your ${mail.brand.appName} account and signed out every session. You can sign in with your password and set up a new authenticator app.`,
  })
  await outbox.insert(trx, { userId: user.id, kind: 'security_notice', message }, mail.now, mail.sealer)
  return removed
}

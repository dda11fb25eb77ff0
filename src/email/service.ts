import { createHmac, randomBytes, randomInt, randomUUID, timingSafeEqual } from 'node:crypto'
import type { AccountEvents } from '../webhooks/events.ts'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import type { KeySealer } from '../auth/key-encryption.ts'
import type { LoginCodes } from '../auth/login-codes.ts'
import { NO_PASSWORD } from '../auth/passwords.ts'
import type { SecondFactorSeam } from '../auth/service.ts'
import type { LoginBody, SessionOpener, SignIn } from '../auth/sessions.ts'
import type { AccountSignOut } from '../auth/sign-out.ts'
import type { Background } from '../background.ts'
import { publishChanges, sessionRevocations, type Change } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { sessions, users, type UserRow } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import type { Limits } from '../limits/limits.ts'
import type { MailQueue } from '../mail/queue.ts'
import { securityNoticeMail, signInCodeMail, type MailBrand } from '../mail/templates.ts'
import { emailProblem, normaliseEmail } from '../auth/input.ts'
import { signIns, type EmailSignInRow } from './store.ts'

/** A code and its link live 10 minutes (docs/email-sign-in.md). */
export const SIGN_IN_TTL_MS = 10 * 60_000
/** What an e-mailed code proves: a one-time code out of band (RFC 8176 `otp`), one factor (docs/email-sign-in.md). */
const EMAILED: SignIn = { amr: ['otp'], acr: 'aal1' }
const CODE = /^\d{6}$/
const CODE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/

export interface EmailSignInDeps {
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
  db: Db
  clock: Clock
  sealer: KeySealer
  /** Keys the hashes of codes, link tokens and browser cookies. */
  hmacKey: Buffer
  limits: Limits
  mailQueue: MailQueue
  background: Background
  brand: MailBrand
  sessions: SessionOpener
  secondFactor: SecondFactorSeam
  loginCodes: LoginCodes
  signOut: AccountSignOut
  /** Tells this instance's caches of revoked sessions at once (the feed tells the others). */
  applyLocally: (changes: Change[]) => void
  /** Makes an account with no password for an address proven by mail (EMAIL_SIGNUP). */
  registerWithoutPassword: (email: string, context: RequestContext) => Promise<UserRow>
  /** What was added to an unverified account by someone who may not own the address: removed at the first proof. */
  removeUnprovenAdditions: (trx: Db['kysely'], userId: string) => Promise<void>
  /** `{PUBLIC_URL}/sign-in/email?token=`. */
  linkBase: string
  /** Where a link may send the browser back to (the identity providers' list). */
  redirectOrigins: string[]
  signup: boolean
}

export interface StartRequest {
  email: string
  redirectTo?: string | undefined
  codeChallenge?: string | undefined
  codeChallengeMethod?: string | undefined
}

/** What the link's page does once its button is pressed: back to the application with a login code, or the code to type. */
export type LinkOutcome = { redirect: string } | { code: string } | { dead: true }

function same(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

/**
 * Sign in with an e-mailed code or link (docs/email-sign-in.md): one mail carries a 6-digit code and a link. The
 * code is typed where the sign-in started (`verify`); the link's page sends the starting browser back
 * to the application with a one-time login code (the shared binding of src/auth/login-codes.ts), or,
 * on a device that did not start it, shows the code to type there. Either way the session opens
 * through the same opener, second-factor seam and credential epoch as every other way in.
 */
export class EmailSignIn {
  constructor(private readonly deps: EmailSignInDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  private mac(kind: string, value: string): string {
    return createHmac('sha256', this.deps.hmacKey).update(`${kind}:${value}`).digest('base64url')
  }

  /** The hash of the `portcullis_email` cookie, the binding of a start without a code_challenge. */
  browserHash(cookie: string): string {
    return this.mac('email_browser', cookie)
  }

  private redirectTarget(redirectTo: string): string {
    const url = URL.parse(redirectTo)
    if (!url || !this.deps.redirectOrigins.includes(url.origin) || url.username || url.password) {
      throw new AppError('VALIDATION_ERROR', { message: 'redirect_to must be an absolute URL on one of the allowed origins.', details: [{ field: 'redirect_to', message: 'not an allowed origin' }] })
    }
    return url.toString()
  }

  /**
   * Checks the request at once (a bad address or redirect is the caller's to know), then does the
   * rest in the background: the answer, and its time, are the same whether or not the address has an
   * account. A new start ends the address's previous code.
   */
  start(request: StartRequest, browserCookie: string, context: RequestContext): void {
    const email = normaliseEmail(request.email)
    const problem = emailProblem(email)
    if (problem) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'email', message: problem }] })
    const redirectTo = request.redirectTo === undefined ? null : this.redirectTarget(request.redirectTo)
    if ((request.codeChallenge === undefined) !== (request.codeChallengeMethod === undefined) || (request.codeChallenge !== undefined && (request.codeChallengeMethod !== 'S256' || !CODE_CHALLENGE.test(request.codeChallenge)))) {
      throw new AppError('VALIDATION_ERROR', { message: 'code_challenge (43 base64url characters) and code_challenge_method=S256 go together.', details: [{ field: 'code_challenge', message: 'must come with code_challenge_method=S256' }] })
    }
    this.deps.background.run('e-mailed sign-in', async () => {
      if (!(await this.deps.limits.mailAllowed(email))) return
      const user = await users.findByEmail(this.db, email)
      if (!user && !this.deps.signup) return
      const code = String(randomInt(0, 1_000_000)).padStart(6, '0')
      const token = randomBytes(32).toString('base64url')
      const id = randomUUID()
      const now = this.deps.clock.now()
      await this.db.transaction().execute(async (trx) => {
        await signIns.replace(trx, {
          id,
          email,
          user_id: user?.id ?? null,
          code_hash: this.mac(`email_code:${id}`, code),
          code_sealed: this.deps.sealer.seal(code, `email_code:${id}`),
          token_hash: this.mac('email_link', token),
          redirect_to: redirectTo,
          code_challenge: request.codeChallenge ?? null,
          browser_hash: this.browserHash(browserCookie),
          credential_epoch: user?.credential_epoch ?? 0,
          created_at: now,
          expires_at: now + SIGN_IN_TTL_MS,
        })
        await this.deps.mailQueue.enqueue(trx, { userId: user?.id ?? null, kind: 'sign_in_code', message: signInCodeMail(this.deps.brand, email, `${this.deps.linkBase}${token}`, code) })
      })
      this.deps.mailQueue.kick()
    })
  }

  /**
   * The code typed where the sign-in started. The attempt is counted before it is judged, on the
   * account (its progressive delay, as for passwords) and on the code (five wrong ones end it); an
   * unknown address answers as a wrong code does.
   */
  async verify(input: { email: string; code: string }, transport: 'body' | 'cookie', context: RequestContext): Promise<LoginBody> {
    const email = normaliseEmail(input.email)
    // Stays counted only if the code is judged wrong; otherwise taken back (src/limits/limits.ts, ClaimedAttempt).
    await using attempt = await this.deps.limits.claimLoginAttempt(email)
    const row = emailProblem(email) ? null : await signIns.liveFor(this.db, email, this.deps.clock.now())
    if (!row || !(await signIns.countAttempt(this.db, row.id)) || !CODE.test(input.code) || !same(this.mac(`email_code:${row.id}`, input.code), row.code_hash)) {
      attempt.judgedWrong()
      await recordEvent(this.db, this.deps.clock, { type: 'login.failed', userId: row?.user_id ?? null, reason: 'wrong_email_code', context })
      throw new AppError('INVALID_CREDENTIALS')
    }
    if (!(await signIns.use(this.db, row.id, this.deps.clock.now()))) throw new AppError('INVALID_CREDENTIALS')
    const user = await this.proven(row, context)
    try {
      const body = await this.signIn(user, transport, context)
      await this.deps.limits.loginSucceeded(email)
      return body
    } catch (error) {
      // The right code of an account with a second factor is not yet a success (as for a password).
      if (error instanceof AppError && error.code === 'MFA_REQUIRED') await this.deps.limits.attemptWasRight(attempt)
      throw error
    }
  }

  /**
   * Whether the link's token is live, and where its button may lead (the origin of its redirect_to):
   * its page's GET consumes nothing (mail scanners fetch links).
   */
  async link(token: string): Promise<{ live: false } | { live: true; leadsTo: string | null }> {
    const row = await signIns.byToken(this.db, this.mac('email_link', token), this.deps.clock.now())
    return row ? { live: true, leadsTo: row.redirect_to === null ? null : new URL(row.redirect_to).origin } : { live: false }
  }

  /**
   * The link's button: in the browser that started (its cookie), back to the application with a
   * login code bound as the start was (its code_challenge, else that cookie); anywhere else, or
   * without a redirect_to, the 6-digit code to type where the sign-in started, which stays live.
   */
  async followLink(token: string, browserCookie: string | undefined, context: RequestContext): Promise<LinkOutcome> {
    const row = await signIns.byToken(this.db, this.mac('email_link', token), this.deps.clock.now())
    if (!row) return { dead: true }
    const startedHere = browserCookie !== undefined && row.browser_hash !== null && same(this.browserHash(browserCookie), row.browser_hash)
    if (!startedHere || row.redirect_to === null) return { code: this.deps.sealer.open(row.code_sealed, `email_code:${row.id}`) }
    if (!(await signIns.use(this.db, row.id, this.deps.clock.now()))) return { dead: true }
    const user = await this.proven(row, context)
    const code = await this.deps.loginCodes.issue(this.db, {
      userId: user.id,
      source: 'email',
      credentialEpoch: user.credential_epoch,
      binding: row.code_challenge !== null ? { codeChallenge: row.code_challenge } : { browserHash: row.browser_hash! },
    })
    const target = new URL(row.redirect_to)
    target.searchParams.set('code', code)
    return { redirect: target.toString() }
  }

  /** The login code from the link, exchanged with its binding's proof. */
  async exchange(request: { code: string; codeVerifier?: string | undefined; browserCookie?: string | undefined }, transport: 'body' | 'cookie', context: RequestContext): Promise<LoginBody> {
    const redeemed = await this.deps.loginCodes.redeem(this.db, {
      code: request.code,
      codeVerifier: request.codeVerifier,
      browserHash: request.browserCookie === undefined ? null : this.browserHash(request.browserCookie),
    })
    if (!redeemed || 'refused' in redeemed || redeemed.source !== 'email') throw new AppError('INVALID_CREDENTIALS')
    const user = await users.findById(this.db, redeemed.user_id)
    if (!user) throw new AppError('INVALID_CREDENTIALS')
    return this.signIn({ ...user, credential_epoch: redeemed.credential_epoch }, transport, context)
  }

  /**
   * The mail proved the address: the account is made (EMAIL_SIGNUP) or verified. The first proof of
   * an address registered with a password, perhaps by someone else, ends that password and every
   * session, removes what was added while unproven, and tells the owner (docs/email-sign-in.md).
   */
  private async proven(row: EmailSignInRow, context: RequestContext): Promise<UserRow> {
    // A sign-up whose address someone registered with a password while the code was on its way:
    // the code is that account's first proof, as for any account made before the start (below).
    // The epoch the proof was made under, for an account that existed at the start; an account
    // registered since has nothing earlier to be judged against.
    const madeUnder = row.user_id === null ? null : row.credential_epoch
    const userId = row.user_id ?? (await users.findByEmail(this.db, row.email))?.id
    if (userId === undefined) {
      try {
        return await this.deps.registerWithoutPassword(row.email, context)
      } catch (error) {
        if (!(error instanceof AppError && error.code === 'EMAIL_EXISTS')) throw error
        // Registered in the same moment: the unique index decided, and the code proves that account.
        const registered = await users.findByEmail(this.db, row.email)
        if (!registered) throw new AppError('INVALID_CREDENTIALS')
        return this.provenFor(registered.id, null, row, context)
      }
    }
    return this.provenFor(userId, madeUnder, row, context)
  }

  /** The proof applied to one account, under its row lock; `madeUnder` is the epoch to hold it to, if any. */
  private async provenFor(userId: string, madeUnder: number | null, row: EmailSignInRow, context: RequestContext): Promise<UserRow> {
    const now = this.deps.clock.now()
    let revoked: Change[] = []
    const user = await this.db.transaction().execute(async (trx) => {
      if (!(await users.lockRow(trx, userId))) throw new AppError('INVALID_CREDENTIALS')
      const current = await users.findById(trx, userId)
      // The code proves the address it was mailed to, not the account: one whose address changed
      // since is not what the mail's reader proved they own.
      if (!current || current.email !== row.email) throw new AppError('INVALID_CREDENTIALS')
      // Checked again under the lock: a reset, logout-all or disable committed since the code was
      // spent ends it, rather than the session opening under the epoch that followed.
      if (madeUnder !== null && current.credential_epoch !== madeUnder) throw new AppError('INVALID_CREDENTIALS')
      if (current.email_verified_at !== null) return current
      await users.markVerified(trx, current.id, now)
      await recordEvent(trx, this.deps.clock, { type: 'email.verified', userId: current.id, reason: 'email_sign_in', context })
      await this.deps.events.emit(trx, 'user.verified', current)
      if (current.password_hash === NO_PASSWORD) return { ...current, email_verified_at: now }
      // Someone may have registered the owner's address first: what they set up ends here.
      await users.setPasswordHash(trx, current.id, NO_PASSWORD, now)
      await this.deps.signOut.endAll(trx, current.id)
      await this.deps.removeUnprovenAdditions(trx, current.id)
      revoked = sessionRevocations(current.id, await sessions.revoke(trx, current.id, now))
      await publishChanges(trx, revoked)
      await this.deps.mailQueue.enqueue(trx, {
        userId: current.id,
        kind: 'security_notice',
        message: securityNoticeMail(this.deps.brand, current.email, {
          subject: 'Your address is confirmed; the earlier password no longer works',
          what: `This address was registered at ${this.deps.brand.appName} with a password before it was confirmed. Since you have now proven it is yours, that password no longer works and every other session was signed out. Choose a password of your own with "forgot password" if you want one.`,
        }),
      })
      const after = await users.findById(trx, current.id)
      return after!
    })
    if (revoked.length > 0) this.deps.applyLocally(revoked)
    this.deps.mailQueue.kick()
    return user
  }

  /** Everything a login does after its credential: the account's state, the second factor, the session. */
  /**
   * The session opens under the epoch the proof was checked at (read with the account just now, or
   * kept in the login code): a reset, logout-all or disable committed since makes it open nothing.
   */
  private async signIn(user: UserRow, transport: 'body' | 'cookie', context: RequestContext): Promise<LoginBody> {
    if (user.status === 'disabled') throw new AppError('ACCOUNT_DISABLED')
    const subject = { id: user.id, credential_epoch: user.credential_epoch }
    const methods = await this.deps.secondFactor.requiredMethods(user.id)
    if (methods) throw await this.deps.secondFactor.challenge(subject, methods, EMAILED, transport, context)
    return this.deps.sessions.open(subject, EMAILED, context, { audit: { type: 'login.succeeded', reason: 'email' } })
  }
}

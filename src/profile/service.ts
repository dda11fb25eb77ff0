import { confirmPassword } from '../auth/confirm-password.ts'
import type { PasswordCheck } from '../auth/password-check.ts'
import { randomBytes } from 'node:crypto'
import type { LifecycleService } from '../accounts/lifecycle.ts'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import { emailProblem, normaliseEmail, normaliseFullName, throwIfProblems } from '../auth/input.ts'
import { hashOneTimeToken, VERIFICATION_TTL_MS } from '../auth/one-time-tokens.ts'
import { NO_PASSWORD, type PasswordHasher } from '../auth/passwords.ts'
import type { Principal } from '../auth/service.ts'
import { storedMetadata } from '../authz/roles.ts'
import { assuranceOf } from '../auth/sessions.ts'
import type { Clock } from '../clock.ts'
import { isUniqueViolation, type Db } from '../db/index.ts'
import { oneTimeTokens, sessions, users } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import type { Limits } from '../limits/limits.ts'
import { securityNoticeMail, type MailBrand } from '../mail/index.ts'
import type { MailQueue } from '../mail/queue.ts'
import { emailChangeMail, emailChangeNoticeMail } from '../mail/templates.ts'
import type { AccountEvents } from '../webhooks/events.ts'
import { emailChanges } from './store.ts'

export interface ProfileDeps {
  db: Db
  clock: Clock
  hasher: PasswordHasher
  /** Judges a password against any stored credential (src/auth/password-check.ts). */
  passwords: PasswordCheck
  limits: Limits
  mailQueue: MailQueue
  /** Ends the other sessions, in the change's transaction; a cancelled change ends the session that asked. */
  lifecycle: Pick<LifecycleService, 'endOtherSessions' | 'endSession'>
  /** The link mailed to the new address: `{PUBLIC_URL}/confirm-email-change?token=` + the token. */
  confirmUrl: string
  /** The link in the notice to the old address: `{PUBLIC_URL}/cancel-email-change?token=` + the token. */
  cancelUrl: string
  brand: MailBrand
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
  /** How recent the sign-in of an account without a password must be to change its address (MFA_STEP_UP_SECONDS). */
  recentMs: number
}

/** What following a change-of-address link did; the page says it. */
export type EmailChangeOutcome = { changed: true; email: string } | { changed: false; reason: 'dead' | 'taken' }

/** Thrown inside the confirming transaction to undo it; never leaves this file. */
class Refused extends Error {
  constructor(readonly reason: 'dead' | 'taken') {
    super(reason)
  }
}

/**
 * The user's own profile (docs/profile.md): the name, and the address, which changes only once the
 * new address has proved itself through a mailed link, with the old one told at both ends.
 */
export class ProfileService {
  constructor(private readonly deps: ProfileDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  /**
   * The name, the user's own user_metadata (an object of at most 2 KB serialised; null clears it),
   * or both, in one transaction. user_metadata is never put into a token (the user controls it), so
   * changing it leaves the claims version, and every access token, as they are.
   */
  async update(principal: Principal, input: { full_name?: string | undefined; user_metadata?: unknown }, context: RequestContext): Promise<void> {
    const name = input.full_name === undefined ? null : normaliseFullName(input.full_name)
    throwIfProblems(name?.problem ? [{ field: 'full_name', message: name.problem }] : [])
    const metadata = input.user_metadata === undefined ? undefined : storedMetadata(input.user_metadata, 'user_metadata')
    const now = this.deps.clock.now()
    await this.db.transaction().execute(async (trx) => {
      const changes = { ...(name ? { full_name: name.value } : {}), ...(metadata === undefined ? {} : { user_metadata: metadata }) }
      const updated = await trx.updateTable('users').set({ ...changes, updated_at: now }).where('id', '=', principal.userId).returning(['id', 'email']).executeTakeFirst()
      if (!updated) throw new AppError('INVALID_TOKEN')
      if (name) {
        await this.deps.events.emit(trx, 'user.updated', updated, { full_name: name.value })
        await recordEvent(trx, this.deps.clock, { type: 'profile.updated', userId: principal.userId, context })
      }
      if (metadata !== undefined) await recordEvent(trx, this.deps.clock, { type: 'user.user_metadata_changed', userId: principal.userId, context })
    })
  }

  /**
   * Mails a link to the new address and a notice to the old one; nothing else changes yet. The
   * caller proves it is the account's owner again: with the password when the account has one
   * (checked like a login: the per-account delay, a wrong one an audited failed login), otherwise
   * with a sign-in of the last minutes, since a stolen access token alone must not move the
   * address that password resets and e-mailed codes go to. Whether the new address belongs to
   * another account is not looked at here: the answer must not tell (the link's page does).
   */
  async requestEmailChange(principal: Principal, input: { new_email: string; password?: string | undefined }, context: RequestContext): Promise<void> {
    const user = await users.findById(this.db, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    const newEmail = normaliseEmail(input.new_email)
    const problem = emailProblem(newEmail) ?? (newEmail === user.email ? 'is the current address' : null)
    throwIfProblems(problem ? [{ field: 'new_email', message: problem }] : [])
    if (user.password_hash !== NO_PASSWORD) {
      if (input.password === undefined) throwIfProblems([{ field: 'password', message: 'is required' }])
      await confirmPassword(this.deps, user, input.password!, 'change_email', context)
    } else {
      const state = await sessions.findAuthState(this.db, principal.sessionId)
      if (!state || assuranceOf(state).authTime < this.deps.clock.now() - this.deps.recentMs) {
        throw new AppError('INVALID_CREDENTIALS', { message: `This account has no password: sign in again, then change the address within ${Math.round(this.deps.recentMs / 60_000)} minutes.` })
      }
    }
    // Checked before the previous link is retired: a refused request must not kill a link on its way.
    await this.deps.limits.assertMailAllowed(newEmail)
    const token = randomBytes(32).toString('base64url')
    const cancelToken = randomBytes(32).toString('base64url')
    const now = this.deps.clock.now()
    await this.db.transaction().execute(async (trx) => {
      await emailChanges.replace(trx, {
        token_hash: hashOneTimeToken(token),
        cancel_hash: hashOneTimeToken(cancelToken),
        user_id: user.id,
        new_email: newEmail,
        // A pending proof (src/auth/pending-proofs.ts): it dies with this session and with every
        // event that ends all the account's sessions, judged where the link is used.
        session_id: principal.sessionId,
        credential_epoch: user.credential_epoch,
        created_at: now,
        expires_at: now + VERIFICATION_TTL_MS,
      })
      const link = `${this.deps.confirmUrl}${encodeURIComponent(token)}`
      await this.deps.mailQueue.enqueue(trx, { userId: user.id, kind: 'email_change', message: emailChangeMail(this.deps.brand, newEmail, link, token) })
      const cancelLink = `${this.deps.cancelUrl}${encodeURIComponent(cancelToken)}`
      await this.deps.mailQueue.enqueue(trx, { userId: user.id, kind: 'security_notice', message: emailChangeNoticeMail(this.deps.brand, user.email, newEmail, cancelLink, cancelToken) })
      await recordEvent(trx, this.deps.clock, { type: 'email.change_requested', userId: user.id, context })
    })
    this.deps.mailQueue.kick()
  }

  /**
   * The new address of a live link (its confirmation's, or with `cancel` its cancellation's), or
   * null; nothing is used up (a GET of the link must not burn it).
   */
  async pendingChange(token: string, link: 'confirm' | 'cancel' = 'confirm'): Promise<string | null> {
    const by = link === 'confirm' ? { tokenHash: hashOneTimeToken(token) } : { cancelHash: hashOneTimeToken(token) }
    return (await emailChanges.findLive(this.db, by, this.deps.clock.now()))?.new_email ?? null
  }

  /**
   * The owner, told at the old address, did not ask: the change ends and so does the session that
   * asked for it (a password that leaked, a device left signed in). False when there was nothing
   * pending to cancel (already used, cancelled, expired, or dead with the account's sessions).
   */
  async cancelEmailChange(cancelToken: string, context: RequestContext): Promise<boolean> {
    const change = await emailChanges.findLive(this.db, { cancelHash: hashOneTimeToken(cancelToken) }, this.deps.clock.now())
    if (!change) return false
    const cancelled = await this.db.transaction().execute(async (trx) => {
      if (!(await emailChanges.consume(trx, change.token_hash, this.deps.clock.now()))) return false
      await recordEvent(trx, this.deps.clock, { type: 'email.change_cancelled', userId: change.user_id, context })
      return true
    })
    if (cancelled) await this.deps.lifecycle.endSession(change.user_id, change.session_id, context)
    return cancelled
  }

  /**
   * Follows the link: in one transaction, under the account's row lock, the address changes (and
   * counts as verified: the link proved it), the links mailed to the old address end, every
   * session but the one that asked ends, and the old address is told. An address that belongs to
   * another account by now changes nothing and leaves the link as it was.
   */
  async confirmEmailChange(token: string, context: RequestContext): Promise<EmailChangeOutcome> {
    const tokenHash = hashOneTimeToken(token)
    const change = await emailChanges.findLive(this.db, { tokenHash }, this.deps.clock.now())
    if (!change) return { changed: false, reason: 'dead' }
    try {
      await this.deps.lifecycle.endOtherSessions(change.user_id, change.session_id, { type: 'email.changed', context }, async (trx) => {
        const now = this.deps.clock.now()
        if (!(await users.lockRow(trx, change.user_id))) throw new Refused('dead')
        const user = (await users.findById(trx, change.user_id))!
        // Judged again under the row lock, with the link spent (consume below): the account is
        // still active and nothing ended its sessions or the asking one since the lookup.
        if (user.status !== 'active') throw new Refused('dead')
        const holder = await users.findByEmail(trx, change.new_email)
        if (holder && holder.id !== user.id) throw new Refused('taken')
        if (!(await emailChanges.consume(trx, tokenHash, now))) throw new Refused('dead')
        await trx.updateTable('users').set({ email: change.new_email, email_verified_at: now, updated_at: now }).where('id', '=', user.id).execute()
        await this.deps.events.emit(trx, 'user.updated', { id: user.id, email: change.new_email }, { previous_email: user.email })
        await emailChanges.retireAll(trx, user.id, now)
        // The links mailed to the old address would act on an address the account no longer has.
        await oneTimeTokens.retireAll(trx, user.id, 'reset_password', now)
        await oneTimeTokens.retireAll(trx, user.id, 'verify_email', now)
        await this.deps.mailQueue.enqueue(trx, {
          userId: user.id,
          kind: 'security_notice',
          message: securityNoticeMail(this.deps.brand, user.email, {
            subject: 'Your e-mail address was changed',
            what: `The address of your ${this.deps.brand.appName} account is now ${change.new_email}. Mail about the account goes there from now on, and every other session was signed out.`,
          }),
        })
      })
    } catch (error) {
      if (error instanceof Refused) return { changed: false, reason: error.reason }
      // The address taken by a registration at the same moment: the unique index decides.
      if (isUniqueViolation(error)) return { changed: false, reason: 'taken' }
      throw error
    }
    this.deps.mailQueue.kick()
    return { changed: true, email: change.new_email }
  }
}

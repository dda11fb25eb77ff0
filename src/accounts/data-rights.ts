import { confirmPassword } from '../auth/confirm-password.ts'
import type { PasswordCheck } from '../auth/password-check.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import type { PasswordHasher } from '../auth/passwords.ts'
import type { Principal } from '../auth/service.ts'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import type { AuditLog } from '../audit/service.ts'
import type { Limits } from '../limits/limits.ts'
import type { MailQueue } from '../mail/queue.ts'
import type { MfaService } from '../mfa/service.ts'
import type { OidcService } from '../oidc/service.ts'
import type { ProviderService } from '../provider/service.ts'
import type { WatchlistService } from '../watchlists/service.ts'
import type { OrganizationService } from '../authz/organizations.ts'
import { statusOf, UnknownUserError, type AccountService } from './service.ts'
import { accountStore } from './store.ts'

export interface DataRightsDeps {
  db: Db
  clock: Clock
  hasher: PasswordHasher
  /** Judges a password against any stored credential (src/auth/password-check.ts). */
  passwords: PasswordCheck
  limits: Limits
  accounts: AccountService
  audit: AuditLog
  watchlists: WatchlistService
  /** The second-factor module: the confirmed factors, never a secret. */
  secondFactors: Pick<MfaService, 'summaryOf'>
  /** The identity-provider module: the linked identities. */
  identities: Pick<OidcService, 'list'>
  /** The OpenID provider module: the apps the user approved. */
  apps: Pick<ProviderService, 'appsOf'>
  /** The mail queue: a mail's subject is stored sealed, and only it opens it. */
  mail: Pick<MailQueue, 'subjectOf'>
  /** The organisations module: the user's memberships. */
  organizations: Pick<OrganizationService, 'membershipsOf'>
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())

/**
 * A user's own rights over their data (GDPR articles 15 and 17): a copy of everything stored about
 * them, and erasure. Erasure is the operators' deletion (AccountService.remove), behind the
 * current password and the login throttle.
 */
export class DataRights {
  constructor(private readonly deps: DataRightsDeps) {}

  /**
   * Needs the current password, checked exactly like a login (same per-account delay, same
   * INVALID_CREDENTIALS), so a stolen access token alone cannot erase an account.
   */
  async deleteOwn(principal: Principal, password: string, context: RequestContext): Promise<{ user_id: string; deleted: true }> {
    const user = await users.findById(this.deps.db.kysely, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    await confirmPassword(this.deps, user, password, 'account_delete', context)
    try {
      await this.deps.accounts.remove({ id: user.id }, context)
    } catch (error) {
      // Deleted a moment ago by a concurrent request (or an operator): the token is no longer anyone's.
      if (error instanceof UnknownUserError) throw new AppError('INVALID_TOKEN')
      throw error
    }
    return { user_id: user.id, deleted: true }
  }

  /** Everything stored about the caller; never a password hash, a token or a token's hash. */
  async exportOwn(principal: Principal, context: RequestContext) {
    const db = this.deps.db.kysely
    const user = await users.findById(db, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    await recordEvent(db, this.deps.clock, { type: 'account.exported', userId: user.id, context })
    const [sessions, watchlists, events, mail, secondFactors, linked, apps, organizations] = await Promise.all([
      accountStore.allSessions(db, user.id),
      this.deps.watchlists.allOf(user.id),
      this.deps.audit.ofUser(user.id),
      accountStore.mailOf(db, user.id),
      this.deps.secondFactors.summaryOf(user.id),
      this.deps.identities.list(user.id),
      this.deps.apps.appsOf(user.id),
      this.deps.organizations.membershipsOf(user.id),
    ])
    return {
      user: {
        user_id: user.id,
        email: user.email,
        full_name: user.full_name,
        email_verified: user.email_verified_at !== null,
        email_verified_at: iso(user.email_verified_at),
        status: statusOf(user),
        disabled_reason: user.disabled_reason,
        created_at: iso(user.created_at)!,
        updated_at: iso(user.updated_at)!,
        last_login_at: iso(user.last_login_at),
      },
      sessions: sessions.map((session) => ({
        id: session.id,
        created_at: iso(session.created_at)!,
        last_used_at: iso(session.last_used_at)!,
        expires_at: iso(session.expires_at)!,
        revoked_at: iso(session.revoked_at),
        user_agent: session.user_agent,
        ip: session.ip,
        current: session.id === principal.sessionId,
      })),
      watchlists,
      events,
      factors: secondFactors.factors,
      identities: linked.identities,
      apps,
      organizations,
      mail: mail.map((message) => ({
        id: message.id,
        kind: message.kind,
        recipient: message.recipient,
        subject: this.deps.mail.subjectOf(message),
        created_at: iso(message.created_at)!,
        sent_at: iso(message.sent_at),
        failed_at: iso(message.failed_at),
      })),
    }
  }
}

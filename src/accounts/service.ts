import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { sessions, users, watchlists, type UserRow } from '../db/repositories.ts'
import { normaliseEmail } from '../auth/input.ts'
import { publishChanges, sessionRevocations, type Change } from '../changes/feed.ts'
import { CLI_CONTEXT, recordEvent, type AuditType, type RequestContext } from '../audit/events.ts'
import { AuditLog } from '../audit/service.ts'
import type { AuditEventRow } from '../audit/store.ts'
import type { AccountSignOut } from '../auth/sign-out.ts'
import type { AccountEvents, WebhookEventType } from '../webhooks/events.ts'
import { releaseMemberships } from '../authz/organizations.ts'
import { accountStore } from './store.ts'

export type DisableReason = NonNullable<UserRow['disabled_reason']>
export const DISABLE_REASONS: readonly DisableReason[] = ['suspended', 'banned']
export type AccountStatus = 'unverified' | 'active' | 'disabled'

export class UnknownUserError extends Error {
  constructor(who: string) {
    super(who.includes('@') ? `no user with the e-mail address ${who}` : `no user with the id ${who}`)
    this.name = 'UnknownUserError'
  }
}

/** An account named by its address (the CLI, the tests) or by its id (the admin API). */
export type UserRef = string | { id: string }

export interface AccountSummary {
  user_id: string
  email: string
  full_name: string
  state: AccountStatus
  disabled_reason: DisableReason | null
  created_at: string
}

export function statusOf(user: Pick<UserRow, 'status' | 'email_verified_at'>): AccountStatus {
  return user.status === 'disabled' ? 'disabled' : user.email_verified_at === null ? 'unverified' : 'active'
}

function summarise(user: UserRow): AccountSummary {
  return {
    user_id: user.id,
    email: user.email,
    full_name: user.full_name,
    state: statusOf(user),
    disabled_reason: user.disabled_reason,
    created_at: new Date(user.created_at).toISOString(),
  }
}

/**
 * Operator actions on accounts (state changes, revoking sessions, deletion), reached from the CLI
 * and the admin API, never from the user-facing API. Each change is published to the change feed
 * in its transaction, so every running instance enforces it within the feed's bound; `onChange`
 * applies it to this instance at once. The context says who acted (`cli`, `api_key:<id>`).
 */
export class AccountService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    /** Ends the sign-ins under way and the pending proofs wherever sessions all end. */
    private readonly signOut: AccountSignOut,
    /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
    private readonly webhookEvents: AccountEvents,
    private readonly onChange: (changes: Change[]) => void = () => {},
  ) {}

  /** The account, or UnknownUserError. */
  async find(who: UserRef): Promise<UserRow> {
    if (typeof who === 'string') {
      const email = normaliseEmail(who)
      const user = await users.findByEmail(this.db.kysely, email)
      if (!user) throw new UnknownUserError(email)
      return user
    }
    const user = await users.findById(this.db.kysely, who.id)
    if (!user) throw new UnknownUserError(who.id)
    return user
  }

  private async change(
    who: UserRef,
    audit: { type: AuditType; reason?: string | null; context: RequestContext },
    write: (trx: Db['kysely'], user: UserRow) => Promise<Change[]>,
    event?: (user: UserRow) => { type: WebhookEventType; data?: Record<string, unknown> } | null,
    first?: (trx: Db['kysely'], user: UserRow) => Promise<Change[]>,
  ): Promise<{ user: UserRow; changes: Change[] }> {
    const user = await this.find(who)
    const changes = await this.db.kysely.transaction().execute(async (trx) => {
      // Before anything of the account is written: the locks it takes come first (src/authz/organizations.ts).
      const early = first ? await first(trx, user) : []
      // Before the write: the account's last event (user.deleted) is written while it still exists.
      const announced = event?.(user)
      if (announced) await this.webhookEvents.emit(trx, announced.type, user, announced.data)
      const changes: Change[] = [{ kind: 'user_changed', user_id: user.id }, ...(await write(trx, user))]
      await publishChanges(trx, changes)
      await recordEvent(trx, this.clock, { type: audit.type, userId: user.id, reason: audit.reason ?? null, context: audit.context })
      // `first` published its own (claimsChanged does); they are applied here with the rest.
      return [...early, ...changes]
    })
    this.onChange(changes)
    return { user, changes }
  }

  /** The account as it is now, after a change. */
  private async summaryOf(user: UserRow): Promise<AccountSummary> {
    return summarise((await users.findById(this.db.kysely, user.id))!)
  }

  /** The CLI's view of the audit trail, optionally of one account (by address). */
  async events(filter: { email?: string; since?: number; limit?: number }): Promise<AuditEventRow[]> {
    const userId = filter.email === undefined ? undefined : (await this.find(filter.email)).id
    return new AuditLog(this.db).list({ userId, since: filter.since, limit: filter.limit })
  }

  async list(limit = 1000): Promise<AccountSummary[]> {
    return (await users.list(this.db.kysely, limit)).map(summarise)
  }

  async verify(who: UserRef, context: RequestContext = CLI_CONTEXT): Promise<AccountSummary> {
    const { user } = await this.change(who, { type: 'account.verified', context }, async (trx, user) => {
      await users.markVerified(trx, user.id, this.clock.now())
      return []
    }, (user) => (user.email_verified_at === null ? { type: 'user.verified', data: { by: 'operator' } } : null))
    return this.summaryOf(user)
  }

  async disable(who: UserRef, reason: DisableReason, context: RequestContext = CLI_CONTEXT): Promise<AccountSummary> {
    const { user } = await this.change(who, { type: 'account.disabled', reason, context }, async (trx, user) => {
      await users.setStatus(trx, user.id, 'disabled', reason, this.clock.now())
      // Nothing under way finishes: a disable that is later lifted must not let it through.
      await this.signOut.endAll(trx, user.id)
      return []
    }, (user) => (user.status === 'disabled' && user.disabled_reason === reason ? null : { type: 'user.disabled', data: { reason } }))
    return this.summaryOf(user)
  }

  async enable(who: UserRef, context: RequestContext = CLI_CONTEXT): Promise<AccountSummary> {
    const { user } = await this.change(who, { type: 'account.enabled', context }, async (trx, user) => {
      await users.setStatus(trx, user.id, 'active', null, this.clock.now())
      return []
    }, (user) => (user.status === 'disabled' ? { type: 'user.enabled' } : null))
    return this.summaryOf(user)
  }

  /** Revokes every session of the account; returns how many were live. */
  async revokeSessions(who: UserRef, context: RequestContext = CLI_CONTEXT): Promise<number> {
    const { changes } = await this.change(who, { type: 'sessions.revoked_by_operator', context }, async (trx, user) => {
      await this.signOut.endAll(trx, user.id)
      return sessionRevocations(user.id, await sessions.revoke(trx, user.id, this.clock.now()))
    }, () => ({ type: 'session.revoked_all', data: { by: 'operator' } }))
    return changes.filter((change) => change.kind === 'session_revoked').length
  }

  /**
   * An operator's MFA reset: `reset` (the second-factor module's) removes every factor and recovery
   * code, and every session is revoked, in one transaction. Returns how many factors were removed.
   */
  async resetMfa(who: UserRef, reset: (trx: Db['kysely'], user: UserRow) => Promise<number>, context: RequestContext = CLI_CONTEXT): Promise<{ email: string; factors: number; revoked: number }> {
    let removed = 0
    const { user, changes } = await this.change(who, { type: 'mfa.reset', context }, async (trx, user) => {
      removed = await reset(trx, user)
      if (removed > 0) await this.webhookEvents.emit(trx, 'user.mfa_disabled', user, { by: 'operator' })
      await this.signOut.endAll(trx, user.id)
      return sessionRevocations(user.id, await sessions.revoke(trx, user.id, this.clock.now()))
    })
    return { email: user.email, factors: removed, revoked: changes.filter((change) => change.kind === 'session_revoked').length }
  }

  /**
   * Deletes the account and everything stored for it, in one transaction: watchlists, sessions,
   * one-time tokens, queued mail, the user row. Its sessions are revoked on every instance through
   * the feed; the address is free to register again. The audit trail keeps its events (user id,
   * time, type, IP, user agent; never the address) plus one `account.deleted`.
   */
  async remove(who: UserRef, context: RequestContext = CLI_CONTEXT): Promise<{ user_id: string; email: string }> {
    const { user } = await this.change(who, { type: 'account.deleted', context }, async (trx, user) => {
      await this.signOut.endAll(trx, user.id)
      const live = await sessions.revoke(trx, user.id, this.clock.now())
      await watchlists.deleteAllOf(trx, user.id)
      await accountStore.deleteUserData(trx, user.id)
      return sessionRevocations(user.id, live)
    }, () => ({ type: 'user.deleted', data: { by: context.actor ? 'operator' : 'user' } }),
    // Its organisations: the last owner's own deletion is LAST_OWNER; an operator's leaves them to their admins.
    (trx, user) => releaseMemberships(trx, { engine: this.db.engine, clock: this.clock, events: this.webhookEvents }, user, context))
    return { user_id: user.id, email: user.email }
  }
}

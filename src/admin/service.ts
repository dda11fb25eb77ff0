import { statusOf, UnknownUserError, type AccountService, type DisableReason, type UserRef } from '../accounts/service.ts'
import { accountStore, type UserFilter } from '../accounts/store.ts'
import { normaliseEmail } from '../auth/input.ts'
import type { RequestContext } from '../audit/events.ts'
import { eventView, type AuditLog } from '../audit/service.ts'
import { metadataView, type RolesService } from '../authz/roles.ts'
import type { Clock } from '../clock.ts'
import { keysetPage, type CursorCodec } from '../cursor.ts'
import type { Db } from '../db/index.ts'
import type { UserRow } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import type { MfaService } from '../mfa/service.ts'
import type { OidcService } from '../oidc/service.ts'
import type { ProviderService } from '../provider/service.ts'
import { isUuid } from '../text.ts'

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())

function invalidTime(field: string): AppError {
  return new AppError('VALIDATION_ERROR', { details: [{ field, message: 'must be an ISO 8601 date-time' }] })
}

/**
 * What the admin API does: reads of users and of the audit trail, and the operator actions, each
 * through AccountService (the same code path as the CLI), with the API key as the actor. A user
 * id that is not a user's is NOT_FOUND.
 */
export class AdminService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly accounts: AccountService,
    private readonly audit: AuditLog,
    private readonly cursors: CursorCodec,
    /** The second-factor module, for the single-user view and the operator's reset. */
    private readonly mfa: Pick<MfaService, 'summaryOf' | 'resetFor' | 'kickMail'>,
    /** The identity-provider module, for the single-user view. */
    private readonly identities: Pick<OidcService, 'list'>,
    /** The OpenID provider module: the apps the user approved, for the single-user view. */
    private readonly apps: Pick<ProviderService, 'appsOf'>,
    /** The authorisation module: the user's global roles, for the single-user view. */
    private readonly roles: Pick<RolesService, 'rolesOf'>,
  ) {}

  private async views(rows: UserRow[]) {
    const counts = await accountStore.liveSessionCounts(this.db.kysely, rows.map((row) => row.id), this.clock.now())
    return rows.map((row) => ({
      user_id: row.id,
      email: row.email,
      full_name: row.full_name,
      email_verified: row.email_verified_at !== null,
      status: statusOf(row),
      disabled_reason: row.disabled_reason,
      created_at: iso(row.created_at)!,
      last_login_at: iso(row.last_login_at),
      active_sessions: counts.get(row.id) ?? 0,
    }))
  }

  /**
   * Oldest first by keyset on (created_at, id); with an address prefix, in address order (the
   * prefix's range of the address index, so a search box never walks the table). The cursor is
   * bound to the filter it came with.
   */
  async listUsers(query: { email?: string; status?: UserFilter['status']; limit?: number; cursor?: string }) {
    const emailPrefix = query.email === undefined ? '' : normaliseEmail(query.email)
    const scope = `admin-users:${JSON.stringify({ emailPrefix, status: query.status })}`
    const { rows, next_cursor } = emailPrefix === ''
      ? await keysetPage(this.cursors, scope, query, (after, limit) => accountStore.page(this.db.kysely, query, after, limit), (row) => ({ t: row.created_at, id: row.id }))
      : await keysetPage<UserRow, { email: string }>(
          this.cursors, scope, query,
          (after, limit) => accountStore.pageByAddress(this.db.kysely, this.db.engine, { emailPrefix, status: query.status }, after?.email ?? null, limit),
          (row) => ({ email: row.email }),
          (value) => (typeof value?.email === 'string' && value.email.length <= 254 ? { email: value.email } : null),
        )
    return { users: await this.views(rows), next_cursor }
  }

  private async found<T>(id: string, run: (ref: UserRef) => Promise<T>): Promise<T> {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
    try {
      return await run({ id })
    } catch (error) {
      if (error instanceof UnknownUserError) throw new AppError('NOT_FOUND')
      throw error
    }
  }

  private async view(id: string) {
    const row = await this.accounts.find({ id })
    return {
      ...(await this.views([row]))[0]!,
      mfa: await this.mfa.summaryOf(id),
      identities: (await this.identities.list(id)).identities,
      apps: await this.apps.appsOf(id),
      roles: await this.roles.rolesOf(id),
      app_metadata: metadataView(row.app_metadata),
    }
  }

  /** Removes every second factor and recovery code and revokes every session (docs/admin.md). */
  resetMfa(id: string, context: RequestContext) {
    return this.found(id, async (ref) => {
      const { revoked } = await this.accounts.resetMfa(ref, (trx, user) => this.mfa.resetFor(trx, user), context)
      this.mfa.kickMail()
      return { user: await this.view(id), revoked }
    })
  }

  getUser(id: string) {
    return this.found(id, () => this.view(id))
  }

  disable(id: string, reason: DisableReason, context: RequestContext) {
    return this.found(id, async (ref) => {
      await this.accounts.disable(ref, reason, context)
      return this.view(id)
    })
  }

  enable(id: string, context: RequestContext) {
    return this.found(id, async (ref) => {
      await this.accounts.enable(ref, context)
      return this.view(id)
    })
  }

  verify(id: string, context: RequestContext) {
    return this.found(id, async (ref) => {
      await this.accounts.verify(ref, context)
      return this.view(id)
    })
  }

  revokeSessions(id: string, context: RequestContext) {
    return this.found(id, (ref) => this.accounts.revokeSessions(ref, context))
  }

  deleteUser(id: string, context: RequestContext) {
    return this.found(id, async (ref) => ({ user_id: (await this.accounts.remove(ref, context)).user_id, deleted: true as const }))
  }

  async events(query: { user_id?: string; type?: string; since?: string; until?: string; limit?: number; cursor?: string }) {
    const since = query.since === undefined ? undefined : Date.parse(query.since)
    const until = query.until === undefined ? undefined : Date.parse(query.until)
    if (Number.isNaN(since)) throw invalidTime('since')
    if (Number.isNaN(until)) throw invalidTime('until')
    const filter = { userId: query.user_id, type: query.type, since, until }
    const { rows, next_cursor } = await keysetPage(
      this.cursors, `admin-events:${JSON.stringify(filter)}`, query,
      (after, limit) => this.audit.newestFirst(filter, after, limit),
      (row) => ({ t: row.at, id: row.id }),
    )
    return { events: rows.map(eventView), next_cursor }
  }
}

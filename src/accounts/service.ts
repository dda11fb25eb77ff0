import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { auditEvents, users, type AuditEventRow, type UserRow } from '../db/repositories.ts'
import { normaliseEmail } from '../auth/input.ts'
import { publishChanges, type Change } from '../changes/feed.ts'
import { CLI_CONTEXT, recordEvent, type AuditType, type RequestContext } from './audit.ts'

export type DisableReason = NonNullable<UserRow['disabled_reason']>
export const DISABLE_REASONS: readonly DisableReason[] = ['suspended', 'banned']

export class UnknownUserError extends Error {
  constructor(email: string) {
    super(`no user with the e-mail address ${email}`)
    this.name = 'UnknownUserError'
  }
}

export interface AccountSummary {
  user_id: string
  email: string
  full_name: string
  state: 'unverified' | 'active' | 'disabled'
  disabled_reason: DisableReason | null
  created_at: string
}

function summarise(user: UserRow): AccountSummary {
  return {
    user_id: user.id,
    email: user.email,
    full_name: user.full_name,
    state: user.status === 'disabled' ? 'disabled' : user.email_verified_at === null ? 'unverified' : 'active',
    disabled_reason: user.disabled_reason,
    created_at: new Date(user.created_at).toISOString(),
  }
}

/**
 * Operator actions on account state; reached from the CLI, never from the public API. Each change
 * is published to the revocation feed in its transaction, so every running instance enforces it
 * within the gate's bound; `onChange` lets an in-process caller apply it at once.
 */
export class AccountService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly onChange: (changes: Change[]) => void = () => {},
    private readonly context: RequestContext = CLI_CONTEXT,
  ) {}

  private async change(user: UserRow, type: AuditType, reason: string | null, write: (trx: Db['kysely']) => Promise<unknown>): Promise<AccountSummary> {
    const change: Change = { kind: 'user_changed', user_id: user.id }
    await this.db.kysely.transaction().execute(async (trx) => {
      await write(trx)
      await publishChanges(trx, [change])
      await recordEvent(trx, this.clock, { type, userId: user.id, reason, context: this.context })
    })
    this.onChange([change])
    return summarise((await users.findById(this.db.kysely, user.id))!)
  }

  async events(filter: { email?: string; since?: number; limit?: number }): Promise<AuditEventRow[]> {
    const userId = filter.email === undefined ? undefined : (await this.find(filter.email)).id
    return auditEvents.list(this.db.kysely, { userId, since: filter.since, limit: filter.limit ?? 1000 })
  }

  private async find(rawEmail: string): Promise<UserRow> {
    const email = normaliseEmail(rawEmail)
    const user = await users.findByEmail(this.db.kysely, email)
    if (!user) throw new UnknownUserError(email)
    return user
  }

  async list(limit = 1000): Promise<AccountSummary[]> {
    return (await users.list(this.db.kysely, limit)).map(summarise)
  }

  async verify(email: string): Promise<AccountSummary> {
    const user = await this.find(email)
    return this.change(user, 'account.verified', null, (trx) => users.markVerified(trx, user.id, this.clock.now()))
  }

  async disable(email: string, reason: DisableReason): Promise<AccountSummary> {
    const user = await this.find(email)
    return this.change(user, 'account.disabled', reason, (trx) => users.setStatus(trx, user.id, 'disabled', reason, this.clock.now()))
  }

  async enable(email: string): Promise<AccountSummary> {
    const user = await this.find(email)
    return this.change(user, 'account.enabled', null, (trx) => users.setStatus(trx, user.id, 'active', null, this.clock.now()))
  }
}

import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users, type UserRow } from '../db/repositories.ts'
import { normaliseEmail } from '../auth/input.ts'

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

/** Operator actions on account state; reached from the CLI, never from the public API. */
export class AccountService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

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
    await users.markVerified(this.db.kysely, user.id, this.clock.now())
    return summarise((await users.findById(this.db.kysely, user.id))!)
  }

  async disable(email: string, reason: DisableReason): Promise<AccountSummary> {
    const user = await this.find(email)
    await users.setStatus(this.db.kysely, user.id, 'disabled', reason, this.clock.now())
    return summarise((await users.findById(this.db.kysely, user.id))!)
  }

  async enable(email: string): Promise<AccountSummary> {
    const user = await this.find(email)
    await users.setStatus(this.db.kysely, user.id, 'active', null, this.clock.now())
    return summarise((await users.findById(this.db.kysely, user.id))!)
  }
}

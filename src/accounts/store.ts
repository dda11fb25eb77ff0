import type { Kysely } from 'kysely'
import type { Database } from '../db/schema.ts'
import type { UserRow, SessionRow } from '../db/repositories.ts'

type Executor = Kysely<Database>

export interface UserFilter {
  /** A prefix of the normalised address. */
  emailPrefix?: string
  status?: 'active' | 'unverified' | 'disabled'
}

/** Storage calls of the operator and data-owner features of accounts. */
export const accountStore = {
  /** Everything stored for one user except its watchlists and audit events; the user row last. */
  async deleteUserData(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('mail_outbox').where('user_id', '=', userId).execute()
    await db.deleteFrom('one_time_tokens').where('user_id', '=', userId).execute()
    await db.deleteFrom('sessions').where('user_id', '=', userId).execute()
    await db.deleteFrom('users').where('id', '=', userId).execute()
  },

  /** Oldest first by (created_at, id), strictly after `after`. */
  async page(db: Executor, filter: UserFilter, after: { t: number; id: string } | null, limit: number): Promise<UserRow[]> {
    let query = db.selectFrom('users').selectAll()
    if (filter.emailPrefix !== undefined) {
      // substr, not LIKE: a prefix holding % or _ means itself.
      query = query.where((eb) => eb(eb.fn('substr', ['email', eb.lit(1), eb.val(filter.emailPrefix!.length)]), '=', filter.emailPrefix!))
    }
    if (filter.status === 'disabled') query = query.where('status', '=', 'disabled')
    if (filter.status === 'active') query = query.where('status', '=', 'active').where('email_verified_at', 'is not', null)
    if (filter.status === 'unverified') query = query.where('status', '=', 'active').where('email_verified_at', 'is', null)
    if (after) query = query.where((eb) => eb.or([eb('created_at', '>', after.t), eb.and([eb('created_at', '=', after.t), eb('id', '>', after.id)])]))
    return query.orderBy('created_at').orderBy('id').limit(limit).execute()
  },

  async liveSessionCounts(db: Executor, userIds: string[], now: number): Promise<Map<string, number>> {
    if (userIds.length === 0) return new Map()
    const rows = await db
      .selectFrom('sessions')
      .select((eb) => ['user_id', eb.fn.countAll<number | string>().as('count')])
      .where('user_id', 'in', userIds)
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .groupBy('user_id')
      .execute()
    return new Map(rows.map((row) => [row.user_id, Number(row.count)]))
  },

  async allSessions(db: Executor, userId: string): Promise<SessionRow[]> {
    return db.selectFrom('sessions').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute()
  },

  /** What the mail queue holds for the user, without the bodies (they carry one-time tokens). */
  async mailOf(db: Executor, userId: string) {
    return db
      .selectFrom('mail_outbox')
      .select(['id', 'kind', 'recipient', 'subject', 'created_at', 'sent_at', 'failed_at'])
      .where('user_id', '=', userId)
      .orderBy('created_at')
      .orderBy('id')
      .execute()
  },
}

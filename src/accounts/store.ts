import { sql, type Kysely, type SelectQueryBuilder } from 'kysely'
import type { Engine } from '../db/index.ts'
import type { Database } from '../db/schema.ts'
import type { UserRow, SessionRow } from '../db/repositories.ts'
import type { TimeId } from '../cursor.ts'

type Executor = Kysely<Database>

/** Before every (created_at, id): the first page is the same index range as every other. */
const FIRST: TimeId = { t: -1, id: '' }
/** Above any character an address can hold: `prefix + TOP` bounds the addresses that start with it. */
const TOP = '\u{10FFFF}'

/**
 * The address as an ordered key. PostgreSQL compares it byte-wise (collate "C"), served by the
 * index migration 0008 makes for it, so the prefix range holds whatever the database's collation;
 * SQLite's default comparison is byte-wise already, and its unique index serves it.
 */
function addressKey(engine: Engine) {
  return engine === 'postgres' ? sql<string>`"email" collate "C"` : sql<string>`"email"`
}

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

  /**
   * Oldest first by (created_at, id), strictly after `after`; each state filter is served by its
   * partial index (migration 0008), whose condition the literals here repeat.
   */
  async page(db: Executor, filter: Pick<UserFilter, 'status'>, after: TimeId | null, limit: number): Promise<UserRow[]> {
    const from = after ?? FIRST
    let query = db.selectFrom('users').selectAll()
    query = withStatus(query, filter.status)
    return query
      .where((eb) => eb(eb.refTuple('created_at', 'id'), '>', eb.tuple(from.t, from.id)))
      .orderBy('created_at')
      .orderBy('id')
      .limit(limit)
      .execute()
  },

  /**
   * Users whose address starts with `prefix`, in address order strictly after `afterEmail`: a range
   * of the address index (never a scan, whatever the prefix matches), then the state filter on
   * the rows in that range.
   */
  async pageByAddress(db: Executor, engine: Engine, filter: { emailPrefix: string; status?: UserFilter['status'] }, afterEmail: string | null, limit: number): Promise<UserRow[]> {
    const key = addressKey(engine)
    let query = db
      .selectFrom('users')
      .selectAll()
      .where(key, '>=', filter.emailPrefix)
      .where(key, '<', filter.emailPrefix + TOP)
    if (afterEmail !== null) query = query.where(key, '>', afterEmail)
    return withStatus(query, filter.status).orderBy(key).limit(limit).execute()
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

/** The account-state filter, in the literal form the partial indexes of migration 0008 are defined with. */
function withStatus(query: SelectQueryBuilder<Database, 'users', UserRow>, status: UserFilter['status']) {
  const active = sql.lit<'active'>('active')
  if (status === 'disabled') return query.where('status', '=', sql.lit<'disabled'>('disabled'))
  if (status === 'active') return query.where('status', '=', active).where('email_verified_at', 'is not', null)
  if (status === 'unverified') return query.where('status', '=', active).where('email_verified_at', 'is', null)
  return query
}

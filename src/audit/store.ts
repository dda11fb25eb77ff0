import type { Kysely, Selectable } from 'kysely'
import { hotQuery } from '../db/hot-query.ts'
import type { AuditEventsTable, Database } from '../db/schema.ts'
import { timeOrderedUuid } from '../text.ts'

export type AuditEventRow = Selectable<AuditEventsTable>

export interface EventFilter {
  userId?: string
  type?: string
  since?: number
  until?: number
}

// Every refresh and login writes one: compiled once (src/db/hot-query.ts).
const insertEvent = hotQuery<AuditEventRow, never>((db, arg) =>
  db.insertInto('audit_events').values({
    id: arg('id'),
    at: arg('at'),
    user_id: arg('user_id'),
    type: arg('type'),
    reason: arg('reason'),
    ip: arg('ip'),
    user_agent: arg('user_agent'),
    request_id: arg('request_id'),
    actor: arg('actor'),
  }),
)

/** Storage calls of the audit trail; the executor comes first, so they run inside a transaction too. */
export const auditStore = {
  async insert(db: Kysely<Database>, event: Omit<AuditEventRow, 'id'>): Promise<void> {
    // Time-ordered ids keep each commit's new rows on the last pages of the index.
    await insertEvent(db, { id: timeOrderedUuid(event.at), ...event })
  },

  /** Many events at once (an import's batch): one statement. */
  async insertMany(db: Kysely<Database>, events: Omit<AuditEventRow, 'id'>[]): Promise<void> {
    if (events.length === 0) return
    await db.insertInto('audit_events').values(events.map((event) => ({ id: timeOrderedUuid(event.at), ...event }))).execute()
  },

  /** Retention: deletes up to `limit` of the oldest events recorded before `before`. */
  async deleteOlderThan(db: Kysely<Database>, before: number, limit: number): Promise<number> {
    const old = db.selectFrom('audit_events').select('id').where('at', '<', before).limit(limit)
    return Number((await db.deleteFrom('audit_events').where('id', 'in', old).executeTakeFirst()).numDeletedRows)
  },

  /** Oldest first (the CLI's view). */
  async list(db: Kysely<Database>, filter: EventFilter & { limit: number }): Promise<AuditEventRow[]> {
    let query = filtered(db, filter)
    // One user's events: ordered as the (user_id, at, id) index is, so PostgreSQL's planner reads that
    // range rather than walking the (at, id) index and filtering (it chose that on a small table).
    if (filter.userId !== undefined) query = query.orderBy('user_id')
    return query.orderBy('at').orderBy('id').limit(filter.limit).execute()
  },

  /**
   * Newest first, strictly after the keyset position (at, id) of the previous page's last row (the
   * first page starts above every row, so it is the same index range as the rest). A type or a
   * user narrows it to the (type, at, id) or (user_id, at, id) index: a rare type is a short range,
   * never a walk of every event.
   */
  async pageNewestFirst(db: Kysely<Database>, filter: EventFilter, after: { t: number; id: string } | null, limit: number): Promise<AuditEventRow[]> {
    const from = after ?? { t: Number.MAX_SAFE_INTEGER, id: '' }
    return filtered(db, filter)
      .where((eb) => eb(eb.refTuple('at', 'id'), '<', eb.tuple(from.t, from.id)))
      .orderBy('at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute()
  },
}

function filtered(db: Kysely<Database>, filter: EventFilter) {
  let query = db.selectFrom('audit_events').selectAll()
  if (filter.userId !== undefined) query = query.where('user_id', '=', filter.userId)
  if (filter.type !== undefined) query = query.where('type', '=', filter.type)
  if (filter.since !== undefined) query = query.where('at', '>=', filter.since)
  if (filter.until !== undefined) query = query.where('at', '<', filter.until)
  return query
}

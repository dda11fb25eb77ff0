import type { Db } from '../db/index.ts'
import { timeIdOf, type CursorCodec } from '../cursor.ts'
import { AppError } from '../errors.ts'
import { auditStore, type AuditEventRow, type EventFilter } from './store.ts'

export interface EventView {
  id: string
  at: string
  type: string
  user_id: string | null
  actor: string | null
  reason: string | null
  ip: string | null
  user_agent: string | null
  request_id: string | null
}

export function eventView(row: AuditEventRow): EventView {
  return {
    id: row.id,
    at: new Date(row.at).toISOString(),
    type: row.type,
    user_id: row.user_id,
    actor: row.actor,
    reason: row.reason,
    ip: row.ip,
    user_agent: row.user_agent,
    request_id: row.request_id,
  }
}

/** Reading the audit trail: the CLI, the admin API and a user's export. Writing is recordEvent. */
export class AuditLog {
  constructor(
    private readonly db: Db,
    private readonly cursors: CursorCodec,
  ) {}

  /** Oldest first, at most `limit` (the CLI). */
  list(filter: EventFilter & { limit?: number }): Promise<AuditEventRow[]> {
    return auditStore.list(this.db.kysely, { ...filter, limit: filter.limit ?? 1000 })
  }

  /** Everything recorded about one user, oldest first (the export). */
  async ofUser(userId: string): Promise<EventView[]> {
    return (await auditStore.list(this.db.kysely, { userId, limit: Number.MAX_SAFE_INTEGER })).map(eventView)
  }

  /**
   * One page, newest first. The cursor is bound to the filter it was issued for, so it cannot be
   * replayed against another filter (which would silently skip or repeat rows).
   */
  async page(filter: EventFilter, query: { limit?: number; cursor?: string }): Promise<{ events: EventView[]; next_cursor: string | null }> {
    const limit = query.limit ?? 20
    const scope = `admin-events:${JSON.stringify(filter)}`
    let after: { t: number; id: string } | null = null
    if (query.cursor !== undefined) {
      after = timeIdOf(this.cursors.open(scope, query.cursor))
      if (!after) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'cursor', message: 'is not a cursor this service issued for this query' }] })
    }
    const rows = await auditStore.pageNewestFirst(this.db.kysely, filter, after, limit + 1)
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return { events: page.map(eventView), next_cursor: rows.length > limit && last ? this.cursors.seal(scope, { t: last.at, id: last.id }) : null }
  }
}

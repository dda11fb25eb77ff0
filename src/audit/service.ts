import type { Db } from '../db/index.ts'
import type { TimeId } from '../cursor.ts'
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
  constructor(private readonly db: Db) {}

  /** Oldest first, at most `limit` (the CLI). */
  list(filter: EventFilter & { limit?: number }): Promise<AuditEventRow[]> {
    return auditStore.list(this.db.kysely, { ...filter, limit: filter.limit ?? 1000 })
  }

  /** Everything recorded about one user, oldest first (the export). */
  async ofUser(userId: string): Promise<EventView[]> {
    return (await auditStore.list(this.db.kysely, { userId, limit: Number.MAX_SAFE_INTEGER })).map(eventView)
  }

  /** Newest first, strictly after the keyset position `after` (the admin API pages with it). */
  newestFirst(filter: EventFilter, after: TimeId | null, limit: number): Promise<AuditEventRow[]> {
    return auditStore.pageNewestFirst(this.db.kysely, filter, after, limit)
  }
}

import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database } from '../db/schema.ts'
import { auditEvents } from '../db/repositories.ts'

/** Where an action came from; the CLI passes its own. */
export interface RequestContext {
  ip: string | null
  userAgent: string | null
  requestId: string | null
}

export const CLI_CONTEXT: RequestContext = { ip: null, userAgent: 'portcullis-cli', requestId: null }

export type AuditType =
  | 'account.registered'
  | 'email.verified'
  | 'login.succeeded'
  | 'login.failed'
  | 'login.throttled'
  | 'token.refreshed'
  | 'logout'
  | 'logout.all'
  | 'session.revoked'
  | 'password.reset_requested'
  | 'password.reset'
  | 'password.changed'
  | 'account.disabled'
  | 'account.enabled'
  | 'account.verified'

/**
 * One row per security-relevant event. Never a password, token or hash: only who (if known), what,
 * why (a fixed reason word), and from where.
 */
export async function recordEvent(
  db: Kysely<Database>,
  clock: Clock,
  event: { type: AuditType; userId?: string | null; reason?: string | null; context: RequestContext },
): Promise<void> {
  await auditEvents.insert(db, {
    at: clock.now(),
    user_id: event.userId ?? null,
    type: event.type,
    reason: event.reason ?? null,
    ip: event.context.ip,
    user_agent: event.context.userAgent?.slice(0, 512) ?? null,
    request_id: event.context.requestId,
  })
}

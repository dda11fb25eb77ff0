import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database } from '../db/schema.ts'
import { auditStore } from './store.ts'

/** Where an action came from, and who acted when it was not the user (an API key, the CLI). */
export interface RequestContext {
  ip: string | null
  userAgent: string | null
  requestId: string | null
  /** `api_key:<id>` or `cli`; absent when the user acts on their own account. */
  actor?: string | null
}

export const CLI_CONTEXT: RequestContext = { ip: null, userAgent: 'portcullis-cli', requestId: null, actor: 'cli' }
/** The service's own housekeeping (retention). */
export const SYSTEM_CONTEXT: RequestContext = { ip: null, userAgent: null, requestId: null, actor: 'system' }

export const AUDIT_TYPES = [
  'account.registered',
  'email.verified',
  'login.succeeded',
  'login.failed',
  'login.throttled',
  'token.refreshed',
  'logout',
  'logout.all',
  'session.revoked',
  'password.reset_requested',
  'password.reset',
  'password.changed',
  'password.rehashed',
  'account.disabled',
  'account.enabled',
  'account.verified',
  'account.deleted',
  'account.exported',
  'sessions.revoked_by_operator',
  'api_key.created',
  'api_key.revoked',
  'mfa.totp_enrolment_started',
  'mfa.factor_added',
  'mfa.factor_removed',
  'mfa.recovery_codes_issued',
  'mfa.recovery_code_used',
  'mfa.challenge_issued',
  'mfa.verify_failed',
  'mfa.step_up',
  'mfa.reset',
  'mfa.factor_renamed',
  'mfa.passkey_counter_regressed',
  'oidc.linked',
  'oidc.unlinked',
  'oidc.refused',
  'client.created',
  'client.updated',
  'client.removed',
  'client.secret_rotated',
  'resource.created',
  'resource.updated',
  'resource.removed',
  'profile.updated',
  'email.change_requested',
  'email.change_cancelled',
  'email.changed',
  'webhook.created',
  'webhook.updated',
  'webhook.removed',
  'webhook.secret_rotated',
  'webhook.delivery_retried',
  'webhook.disabled',
  'role.created',
  'role.updated',
  'role.removed',
  'user.roles_changed',
  'user.app_metadata_changed',
  'user.user_metadata_changed',
  'organization.created',
  'organization.updated',
  'organization.deleted',
  'organization.member_added',
  'organization.member_updated',
  'organization.member_removed',
  'organization.invitation_created',
  'organization.invitation_revoked',
  'organization.invitation_accepted',
] as const

export type AuditType = (typeof AUDIT_TYPES)[number]

/**
 * One row per security-relevant event, written in the transaction of the change it records. Never
 * a password, token, hash or e-mail address: only who (if known), what, why (a fixed reason
 * word), by whom, and from where.
 */
export async function recordEvent(
  db: Kysely<Database>,
  clock: Clock,
  event: { type: AuditType; userId?: string | null; reason?: string | null; context: RequestContext },
): Promise<void> {
  await auditStore.insert(db, {
    at: clock.now(),
    user_id: event.userId ?? null,
    type: event.type,
    reason: event.reason ?? null,
    ip: event.context.ip,
    user_agent: event.context.userAgent?.slice(0, 512) ?? null,
    request_id: event.context.requestId,
    actor: event.context.actor ?? null,
  })
}

/** The same event for many users at once (an import's batch), in one statement. */
export async function recordEvents(
  db: Kysely<Database>,
  clock: Clock,
  event: { type: AuditType; userIds: readonly string[]; reason?: string | null; context: RequestContext },
): Promise<void> {
  const at = clock.now()
  await auditStore.insertMany(db, event.userIds.map((userId) => ({
    at,
    user_id: userId,
    type: event.type,
    reason: event.reason ?? null,
    ip: event.context.ip,
    user_agent: event.context.userAgent?.slice(0, 512) ?? null,
    request_id: event.context.requestId,
    actor: event.context.actor ?? null,
  })))
}

import { randomBytes, randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Db, Engine } from '../db/index.ts'
import type { Database } from '../db/schema.ts'
import { deliveries, endpoints, nextSequence } from './store.ts'

type Executor = Kysely<Database>

/** What an application can hear about (docs/webhooks.md); `*` in an endpoint's filter is all of them. */
export const WEBHOOK_EVENTS = [
  'user.created',
  'user.verified',
  'user.updated',
  'user.disabled',
  'user.enabled',
  'user.deleted',
  'user.password_changed',
  'user.mfa_enabled',
  'user.mfa_disabled',
  'user.identity_linked',
  'user.identity_unlinked',
  'session.revoked_all',
  'oauth.grant_revoked',
  'user.roles_changed',
  'organization.created',
  'organization.updated',
  'organization.deleted',
  'organization.member_added',
  'organization.member_updated',
  'organization.member_removed',
] as const
export type WebhookEventType = (typeof WEBHOOK_EVENTS)[number]

/** The account an event is about, as the change's transaction sees it. */
export interface EventSubject {
  id: string
  email: string
}

/**
 * The seam the account modules write events through, in the transaction of the change they report
 * (a transactional outbox: the event exists exactly when the change does). `data` is what changed:
 * ids, names and reasons, never a password, token, code or secret.
 */
export interface AccountEvents {
  emit(trx: Executor, type: WebhookEventType, subject: EventSubject, data?: Record<string, unknown>): Promise<void>
}

/**
 * Writes one delivery row per endpoint that takes the event. The endpoints are read in the event's
 * own transaction (store.ts, `endpoints.subscribed`), so the set an event fans out to is the one
 * committed when it is written, whichever instance or process writes it: an endpoint whose creation
 * has returned gets every later event, and a removed one gets none and never makes the change fail.
 * A change that no endpoint wants costs that one read; one that some want, one sequence upsert and
 * one insert more.
 */
export class WebhookOutbox implements AccountEvents {
  constructor(
    private readonly engine: Engine,
    private readonly clock: Clock,
    /** Told after rows were written, so the queue looks for them soon (the poll finds them anyway). */
    private readonly queued: () => void,
  ) {}

  async emit(trx: Executor, type: WebhookEventType, subject: EventSubject, data: Record<string, unknown> = {}): Promise<void> {
    const targets = await endpoints.subscribed(trx, this.engine, type)
    if (targets.length === 0) return
    const now = this.clock.now()
    const sequence = await nextSequence(trx, subject.id)
    // A deleted account's last event leaves its address out: the application knows whose it was.
    const about = type === 'user.deleted' ? { user_id: subject.id, sequence } : { user_id: subject.id, sequence, email: subject.email }
    const payload = JSON.stringify({ type, timestamp: new Date(now).toISOString(), data: { ...about, ...data } })
    const eventId = `msg_${randomBytes(16).toString('base64url')}`
    await deliveries.insert(
      trx,
      targets.map((endpoint) => ({
        id: randomUUID(),
        event_id: eventId,
        endpoint_id: endpoint.id,
        user_id: subject.id,
        sequence,
        type,
        payload,
        created_at: now,
        next_attempt_at: now,
      })),
    )
    this.queued()
  }
}

/** The outbox of a process that writes events but does not deliver them (the CLI): a running instance's queue finds the rows. */
export function writeOnlyOutbox(db: Db, clock: Clock): WebhookOutbox {
  return new WebhookOutbox(db.engine, clock, () => {})
}

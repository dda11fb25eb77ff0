import { randomBytes, randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
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

/** An endpoint as the outbox needs it: which events it takes. */
export interface Subscriber {
  id: string
  events: ReadonlySet<string>
}

/**
 * Writes one delivery row per endpoint that takes the event. The endpoints come from `subscribers()`,
 * a list kept in memory (src/webhooks/service.ts), so a change of an account with no endpoint
 * configured costs nothing, and one with endpoints costs one sequence upsert and one insert.
 */
export class WebhookOutbox implements AccountEvents {
  constructor(
    private readonly clock: Clock,
    private readonly subscribers: () => readonly Subscriber[],
    /** Told after rows were written, so the queue looks for them soon (the poll finds them anyway). */
    private readonly queued: () => void,
  ) {}

  async emit(trx: Executor, type: WebhookEventType, subject: EventSubject, data: Record<string, unknown> = {}): Promise<void> {
    const targets = this.subscribers().filter((endpoint) => endpoint.events.has('*') || endpoint.events.has(type))
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

/** The enabled endpoints' filters as stored now. */
export async function storedSubscribers(db: Executor): Promise<Subscriber[]> {
  return (await endpoints.list(db)).filter((row) => row.enabled === 1).map((row) => ({ id: row.id, events: new Set(row.events.split(' ')) }))
}

/**
 * The outbox of a process that writes events but does not deliver them (the CLI): the endpoints as
 * stored when it starts; a running instance's queue finds the rows and delivers them.
 */
export async function writeOnlyOutbox(db: Executor, clock: Clock): Promise<WebhookOutbox> {
  const subscribers = await storedSubscribers(db)
  return new WebhookOutbox(clock, () => subscribers, () => {})
}

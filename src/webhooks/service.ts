import { createHmac, randomBytes, randomUUID } from 'node:crypto'
import { CLI_CONTEXT, recordEvent, type RequestContext } from '../audit/events.ts'
import { KeyEncryptionError, type KeySealer } from '../auth/key-encryption.ts'
import type { Rewrap } from '../auth/keys.ts'
import type { Clock } from '../clock.ts'
import { keysetPage, type CursorCodec } from '../cursor.ts'
import type { Db } from '../db/index.ts'
import { AppError, type ErrorDetail } from '../errors.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'
import { DurableQueue, type DurableQueueNames, type DurableQueueOptions } from '../queue/durable.ts'
import { cleanLabel, isUuid } from '../text.ts'
import { refusedHost } from './addresses.ts'
import { WEBHOOK_EVENTS, WebhookOutbox } from './events.ts'
import { Sender, systemResolve, Unreachable, type Resolve } from './sender.ts'
import { deliveries, deliveryTable, endpoints, type DeliveryRow, type EndpointRow } from './store.ts'

/**
 * At least once, retried from about 5 s, doubling with ±20% jitter up to an hour apart, for 3 days.
 * A claimed row is this instance's for two minutes: its lane (at most LANE_DEPTH rows, each at
 * most TIMEOUT_MS) is done well within that.
 */
export const WEBHOOK_QUEUE: DurableQueueOptions = {
  pollMs: 500,
  leaseMs: 120_000,
  retryBaseMs: 5000,
  retryMaxMs: 3600_000,
  maxAgeMs: 3 * 24 * 3600_000,
  // One lane-full: a claim brings no more of an endpoint's rows than its lane takes (rows beyond it
  // would each cost a write to give back); with several busy endpoints a pass claims again.
  batch: 5,
  jitter: 0.2,
}
/** A receiver has this long to answer; a timeout is a failure like a 5xx. */
export const TIMEOUT_MS = 10_000
/** Rows of one endpoint claimed and waiting on one instance: its lane (src/queue/durable.ts). */
const LANE_DEPTH = WEBHOOK_QUEUE.batch
/** How long an event that keeps failing holds back the same user's later events (for that endpoint). */
export const HOLD_MS = 60_000
/** An endpoint failing without a success for this long is disabled. */
export const DISABLE_AFTER_MS = 3 * 24 * 3600_000
/** After a rotation the previous secret signs too, for this long. */
export const SECRET_OVERLAP_MS = 24 * 3600_000
const URL_MAX = 2048
const DESCRIPTION_MAX = 200
/** Endpoints a deployment may have: each is a lane, and a row the fan-out of every event reads. */
const ENDPOINTS_MAX = 20

/** Published: operators alert on these names. */
const NAMES: DurableQueueNames<DeliveryRow> = {
  sent: { name: 'portcullis_webhooks_sent_total', help: 'Webhook deliveries an endpoint accepted (2xx).' },
  retried: { name: 'portcullis_webhooks_retried_total', help: 'Webhook deliveries that failed and were rescheduled.' },
  failed: { name: 'portcullis_webhooks_failed_total', help: 'Webhook deliveries given up (3 days of failures, or the endpoint disabled or removed).' },
  queued: { name: 'portcullis_webhooks_queued', help: 'Webhook deliveries waiting, on every instance.' },
  label: { name: 'type', of: (row) => row.type },
  log: {
    givenUp: 'webhook delivery given up',
    retrying: 'webhook delivery failed; will retry',
    passFailed: 'webhook delivery pass failed',
    fields: (row) => ({ webhook: { id: row.id, event_id: row.event_id, endpoint_id: row.endpoint_id, type: row.type, attempts: row.attempts } }),
  },
}

/** A failure no retry can cure: the endpoint is gone or disabled, or the payload was erased. */
class Undeliverable extends Error {}

/** The endpoint as the admin API shows it: never its secret. */
export interface WebhookView {
  id: string
  url: string
  events: string[]
  description: string | null
  enabled: boolean
  disabled_reason: 'failing' | 'operator' | null
  created_at: string
  updated_at: string
}

export interface DeliveryView {
  id: string
  webhook_id: string
  type: string
  sequence: number
  attempts: number
  last_status: number | null
  last_error: string | null
  next_attempt_at: string | null
  delivered_at: string | null
  failed_at: string | null
  created_at: string
}

export interface WebhookInput {
  url: string
  events: string[]
  description?: string | null | undefined
  enabled?: boolean | undefined
}

export interface WebhookDeps {
  db: Db
  clock: Clock
  sealer: KeySealer
  logger: Logger
  metrics: Metrics
  cursors: CursorCodec
  /** Production: only https endpoints, never to a special-use address (src/webhooks/addresses.ts). */
  production: boolean
  /** How endpoint names become addresses; the system's resolver unless a test gives its own. */
  resolve?: Resolve
  /** Queue timings (tests make them short). */
  queue?: Partial<DurableQueueOptions>
  /** The receiver's time to answer (tests make it short). */
  timeoutMs?: number
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())
/** The sealed secret names its endpoint, so a secret copied onto another row does not open there. */
const secretAad = (id: string) => `webhook_secret:${id}`

/** A new signing secret in the Standard Webhooks form: `whsec_` and base64 of 32 random bytes. */
function newSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`
}

/** Standard Webhooks' signature: `v1,` and base64 of HMAC-SHA256(key, `${id}.${timestamp}.${body}`). */
export function signature(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64')
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`
}

/**
 * Webhooks (docs/webhooks.md): the operators' endpoints, the outbox the account modules write events
 * into, and the delivery queue that signs and sends them, a lane per endpoint, in order per user.
 */
export class WebhookService {
  readonly outbox: WebhookOutbox
  private readonly queue: DurableQueue<DeliveryRow>
  private kickSoon: NodeJS.Timeout | null = null
  private readonly timeoutMs: number
  private readonly sender: Sender
  /** The HTTP status of each row's attempt under way, until its outcome is written. */
  private readonly statusOf = new Map<string, number | null>()

  constructor(private readonly deps: WebhookDeps) {
    this.timeoutMs = deps.timeoutMs ?? TIMEOUT_MS
    this.outbox = new WebhookOutbox(deps.db.engine, deps.clock, () => this.queuedSoon())
    this.sender = new Sender({ production: deps.production, resolve: deps.resolve ?? systemResolve, timeoutMs: this.timeoutMs })
    const options = { ...WEBHOOK_QUEUE, ...deps.queue }
    const table = deliveryTable.store(deps.db)
    this.queue = new DurableQueue({
      // The outcome's write also records the HTTP status of the attempt (statusOf), in one statement.
      store: {
        ...table,
        delivered: (id, owner, at) => deliveries.outcome(deps.db.kysely, id, owner, { sent_at: at, last_error: null, lease_until: null, last_status: this.takeStatus(id) }),
        givenUp: (id, owner, at, error) => deliveries.outcome(deps.db.kysely, id, owner, { failed_at: at, last_error: error, lease_until: null, last_status: this.takeStatus(id) }),
        retryAt: (id, owner, at, error) => deliveries.outcome(deps.db.kysely, id, owner, { next_attempt_at: at, last_error: error, lease_until: null, last_status: this.takeStatus(id) }),
        claim: (owner, now, leaseMs, limit, skipLanes) => deliveries.claim(deps.db, owner, now, leaseMs, limit, skipLanes, HOLD_MS),
        release: (id, owner) => deliveries.release(deps.db.kysely, id, owner),
      },
      deliver: (row) => this.deliver(row),
      isPermanent: (error) => error instanceof Undeliverable,
      clock: deps.clock,
      logger: deps.logger,
      metrics: deps.metrics,
      options,
      names: NAMES,
      lanes: { of: (row) => row.endpoint_id, depth: LANE_DEPTH, unreachable: (error) => error instanceof Unreachable },
    })
  }

  private get db() {
    return this.deps.db.kysely
  }

  /** Starts delivering. The outbox needs nothing started: it reads the endpoints as each event is written. */
  async start(): Promise<void> {
    this.queue.start()
  }

  async stop(): Promise<void> {
    if (this.kickSoon) clearTimeout(this.kickSoon)
    await this.queue.stop()
    this.sender.close()
  }

  /** Resolves once every delivery due now has been tried once more (tests wait on it). */
  flush(): Promise<void> {
    return this.queue.flush()
  }

  /**
   * After an event was written: look for it once its transaction has likely committed. A kick before
   * the commit finds nothing; the poll finds it then.
   */
  private queuedSoon(): void {
    if (this.kickSoon) return
    this.kickSoon = setTimeout(() => {
      this.kickSoon = null
      this.queue.kick()
    }, 20)
    this.kickSoon.unref()
  }

  private takeStatus(id: string): number | null {
    const status = this.statusOf.get(id) ?? null
    this.statusOf.delete(id)
    return status
  }

  private async deliver(row: DeliveryRow): Promise<void> {
    const endpoint = await endpoints.find(this.db, row.endpoint_id)
    if (!endpoint) throw new Undeliverable('the endpoint was removed')
    if (endpoint.enabled !== 1) throw new Undeliverable('the endpoint is disabled')
    if (row.payload === null) throw new Undeliverable('the payload was erased')
    const now = this.deps.clock.now()
    const timestamp = Math.floor(now / 1000)
    const secrets = [this.deps.sealer.open(endpoint.secret, secretAad(endpoint.id))]
    if (endpoint.previous_secret !== null && (endpoint.previous_secret_until ?? 0) > now) secrets.push(this.deps.sealer.open(endpoint.previous_secret, secretAad(endpoint.id)))
    let status: number | null = null
    try {
      // A redirect is not followed (the sender never does): the endpoint registered is where events go.
      status = await this.sender.post(endpoint.url, {
        'content-type': 'application/json',
        'user-agent': 'Portcullis-Webhooks',
        'webhook-id': row.event_id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': secrets.map((secret) => signature(secret, row.event_id, timestamp, row.payload!)).join(' '),
      }, row.payload)
      if (status < 200 || status > 299) throw new Error(`the endpoint answered ${status}`)
    } catch (error) {
      this.statusOf.set(row.id, status)
      // The deliveries log gets the generic message (in production); the operator's log, the cause.
      if (error instanceof Unreachable && error.detail !== error.message) this.deps.logger.warn({ webhook: { endpoint_id: endpoint.id, event_id: row.event_id }, err: { message: error.detail } }, 'webhook endpoint could not be reached')
      // This failure disabled the endpoint: this row is given up with the others, not retried.
      if (await this.failed(endpoint, now)) throw new Undeliverable('the endpoint was disabled after three days of failures')
      throw error
    }
    this.statusOf.set(row.id, status)
    if (endpoint.failing_since !== null) await endpoints.succeeding(this.db, endpoint.id)
  }

  /**
   * A failure: the run of failures starts (or goes on); three days of it disable the endpoint, on
   * the audit trail, and give up its waiting deliveries. True when this failure disabled it.
   */
  private async failed(endpoint: EndpointRow, now: number): Promise<boolean> {
    if (endpoint.failing_since === null) {
      await endpoints.failing(this.db, endpoint.id, now)
      return false
    }
    if (now - endpoint.failing_since < DISABLE_AFTER_MS) return false
    const disabled = await this.db.transaction().execute(async (trx) => {
      if (!(await endpoints.disableIfFailingSince(trx, endpoint.id, now - DISABLE_AFTER_MS, now))) return false
      await deliveries.giveUpOpen(trx, endpoint.id, now, 'the endpoint was disabled after three days of failures')
      await recordEvent(trx, this.deps.clock, { type: 'webhook.disabled', userId: null, reason: endpoint.id, context: { ip: null, userAgent: null, requestId: null, actor: 'webhooks' } })
      return true
    })
    if (!disabled) return false
    this.deps.logger.error({ webhook: { endpoint_id: endpoint.id } }, 'webhook endpoint disabled after three days of failures')
    return true
  }

  // The operators' side: the admin API and the CLI.

  async create(input: WebhookInput, context: RequestContext = CLI_CONTEXT): Promise<{ webhook: WebhookView; secret: string }> {
    const clean = this.validated(input)
    const now = this.deps.clock.now()
    const id = randomUUID()
    const secret = newSecret()
    // Committed before this returns: from then on every event written, on any instance or by the
    // CLI, reads it in its own transaction (src/webhooks/events.ts) and fans out to it.
    await this.db.transaction().execute(async (trx) => {
      await endpoints.serialiseCreation(trx, this.deps.db.engine)
      // The insert before the count: on SQLite the transaction then holds the write lock while it
      // counts, rather than reading first and failing to upgrade when another process wrote meanwhile.
      await endpoints.insert(trx, {
        id, url: clean.url, events: clean.events.join(' '), description: clean.description, enabled: clean.enabled ? 1 : 0,
        secret: this.deps.sealer.seal(secret, secretAad(id)), previous_secret: null, previous_secret_until: null,
        failing_since: null, disabled_reason: null, created_at: now, updated_at: now,
      })
      if ((await endpoints.count(trx)) > ENDPOINTS_MAX) throw new AppError('LIMIT_EXCEEDED', { message: `A deployment holds at most ${ENDPOINTS_MAX} webhook endpoints.` })
      await recordEvent(trx, this.deps.clock, { type: 'webhook.created', userId: null, reason: id, context })
    })
    return { webhook: await this.get(id), secret }
  }

  async list(): Promise<WebhookView[]> {
    return (await endpoints.list(this.db)).map(view)
  }

  async get(id: string): Promise<WebhookView> {
    const row = isUuid(id) ? await endpoints.find(this.db, id) : null
    if (!row) throw new AppError('NOT_FOUND')
    return view(row)
  }

  /** Changes any of url, events, description, enabled. Enabling again clears the run of failures. */
  async update(id: string, patch: Partial<WebhookInput>, context: RequestContext = CLI_CONTEXT): Promise<WebhookView> {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
    const now = this.deps.clock.now()
    await this.db.transaction().execute(async (trx) => {
      const row = await endpoints.lockForUpdate(trx, id, now)
      if (!row) throw new AppError('NOT_FOUND')
      const merged = this.validated({
        url: patch.url ?? row.url,
        events: patch.events ?? row.events.split(' '),
        description: patch.description === undefined ? row.description : patch.description,
        enabled: patch.enabled ?? row.enabled === 1,
      })
      const enabling = merged.enabled && row.enabled !== 1
      await endpoints.update(trx, id, {
        url: merged.url, events: merged.events.join(' '), description: merged.description, enabled: merged.enabled ? 1 : 0,
        ...(enabling ? { failing_since: null, disabled_reason: null } : {}),
        ...(!merged.enabled && row.enabled === 1 ? { disabled_reason: 'operator' } : {}),
      })
      if (!merged.enabled && row.enabled === 1) await deliveries.giveUpOpen(trx, id, now, 'the endpoint was disabled')
      await recordEvent(trx, this.deps.clock, { type: 'webhook.updated', userId: null, reason: id, context })
    })
    return this.get(id)
  }

  async remove(id: string, context: RequestContext = CLI_CONTEXT): Promise<void> {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
    await this.db.transaction().execute(async (trx) => {
      if (!(await endpoints.delete(trx, id))) throw new AppError('NOT_FOUND')
      await recordEvent(trx, this.deps.clock, { type: 'webhook.removed', userId: null, reason: id, context })
    })
  }

  /** A new secret, shown once; the previous one keeps signing beside it for SECRET_OVERLAP_MS. */
  async rotateSecret(id: string, context: RequestContext = CLI_CONTEXT): Promise<{ webhook: WebhookView; secret: string }> {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
    const secret = newSecret()
    const now = this.deps.clock.now()
    await this.db.transaction().execute(async (trx) => {
      const row = await endpoints.lockForUpdate(trx, id, now)
      if (!row) throw new AppError('NOT_FOUND')
      await endpoints.update(trx, id, { secret: this.deps.sealer.seal(secret, secretAad(id)), previous_secret: row.secret, previous_secret_until: now + SECRET_OVERLAP_MS })
      await recordEvent(trx, this.deps.clock, { type: 'webhook.secret_rotated', userId: null, reason: id, context })
    })
    return { webhook: await this.get(id), secret }
  }

  async deliveries(id: string, query: { limit?: number; cursor?: string }): Promise<{ deliveries: DeliveryView[]; next_cursor: string | null }> {
    await this.get(id)
    const page = await keysetPage(this.deps.cursors, `webhook_deliveries:${id}`, query, (before, limit) => deliveries.page(this.db, id, before, limit), (row) => ({ t: row.created_at, id: row.id }))
    return { deliveries: page.rows.map(deliveryView), next_cursor: page.next_cursor }
  }

  /**
   * An operator's retry: the delivery is sent again now (202), whatever its state, with the same
   * webhook-id. One whose payload is gone (kept a week) is NOT_FOUND. It sends an event's data out
   * once more, so it is an audit event (`webhook.delivery_retried`, the endpoint's id and the
   * delivery's) like every other change an operator makes to webhooks.
   */
  async retry(id: string, deliveryId: string, context: RequestContext = CLI_CONTEXT): Promise<void> {
    await this.get(id)
    const row = isUuid(deliveryId) ? await deliveries.find(this.db, id, deliveryId) : null
    if (!row || row.payload === null) throw new AppError('NOT_FOUND', { message: row ? 'This delivery is too old to send again: its payload is kept for a week.' : undefined })
    await this.db.transaction().execute(async (trx) => {
      // False for one in flight right now: that attempt is the retry.
      await deliveries.retryNow(trx, id, deliveryId, this.deps.clock.now())
      await recordEvent(trx, this.deps.clock, { type: 'webhook.delivery_retried', userId: null, reason: `${id} ${deliveryId}`, context })
    })
    this.queue.kick()
  }

  private validated(input: WebhookInput): { url: string; events: string[]; description: string | null; enabled: boolean } {
    const details: ErrorDetail[] = []
    let url: URL | null = null
    try {
      url = input.url.length <= URL_MAX ? new URL(input.url) : null
    } catch {
      url = null
    }
    if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:') || url.username || url.password || url.hash) {
      details.push({ field: 'url', message: 'must be an http(s) URL without credentials or fragment' })
    } else if (this.deps.production && url.protocol !== 'https:') {
      details.push({ field: 'url', message: 'must be https in production' })
    } else if (this.deps.production && refusedHost(url)) {
      // A name is judged again at each connection, on what it resolves to then (src/webhooks/sender.ts).
      details.push({ field: 'url', message: 'must not point at a loopback, private, link-local or other special-use address in production' })
    }
    const events = [...new Set(input.events)]
    if (events.length === 0) details.push({ field: 'events', message: 'must name at least one event, or *' })
    const unknown = events.filter((event) => event !== '*' && !(WEBHOOK_EVENTS as readonly string[]).includes(event))
    if (unknown.length > 0) details.push({ field: 'events', message: `must be among ${WEBHOOK_EVENTS.join(', ')} or *; not ${unknown.join(', ')}` })
    const description = input.description === undefined || input.description === null ? { value: null, problem: null } : cleanLabel(input.description, DESCRIPTION_MAX)
    if (description.problem) details.push({ field: 'description', message: description.problem })
    if (details.length > 0) throw new AppError('VALIDATION_ERROR', { details })
    return { url: url!.toString(), events: events.includes('*') ? ['*'] : events, description: description.value || null, enabled: input.enabled ?? true }
  }
}

function view(row: EndpointRow): WebhookView {
  return {
    id: row.id,
    url: row.url,
    events: row.events.split(' '),
    description: row.description,
    enabled: row.enabled === 1,
    disabled_reason: row.disabled_reason as WebhookView['disabled_reason'],
    created_at: new Date(row.created_at).toISOString(),
    updated_at: new Date(row.updated_at).toISOString(),
  }
}

function deliveryView(row: DeliveryRow): DeliveryView {
  const open = row.sent_at === null && row.failed_at === null
  return {
    id: row.id,
    webhook_id: row.event_id,
    type: row.type,
    sequence: row.sequence,
    attempts: row.attempts,
    last_status: row.last_status,
    last_error: row.last_error,
    next_attempt_at: open ? iso(row.next_attempt_at) : null,
    delivered_at: iso(row.sent_at),
    failed_at: iso(row.failed_at),
    created_at: new Date(row.created_at).toISOString(),
  }
}

/** `portcullis keys rewrap`: webhook secrets move to the new key-encryption key with everything else. */
export const rewrapWebhookSecrets: Rewrap = async (trx, from, to) => {
  let rewrapped = 0
  for (const row of await endpoints.sealedSecrets(trx)) {
    const aad = secretAad(row.id)
    const changes: { secret?: string; previous_secret?: string } = {}
    for (const column of ['secret', 'previous_secret'] as const) {
      const sealed = row[column]
      if (sealed === null || to.tryOpen(sealed, aad) !== null) continue
      const clear = from.tryOpen(sealed, aad)
      if (clear === null) throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt the secret of webhook ${row.id}; nothing was changed`)
      changes[column] = to.seal(clear, aad)
    }
    if (Object.keys(changes).length === 0) continue
    await endpoints.update(trx, row.id, changes)
    rewrapped++
  }
  return rewrapped
}

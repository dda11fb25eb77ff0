import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'
import { WEBHOOK_EVENTS } from './events.ts'

/** The webhook admin routes' schemas: they validate, serialise and document (tag `admin`). */
const EventName = Type.String({ minLength: 1, maxLength: 64, description: `One of ${WEBHOOK_EVENTS.join(', ')}, or * for all` })
const Events = Type.Array(EventName, { minItems: 1, maxItems: 20 })
const Url = Type.String({ minLength: 1, maxLength: 2048, description: 'Where events are POSTed: in production https, and never to a loopback, private, link-local or other special-use address' })
const Description = Type.Union([Type.String({ maxLength: 200 }), Type.Null()])

export const Webhook = Type.Object({
  id: Type.String({ format: 'uuid' }),
  url: Type.String(),
  events: Type.Array(Type.String()),
  description: Type.Union([Type.String(), Type.Null()]),
  enabled: Type.Boolean(),
  disabled_reason: Type.Union([Type.Literal('failing'), Type.Literal('operator'), Type.Null()], { description: 'failing: three days of failed deliveries; operator: turned off by hand' }),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
})

export const WebhookCreateBody = Body({ url: Url, events: Events, description: Type.Optional(Description), enabled: Type.Optional(Type.Boolean()) })
export const WebhookPatchBody = Body({ url: Type.Optional(Url), events: Type.Optional(Events), description: Type.Optional(Description), enabled: Type.Optional(Type.Boolean()) })
export const WebhookParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const DeliveryParams = Type.Object({ id: Type.String({ maxLength: 64 }), delivery_id: Type.String({ maxLength: 64 }) })
export const DeliveriesQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
  },
  { additionalProperties: false },
)

const Secret = Type.String({ description: 'The signing secret (whsec_...): shown only in this answer' })
export const WebhookCreated = Envelope(Type.Object({ webhook: Webhook, secret: Secret }))
export const OneWebhook = Envelope(Type.Object({ webhook: Webhook }))
export const WebhookList = Envelope(Type.Object({ webhooks: Type.Array(Webhook) }))
export const WebhookDeleted = Envelope(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }))
export const SecretRotated = Envelope(Type.Object({ webhook: Webhook, secret: Type.String({ description: 'The new secret; the previous one also signs for 24 hours' }) }))

const When = Type.Union([Type.String({ format: 'date-time' }), Type.Null()])
export const Delivery = Type.Object({
  id: Type.String({ format: 'uuid' }),
  webhook_id: Type.String({ description: 'The event\'s webhook-id: the same on every attempt' }),
  type: Type.String(),
  sequence: Type.Integer({ description: 'The event\'s place among its user\'s events' }),
  attempts: Type.Integer(),
  last_status: Type.Union([Type.Integer(), Type.Null()], { description: 'The HTTP status of the last attempt; null when it got no answer' }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  next_attempt_at: When,
  delivered_at: When,
  failed_at: When,
  created_at: Type.String({ format: 'date-time' }),
})
export const DeliveriesPage = Envelope(Type.Object({ deliveries: Type.Array(Delivery), next_cursor: Type.Union([Type.String(), Type.Null()]) }))
export const RetryAccepted = Envelope(Type.Object({}))

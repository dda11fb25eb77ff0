import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance } from 'fastify'
import { actedBy, protectWithApiKeys, requireScope } from '../admin/routes.ts'
import type { ApiKeyService, Scope } from '../admin/api-keys.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import {
  DeliveriesPage, DeliveriesQuery, DeliveryParams, OneWebhook, RetryAccepted, SecretRotated,
  WebhookCreateBody, WebhookCreated, WebhookDeleted, WebhookList, WebhookParams, WebhookPatchBody,
} from './schemas.ts'
import type { WebhookService } from './service.ts'

/** The operators' webhook routes (docs/webhooks.md): API keys with webhooks:read or webhooks:write, like the rest of the admin API. */
export async function webhookAdminRoutes(fastify: FastifyInstance, options: { webhooks: WebhookService; apiKeys: ApiKeyService; limits: Limits }): Promise<void> {
  const { webhooks, apiKeys, limits } = options
  protectWithApiKeys(fastify, apiKeys, limits)
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['admin']
  const security = (scope: Scope) => [{ apiKey: [scope] }]
  const read = { onRequest: requireScope('webhooks:read') }
  const write = { onRequest: requireScope('webhooks:write') }

  app.post('/admin/webhooks', {
    ...write,
    schema: { tags, security: security('webhooks:write'), operationId: 'adminCreateWebhook', body: WebhookCreateBody, response: { 201: WebhookCreated } },
  }, async (request, reply) => reply.code(201).send(ok(await webhooks.create(request.body, actedBy(request)))))

  app.get('/admin/webhooks', {
    ...read,
    schema: { tags, security: security('webhooks:read'), operationId: 'adminListWebhooks', response: { 200: WebhookList } },
  }, async () => ok({ webhooks: await webhooks.list() }))

  app.get('/admin/webhooks/:id', {
    ...read,
    schema: { tags, security: security('webhooks:read'), operationId: 'adminGetWebhook', params: WebhookParams, response: { 200: OneWebhook } },
  }, async (request) => ok({ webhook: await webhooks.get(request.params.id) }))

  app.patch('/admin/webhooks/:id', {
    ...write,
    schema: { tags, security: security('webhooks:write'), operationId: 'adminUpdateWebhook', params: WebhookParams, body: WebhookPatchBody, response: { 200: OneWebhook } },
  }, async (request) => ok({ webhook: await webhooks.update(request.params.id, request.body, actedBy(request)) }))

  app.delete('/admin/webhooks/:id', {
    ...write,
    schema: { tags, security: security('webhooks:write'), operationId: 'adminDeleteWebhook', params: WebhookParams, response: { 200: WebhookDeleted } },
  }, async (request) => {
    await webhooks.remove(request.params.id, actedBy(request))
    return ok({ id: request.params.id, deleted: true as const })
  })

  app.post('/admin/webhooks/:id/secret', {
    ...write,
    schema: { tags, security: security('webhooks:write'), operationId: 'adminRotateWebhookSecret', params: WebhookParams, response: { 200: SecretRotated } },
  }, async (request) => ok(await webhooks.rotateSecret(request.params.id, actedBy(request))))

  app.get('/admin/webhooks/:id/deliveries', {
    ...read,
    schema: { tags, security: security('webhooks:read'), operationId: 'adminListWebhookDeliveries', params: WebhookParams, querystring: DeliveriesQuery, response: { 200: DeliveriesPage } },
  }, async (request) => ok(await webhooks.deliveries(request.params.id, request.query)))

  app.post('/admin/webhooks/:id/deliveries/:delivery_id/retry', {
    ...write,
    schema: { tags, security: security('webhooks:write'), operationId: 'adminRetryWebhookDelivery', params: DeliveryParams, response: { 202: RetryAccepted } },
  }, async (request, reply) => {
    await webhooks.retry(request.params.id, request.params.delivery_id, actedBy(request))
    return reply.code(202).send(ok({}))
  })
}

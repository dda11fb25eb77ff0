import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance } from 'fastify'
import type { ApiKeyService } from '../admin/api-keys.ts'
import { actedBy, protectWithApiKeys, requireScope } from '../admin/routes.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import type { ResourceRegistry } from './resources.ts'
import { CreateResourceBody, OneResource, ResourceDeleted, ResourceList, ResourceParams, UpdateResourceBody } from './resources-schemas.ts'

/** Operators register the APIs that accept the provider's access tokens (API keys with clients:*). */
export async function resourceAdminRoutes(fastify: FastifyInstance, options: { resources: ResourceRegistry; apiKeys: ApiKeyService; limits: Limits }): Promise<void> {
  const { resources, apiKeys, limits } = options
  protectWithApiKeys(fastify, apiKeys, limits)
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['admin']

  app.post('/admin/resources', {
    onRequest: requireScope('clients:write'),
    schema: {
      tags, security: [{ apiKey: ['clients:write'] }], operationId: 'adminCreateResource',
      description: 'Registers an API as a resource: a token asked for with resource= its URI has that audience and only its scopes. A URI registered already, or the built-in one, is VALIDATION_ERROR.',
      body: CreateResourceBody, response: { 201: OneResource },
    },
  }, async (request, reply) => reply.code(201).send(ok({ resource: await resources.create(request.body, actedBy(request)) })))

  app.get('/admin/resources', {
    onRequest: requireScope('clients:read'),
    schema: { tags, security: [{ apiKey: ['clients:read'] }], operationId: 'adminListResources', description: 'The registered resources, oldest first (the built-in API is not listed).', response: { 200: ResourceList } },
  }, async () => ok({ resources: await resources.list() }))

  app.get('/admin/resources/:id', {
    onRequest: requireScope('clients:read'),
    schema: { tags, security: [{ apiKey: ['clients:read'] }], operationId: 'adminGetResource', params: ResourceParams, response: { 200: OneResource } },
  }, async (request) => ok({ resource: await resources.get(request.params.id) }))

  app.patch('/admin/resources/:id', {
    onRequest: requireScope('clients:write'),
    schema: {
      tags, security: [{ apiKey: ['clients:write'] }], operationId: 'adminUpdateResource',
      description: 'Changes the name or the scopes (the URI stays). Tokens issued before keep what they carry until they expire.',
      params: ResourceParams, body: UpdateResourceBody, response: { 200: OneResource },
    },
  }, async (request) => ok({ resource: await resources.update(request.params.id, request.body, actedBy(request)) }))

  app.delete('/admin/resources/:id', {
    onRequest: requireScope('clients:write'),
    schema: { tags, security: [{ apiKey: ['clients:write'] }], operationId: 'adminDeleteResource', description: 'No new token for it from now on; access tokens already issued live out their 15 minutes.', params: ResourceParams, response: { 200: ResourceDeleted } },
  }, async (request) => ok(await resources.remove(request.params.id, actedBy(request))))
}

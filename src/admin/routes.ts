import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { AppError } from '../errors.ts'
import { requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import type { ClientRegistry } from '../provider/clients.ts'
import { ClientCreateBody, ClientCreated, ClientDeleted, ClientList, ClientParams, ClientPatchBody, ClientSecretRotated, OneClient } from '../provider/schemas.ts'
import type { ApiKeyPrincipal, ApiKeyService, Scope } from './api-keys.ts'
import { DisableBody, EventsPage, EventsQuery, MfaReset, OneUser, SessionsRevoked, UserDeleted, UserParams, UsersPage, UsersQuery } from './schemas.ts'
import type { AdminService } from './service.ts'

declare module 'fastify' {
  interface FastifyRequest {
    apiKey: ApiKeyPrincipal | null
  }
}

const BEARER = /^Bearer +(\S+) *$/i

/**
 * Every route of this scope takes an API key (`Authorization: Bearer pcl_...`), checked before the
 * body is read. A missing credential is AUTH_REQUIRED; anything that is not a live key (a user's
 * JWT included) is INVALID_API_KEY, and counts against the caller's IP: past the limit, RATE_LIMITED.
 */
export function protectWithApiKeys(scope: FastifyInstance, apiKeys: ApiKeyService, limits: Limits): void {
  scope.decorateRequest('apiKey', null)
  scope.addHook('onRequest', async (request) => {
    const header = request.headers.authorization
    if (typeof header !== 'string' || !/^Bearer(\s|$)/i.test(header)) throw new AppError('AUTH_REQUIRED')
    await limits.assertApiKeyAllowed(request.ip)
    const key = BEARER.exec(header)?.[1]
    request.apiKey = key === undefined ? null : await apiKeys.authenticate(key)
    if (!request.apiKey) {
      await limits.apiKeyFailed(request.ip)
      throw new AppError('INVALID_API_KEY')
    }
  })
}

/** A route-level hook: the key must carry `scope` (RFC 6750's insufficient_scope otherwise). */
export function requireScope(scope: Scope) {
  return async (request: FastifyRequest) => {
    if (!request.apiKey?.scopes.includes(scope)) {
      throw new AppError('INSUFFICIENT_SCOPE', { headers: { 'www-authenticate': `Bearer realm="portcullis", error="insufficient_scope", scope="${scope}"` } })
    }
  }
}

/** The request's context for the audit trail, with the key as the actor. */
export function actedBy(request: FastifyRequest) {
  return { ...requestContext(request), actor: `api_key:${request.apiKey!.id}` }
}

/** The admin API (docs/admin.md), in its own plugin scope under the base path. */
export async function adminRoutes(fastify: FastifyInstance, options: { admin: AdminService; apiKeys: ApiKeyService; limits: Limits; clients: ClientRegistry }): Promise<void> {
  const { admin, apiKeys, limits, clients } = options
  protectWithApiKeys(fastify, apiKeys, limits)
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['admin']
  const security = (scope: Scope) => [{ apiKey: [scope] }]

  app.get('/admin/users', {
    onRequest: requireScope('users:read'),
    schema: { tags, security: security('users:read'), operationId: 'adminListUsers', querystring: UsersQuery, response: { 200: UsersPage } },
  }, async (request) => ok(await admin.listUsers(request.query)))

  app.get('/admin/users/:id', {
    onRequest: requireScope('users:read'),
    schema: { tags, security: security('users:read'), operationId: 'adminGetUser', params: UserParams, response: { 200: OneUser } },
  }, async (request) => ok({ user: await admin.getUser(request.params.id) }))

  app.post('/admin/users/:id/disable', {
    onRequest: requireScope('users:write'),
    schema: { tags, security: security('users:write'), operationId: 'adminDisableUser', params: UserParams, body: DisableBody, response: { 200: OneUser } },
  }, async (request) => ok({ user: await admin.disable(request.params.id, request.body.reason, actedBy(request)) }))

  app.post('/admin/users/:id/enable', {
    onRequest: requireScope('users:write'),
    schema: { tags, security: security('users:write'), operationId: 'adminEnableUser', params: UserParams, response: { 200: OneUser } },
  }, async (request) => ok({ user: await admin.enable(request.params.id, actedBy(request)) }))

  app.post('/admin/users/:id/verify', {
    onRequest: requireScope('users:write'),
    schema: { tags, security: security('users:write'), operationId: 'adminVerifyUser', params: UserParams, response: { 200: OneUser } },
  }, async (request) => ok({ user: await admin.verify(request.params.id, actedBy(request)) }))

  app.post('/admin/users/:id/revoke-sessions', {
    onRequest: requireScope('users:write'),
    schema: { tags, security: security('users:write'), operationId: 'adminRevokeSessions', params: UserParams, response: { 200: SessionsRevoked } },
  }, async (request) => ok({ revoked: await admin.revokeSessions(request.params.id, actedBy(request)) }))

  app.post('/admin/users/:id/mfa/reset', {
    onRequest: requireScope('users:write'),
    schema: { tags, security: security('users:write'), operationId: 'adminResetMfa', params: UserParams, response: { 200: MfaReset } },
  }, async (request) => ok(await admin.resetMfa(request.params.id, actedBy(request))))

  app.delete('/admin/users/:id', {
    onRequest: requireScope('users:write'),
    schema: { tags, security: security('users:write'), operationId: 'adminDeleteUser', params: UserParams, response: { 200: UserDeleted } },
  }, async (request) => ok(await admin.deleteUser(request.params.id, actedBy(request))))

  app.get('/admin/events', {
    onRequest: requireScope('audit:read'),
    schema: { tags, security: security('audit:read'), operationId: 'adminListEvents', querystring: EventsQuery, response: { 200: EventsPage } },
  }, async (request) => ok(await admin.events(request.query)))

  // The OpenID provider's clients (src/provider/clients.ts): the same registry as `portcullis clients`.
  app.post('/admin/clients', {
    onRequest: requireScope('clients:write'),
    schema: { tags, security: security('clients:write'), operationId: 'adminCreateClient', body: ClientCreateBody, response: { 201: ClientCreated } },
  }, async (request, reply) => reply.code(201).send(ok(await clients.create(request.body, actedBy(request)))))

  app.get('/admin/clients', {
    onRequest: requireScope('clients:read'),
    schema: { tags, security: security('clients:read'), operationId: 'adminListClients', response: { 200: ClientList } },
  }, async () => ok({ clients: await clients.list() }))

  app.get('/admin/clients/:client_id', {
    onRequest: requireScope('clients:read'),
    schema: { tags, security: security('clients:read'), operationId: 'adminGetClient', params: ClientParams, response: { 200: OneClient } },
  }, async (request) => ok({ client: await clients.get(request.params.client_id) }))

  app.patch('/admin/clients/:client_id', {
    onRequest: requireScope('clients:write'),
    schema: { tags, security: security('clients:write'), operationId: 'adminUpdateClient', params: ClientParams, body: ClientPatchBody, response: { 200: OneClient } },
  }, async (request) => ok({ client: await clients.update(request.params.client_id, request.body, actedBy(request)) }))

  app.delete('/admin/clients/:client_id', {
    onRequest: requireScope('clients:write'),
    schema: { tags, security: security('clients:write'), operationId: 'adminDeleteClient', params: ClientParams, response: { 200: ClientDeleted } },
  }, async (request) => ok(await clients.remove(request.params.client_id, actedBy(request))))

  app.post('/admin/clients/:client_id/secret', {
    onRequest: requireScope('clients:write'),
    schema: { tags, security: security('clients:write'), operationId: 'adminRotateClientSecret', params: ClientParams, response: { 200: ClientSecretRotated } },
  }, async (request) => ok(await clients.rotateSecret(request.params.client_id, actedBy(request))))
}

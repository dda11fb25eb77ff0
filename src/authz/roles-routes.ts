import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance } from 'fastify'
import type { ApiKeyService, Scope } from '../admin/api-keys.ts'
import { actedBy, protectWithApiKeys, requireScope } from '../admin/routes.ts'
import { OneUser, UserParams } from '../admin/schemas.ts'
import type { AdminService } from '../admin/service.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import type { RolesService } from './roles.ts'
import { CreateRoleBody, OneRole, RoleDeleted, RoleDeleteQuery, RoleList, RoleParams, SetUserRolesBody, UpdateRoleBody, UpdateUserBody } from './roles-schemas.ts'

/**
 * The operators' roles catalogue, a user's global roles and their app_metadata (API keys;
 * docs/authorization.md), in their own admin scope. A user's view after a change is the admin
 * API's one (GET /admin/users/{id}), which shows both.
 */
export async function roleAdminRoutes(fastify: FastifyInstance, options: { roles: RolesService; admin: AdminService; apiKeys: ApiKeyService; limits: Limits }): Promise<void> {
  const { roles, admin, apiKeys, limits } = options
  protectWithApiKeys(fastify, apiKeys, limits)
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['admin']
  const security = (scope: Scope) => [{ apiKey: [scope] }]

  app.post('/admin/roles', {
    onRequest: requireScope('roles:write'),
    schema: {
      tags, security: security('roles:write'), operationId: 'adminCreateRole',
      description: 'Adds a role to the catalogue. A name already there is VALIDATION_ERROR.',
      body: CreateRoleBody, response: { 201: OneRole },
    },
  }, async (request, reply) => reply.code(201).send(ok({ role: await roles.create(request.body, actedBy(request)) })))

  app.get('/admin/roles', {
    onRequest: requireScope('roles:read'),
    schema: { tags, security: security('roles:read'), operationId: 'adminListRoles', description: 'The whole catalogue, by name.', response: { 200: RoleList } },
  }, async () => ok({ roles: await roles.list() }))

  app.get('/admin/roles/:name', {
    onRequest: requireScope('roles:read'),
    schema: { tags, security: security('roles:read'), operationId: 'adminGetRole', params: RoleParams, response: { 200: OneRole } },
  }, async (request) => ok({ role: await roles.get(request.params.name) }))

  app.patch('/admin/roles/:name', {
    onRequest: requireScope('roles:write'),
    schema: {
      tags, security: security('roles:write'), operationId: 'adminUpdateRole',
      description: 'Changes the description or the permissions (built-in roles too). New permissions make every holder\'s older access tokens answer TOKEN_EXPIRED; a holder who would hold more than 100 permissions, or too large a token, makes it LIMIT_EXCEEDED and nothing changes.',
      params: RoleParams, body: UpdateRoleBody, response: { 200: OneRole },
    },
  }, async (request) => ok({ role: await roles.update(request.params.name, request.body, actedBy(request)) }))

  app.delete('/admin/roles/:name', {
    onRequest: requireScope('roles:write'),
    schema: {
      tags, security: security('roles:write'), operationId: 'adminDeleteRole',
      description: 'A built-in role is never removed (VALIDATION_ERROR); one held by a user or a membership is LIMIT_EXCEEDED (409) unless ?force=true, which takes it from them first.',
      params: RoleParams, querystring: RoleDeleteQuery, response: { 200: RoleDeleted },
    },
  }, async (request) => ok(await roles.remove(request.params.name, request.query.force ?? false, actedBy(request))))

  app.put('/admin/users/:id/roles', {
    onRequest: requireScope('users:write'),
    schema: {
      tags, security: security('users:write'), operationId: 'adminSetUserRoles',
      description: 'Sets the user\'s global roles, all of them. A role not in the catalogue is VALIDATION_ERROR naming it; more than 100 permissions, or too large a token, LIMIT_EXCEEDED; nothing changes then. The user\'s older access tokens answer TOKEN_EXPIRED; webhook user.roles_changed.',
      params: UserParams, body: SetUserRolesBody, response: { 200: OneUser },
    },
  }, async (request) => {
    await roles.setUserRoles(request.params.id, request.body.roles, actedBy(request))
    return ok({ user: await admin.getUser(request.params.id) })
  })

  app.patch('/admin/users/:id', {
    onRequest: requireScope('users:write'),
    schema: {
      tags, security: security('users:write'), operationId: 'adminUpdateUser',
      description: 'Sets (a JSON object of at most 2 KB serialised) or clears (null) the user\'s app_metadata, carried in their access tokens and shown read-only in GET /auth/me. Their older access tokens answer TOKEN_EXPIRED; too large a token is LIMIT_EXCEEDED.',
      params: UserParams, body: UpdateUserBody, response: { 200: OneUser },
    },
  }, async (request) => {
    await roles.setAppMetadata(request.params.id, request.body.app_metadata, actedBy(request))
    return ok({ user: await admin.getUser(request.params.id) })
  })
}

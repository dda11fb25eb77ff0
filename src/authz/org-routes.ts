import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance } from 'fastify'
import { actedBy, protectWithApiKeys, requireScope } from '../admin/routes.ts'
import type { ApiKeyService } from '../admin/api-keys.ts'
import { principalOf } from '../http/bearer.ts'
import { limitByIp } from '../http/ratelimit.ts'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import type { InvitationService } from './invitations.ts'
import {
  AcceptInvitationBody, AdminCreateOrganizationBody, CreateOrganizationBody, InvitationAccepted, InvitationList, InvitationParams, InvitationRevoked,
  InviteBody, MemberParams, MemberRemoved, MembersPage, MembersQuery, OneInvitation, OneMember, OneOrganization, OrganizationDeleted, OrganizationList,
  OrganizationParams, UpdateMemberBody, UpdateOrganizationBody,
} from './org-schemas.ts'
import type { OrganizationService } from './organizations.ts'

const tags = ['organizations']
const security = [{ bearer: [] }]

/**
 * Organisations, their members and invitations (bearer; docs/authorization.md). With
 * ORGANIZATIONS=off none of these routes exist, so each answers 404 NOT_FOUND like any unknown path.
 */
export async function protectedOrganizationRoutes(fastify: FastifyInstance, deps: { organizations: OrganizationService; invitations: InvitationService; limits: Limits }): Promise<void> {
  const { organizations, invitations, limits } = deps
  if (organizations.mode === 'off') return
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.post('/auth/organizations', {
    bodyLimit: AUTH_BODY_LIMIT,
    schema: {
      tags, security, operationId: 'createOrganization',
      description: 'The caller (with a confirmed address) becomes its owner. With ORGANIZATIONS=admin only operators create them (POST /admin/organizations): 403 FORBIDDEN here.',
      body: CreateOrganizationBody, response: { 201: OneOrganization },
    },
  }, async (request, reply) => reply.code(201).send(ok({ organization: await organizations.create(principalOf(request), request.body.name, requestContext(request)) })))

  app.get('/auth/organizations', {
    schema: { tags, security, operationId: 'listOrganizations', description: 'The caller\'s memberships with their roles.', response: { 200: OrganizationList } },
  }, async (request) => ok(await organizations.list(principalOf(request))))

  app.get('/auth/organizations/:id', {
    schema: { tags, security, operationId: 'getOrganization', description: 'Any member; NOT_FOUND for anyone else.', params: OrganizationParams, response: { 200: OneOrganization } },
  }, async (request) => ok({ organization: await organizations.get(principalOf(request), request.params.id) }))

  app.patch('/auth/organizations/:id', {
    bodyLimit: AUTH_BODY_LIMIT,
    schema: { tags, security, operationId: 'updateOrganization', description: 'Needs organization:* (the owner\'s permission).', params: OrganizationParams, body: UpdateOrganizationBody, response: { 200: OneOrganization } },
  }, async (request) => ok({ organization: await organizations.rename(principalOf(request), request.params.id, request.body.name, requestContext(request)) }))

  app.delete('/auth/organizations/:id', {
    schema: {
      tags, security, operationId: 'deleteOrganization',
      description: 'Needs organization:*. Its memberships, invitations and watchlists go with it; every member\'s older access tokens answer TOKEN_EXPIRED.',
      params: OrganizationParams, response: { 200: OrganizationDeleted },
    },
  }, async (request) => ok(await organizations.remove(principalOf(request), request.params.id, requestContext(request))))

  app.get('/auth/organizations/:id/members', {
    schema: { tags, security, operationId: 'listMembers', description: 'Any member; keyset pages in the order members joined.', params: OrganizationParams, querystring: MembersQuery, response: { 200: MembersPage } },
  }, async (request) => ok(await organizations.members(principalOf(request), request.params.id, request.query)))

  app.put('/auth/organizations/:id/members/:user_id', {
    bodyLimit: AUTH_BODY_LIMIT,
    schema: {
      tags, security, operationId: 'updateMember',
      description: 'Sets a member\'s roles, all of them (members:manage). Nobody grants a permission they lack, nor changes a member holding one they lack (FORBIDDEN); the last owner of an organisation with other members stays one (LAST_OWNER).',
      params: MemberParams, body: UpdateMemberBody, response: { 200: OneMember },
    },
  }, async (request) => ok(await organizations.setRoles(principalOf(request), request.params.id, request.params.user_id, request.body.roles, requestContext(request))))

  app.delete('/auth/organizations/:id/members/:user_id', {
    schema: {
      tags, security, operationId: 'removeMember',
      description: 'Removes a member (members:manage), or, with the caller\'s own id, leaves. The last owner of an organisation with other members cannot leave (LAST_OWNER); the last member leaving deletes it.',
      params: MemberParams, response: { 200: MemberRemoved },
    },
  }, async (request) => ok(await organizations.removeMember(principalOf(request), request.params.id, request.params.user_id, requestContext(request))))

  app.post('/auth/organizations/:id/invitations', {
    bodyLimit: AUTH_BODY_LIMIT,
    // Each invitation sends a mail: the per-IP mail limit here; the organisation's own budget in the service.
    onRequest: limitByIp(limits, 'mail'),
    schema: {
      tags, security, operationId: 'invite',
      description: 'Mails a single-use link ({PUBLIC_URL}/accept-invitation?token=...), good for 7 days (members:invite; nobody grants a permission they lack). At most 50 waiting per organisation (LIMIT_EXCEEDED); at most 20 sent an hour per organisation, 3 of them to one address (RATE_LIMITED); a new invitation to an address replaces the one waiting for it.',
      params: OrganizationParams, body: InviteBody, response: { 201: OneInvitation },
    },
  }, async (request, reply) => reply.code(201).send(ok({ invitation: await invitations.invite(principalOf(request), request.params.id, request.body, requestContext(request)) })))

  app.get('/auth/organizations/:id/invitations', {
    schema: { tags, security, operationId: 'listInvitations', description: 'The invitations waiting (members:invite).', params: OrganizationParams, response: { 200: InvitationList } },
  }, async (request) => ok(await invitations.list(principalOf(request), request.params.id)))

  app.delete('/auth/organizations/:id/invitations/:invitation_id', {
    schema: { tags, security, operationId: 'revokeInvitation', description: 'Withdraws one (members:invite); its link stops working.', params: InvitationParams, response: { 200: InvitationRevoked } },
  }, async (request) => ok(await invitations.revoke(principalOf(request), request.params.id, request.params.invitation_id, requestContext(request))))

  app.post('/auth/invitations/accept', {
    bodyLimit: AUTH_BODY_LIMIT,
    schema: {
      tags, security, operationId: 'acceptInvitation',
      description: 'The caller joins with the invitation\'s roles. The caller\'s confirmed address must be the invited one (else FORBIDDEN, and the invitation stays); an invitation unknown, used, withdrawn, expired or dead with the invited account\'s sessions is NOT_FOUND.',
      body: AcceptInvitationBody, response: { 200: InvitationAccepted },
    },
  }, async (request) => ok(await invitations.accept(principalOf(request), request.body.token, requestContext(request))))
}

/** The operators' way to make an organisation for an account (API key with users:write), in its own admin scope. */
export async function organizationAdminRoutes(fastify: FastifyInstance, options: { organizations: OrganizationService; apiKeys: ApiKeyService; limits: Limits }): Promise<void> {
  const { organizations, apiKeys, limits } = options
  if (organizations.mode === 'off') return
  protectWithApiKeys(fastify, apiKeys, limits)
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.post('/admin/organizations', {
    onRequest: requireScope('users:write'),
    schema: {
      tags: ['admin'], security: [{ apiKey: ['users:write'] }], operationId: 'adminCreateOrganization',
      description: 'Makes an organisation whose owner is the account owner_user_id (active, address confirmed); the way organisations are made with ORGANIZATIONS=admin.',
      body: AdminCreateOrganizationBody, response: { 201: OneOrganization },
    },
  }, async (request, reply) => reply.code(201).send(ok({ organization: await organizations.createByOperator(request.body.owner_user_id, request.body.name, actedBy(request)) })))
}

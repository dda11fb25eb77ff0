import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AUTH_BODY_LIMIT, Email, emptyBodyAsObject, OneTimeToken, Password, RefreshTokenBody, refreshTokenOf, requestContext } from '../auth/routes.ts'
import { TransportHeaders, type CookieTransport } from '../auth/cookie-transport.ts'
import { principalOf } from '../http/bearer.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import type { Limits } from '../limits/limits.ts'
import { Body, Envelope, ok } from '../http/schemas.ts'
import type { LifecycleService } from './lifecycle.ts'

const tags = ['sessions']
const security = [{ bearer: [] }]
const Revoked = Envelope(Type.Object({ revoked: Type.Integer({ description: 'How many sessions this call revoked' }) }))

export async function publicLifecycleRoutes(fastify: FastifyInstance, lifecycle: LifecycleService, limits: Limits, hasher: { saturated(): boolean }, cookies: CookieTransport): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const common = { bodyLimit: AUTH_BODY_LIMIT }

  app.post('/auth/logout', {
    ...common,
    preValidation: emptyBodyAsObject,
    schema: { tags, operationId: 'logout', headers: TransportHeaders, body: RefreshTokenBody, response: { 200: Envelope(Type.Object({})) } },
  }, async (request, reply) => {
    const token = refreshTokenOf(request, request.body, cookies)
    if (cookies.requested(request)) {
      // Logging out always ends with the cookie gone, even when it was already stale or missing.
      cookies.clear(reply)
      if (token === null) return ok({}, 'Logged out.')
    }
    await lifecycle.logout(token!, requestContext(request))
    return ok({}, 'Logged out.')
  })

  app.post('/auth/forgot-password', {
    ...common,
    onRequest: limitByIp(limits, 'mail'),
    schema: { tags: ['password'], operationId: 'forgotPassword', body: Body({ email: Email }), response: { 202: Envelope(Type.Object({})) } },
  }, async (request, reply) => {
    lifecycle.forgotPassword(request.body.email, requestContext(request))
    return reply.code(202).send(ok({}, 'If the address has an account, a password reset mail is on its way.'))
  })

  app.post('/auth/reset-password', {
    ...common,
    onRequest: refuseWhenSaturated(hasher),
    schema: { tags: ['password'], operationId: 'resetPassword', body: Body({ token: OneTimeToken, password: Password }), response: { 200: Envelope(Type.Object({})) } },
  }, async (request) => {
    await lifecycle.resetPassword(request.body.token, request.body.password, requestContext(request))
    return ok({}, 'Password changed. Every session has been logged out; log in with the new password.')
  })
}

export async function protectedLifecycleRoutes(fastify: FastifyInstance, lifecycle: LifecycleService, hasher: { saturated(): boolean }): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.post('/auth/logout-all', {
    schema: { tags, security, operationId: 'logoutAll', response: { 200: Revoked } },
  }, async (request) => ok({ revoked: await lifecycle.logoutAll(principalOf(request), requestContext(request)) }))

  app.get('/auth/sessions', {
    schema: {
      tags, security, operationId: 'listSessions',
      response: {
        200: Envelope(Type.Object({
          sessions: Type.Array(Type.Object({
            id: Type.String({ format: 'uuid' }),
            created_at: Type.String({ format: 'date-time' }),
            last_used_at: Type.String({ format: 'date-time' }),
            user_agent: Type.Union([Type.String(), Type.Null()]),
            current: Type.Boolean(),
          })),
        })),
      },
    },
  }, async (request) => ok({ sessions: await lifecycle.listSessions(principalOf(request)) }))

  app.delete('/auth/sessions/:id', {
    schema: {
      tags, security, operationId: 'revokeSession', params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
      response: { 200: Envelope(Type.Object({ id: Type.String(), revoked: Type.Literal(true) })) },
    },
  }, async (request) => {
    await lifecycle.revokeSession(principalOf(request), request.params.id, requestContext(request))
    return ok({ id: request.params.id, revoked: true as const })
  })

  app.post('/auth/change-password', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: refuseWhenSaturated(hasher),
    schema: {
      tags: ['password'], security, operationId: 'changePassword',
      body: Body({ current_password: Password, new_password: Password }),
      response: { 200: Revoked },
    },
  }, async (request) => {
    const revoked = await lifecycle.changePassword(principalOf(request), request.body.current_password, request.body.new_password, requestContext(request))
    return ok({ revoked }, 'Password changed. Your other sessions have been logged out.')
  })
}

import type { FastifyInstance, preHandlerHookHandler } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import { Accepted, EmailBody, RefreshTokenBody } from '../auth/schemas.ts'
import { emptyBodyAsObject, refreshTokenOf, TransportHeaders, type CookieTransport } from '../auth/cookie-transport.ts'
import { principalOf } from '../http/bearer.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import type { Limits } from '../limits/limits.ts'
import type { BotProtection } from '../captcha/verifier.ts'
import { ok } from '../http/schemas.ts'
import type { DataRights } from './data-rights.ts'
import type { LifecycleService } from './lifecycle.ts'
import { AccountDeleted, AccountExport, DeleteAccountBody, ChangePasswordBody, LoggedOut, PasswordReset, ResetPasswordBody, Revoked, SessionParams, SessionRevoked, Sessions } from './schemas.ts'

const tags = ['sessions']
const security = [{ bearer: [] }]

export async function publicLifecycleRoutes(fastify: FastifyInstance, lifecycle: LifecycleService, limits: Limits, hasher: { saturated(): boolean }, cookies: CookieTransport, captcha: BotProtection): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const common = { bodyLimit: AUTH_BODY_LIMIT }

  app.post('/auth/logout', {
    ...common,
    preValidation: emptyBodyAsObject,
    schema: { tags, operationId: 'logout', headers: TransportHeaders, body: RefreshTokenBody, response: { 200: LoggedOut } },
  }, async (request, reply) => {
    const token = refreshTokenOf(request, request.body, cookies)
    if (cookies.requested(request)) {
      // Logging out always ends with the cookie gone, even when it was already stale or missing.
      cookies.clear(reply)
      if (token === null) return ok({})
    }
    await lifecycle.logout(token!, requestContext(request))
    return ok({})
  })

  app.post('/auth/forgot-password', {
    ...common,
    onRequest: limitByIp(limits, 'mail'),
    // The bot check (docs/SECURITY.md, "Bot protection") before the address is looked at.
    ...captcha.guard(),
    schema: { tags: ['password'], operationId: 'forgotPassword', body: EmailBody, response: { 202: Accepted } },
  }, async (request, reply) => {
    lifecycle.forgotPassword(request.body.email, requestContext(request))
    return reply.code(202).send(ok({}))
  })

  app.post('/auth/reset-password', {
    ...common,
    onRequest: refuseWhenSaturated(hasher),
    onSend: cookies.clearWhenDead,
    schema: { tags: ['password'], operationId: 'resetPassword', body: ResetPasswordBody, response: { 200: PasswordReset } },
  }, async (request) => {
    await lifecycle.resetPassword(request.body.token, request.body.password, requestContext(request))
    return ok({})
  })
}

export async function protectedLifecycleRoutes(fastify: FastifyInstance, lifecycle: LifecycleService, hasher: { saturated(): boolean }, cookies: CookieTransport, recent: preHandlerHookHandler): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const { clearWhenDead } = cookies

  app.post('/auth/logout-all', {
    onSend: clearWhenDead,
    schema: { tags, security, operationId: 'logoutAll', response: { 200: Revoked } },
  }, async (request) => ok({ revoked: await lifecycle.logoutAll(principalOf(request), requestContext(request)) }))

  app.get('/auth/sessions', {
    schema: {
      tags, security, operationId: 'listSessions',
      response: { 200: Sessions },
    },
  }, async (request) => ok({ sessions: await lifecycle.listSessions(principalOf(request)) }))

  app.delete('/auth/sessions/:id', {
    onSend: clearWhenDead,
    schema: {
      tags, security, operationId: 'revokeSession', params: SessionParams,
      response: { 200: SessionRevoked },
    },
  }, async (request) => {
    await lifecycle.revokeSession(principalOf(request), request.params.id, requestContext(request))
    return ok({ id: request.params.id, revoked: true as const })
  })

  app.post('/auth/change-password', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: refuseWhenSaturated(hasher),
    preHandler: recent,
    onSend: clearWhenDead,
    schema: {
      tags: ['password'], security, operationId: 'changePassword',
      body: ChangePasswordBody,
      response: { 200: Revoked },
    },
  }, async (request) => {
    const revoked = await lifecycle.changePassword(principalOf(request), request.body.current_password, request.body.new_password, requestContext(request))
    return ok({ revoked })
  })
}

/** The data owner's routes (bearer): a copy of everything stored, and erasure. */
export async function dataRightsRoutes(fastify: FastifyInstance, rights: DataRights, limits: Limits, hasher: { saturated(): boolean }, cookies: CookieTransport, recent: preHandlerHookHandler): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['account']

  app.get('/auth/me/export', {
    preHandler: recent,
    schema: { tags, security, operationId: 'exportAccount', response: { 200: AccountExport } },
  }, async (request, reply) => {
    reply.header('cache-control', 'no-store')
    return ok(await rights.exportOwn(principalOf(request), requestContext(request)))
  })

  app.delete('/auth/me', {
    bodyLimit: AUTH_BODY_LIMIT,
    // Throttled like login: the per-IP login limit here, the per-account delay in the service.
    onRequest: [refuseWhenSaturated(hasher), limitByIp(limits, 'login')],
    preHandler: recent,
    onSend: cookies.clearWhenDead,
    schema: { tags, security, operationId: 'deleteAccount', body: DeleteAccountBody, response: { 200: AccountDeleted } },
  }, async (request) => ok(await rights.deleteOwn(principalOf(request), request.body.password, requestContext(request))))
}

import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { principalOf } from '../http/bearer.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import type { Limits } from '../limits/limits.ts'
import { ok } from '../http/schemas.ts'
import type { AuthService } from './service.ts'
import { Accepted, EmailBody, LoggedIn, LoginBody, Me, RefreshTokenBody, Refreshed, Registered, RegisterBody, TokenBody, Verified } from './schemas.ts'
import { AppError } from '../errors.ts'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import { emptyBodyAsObject, refreshTokenOf, TransportHeaders, type CookieTransport } from './cookie-transport.ts'
import type { BotProtection } from '../captcha/verifier.ts'

export async function publicAuthRoutes(fastify: FastifyInstance, auth: AuthService, limits: Limits, hasher: { saturated(): boolean }, cookies: CookieTransport, captcha: BotProtection): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const common = { bodyLimit: AUTH_BODY_LIMIT }

  app.post('/auth/register', {
    ...common,
    onRequest: [refuseWhenSaturated(hasher), limitByIp(limits, 'register')],
    // The bot check before the password is hashed or the address looked up.
    ...captcha.guard(),
    schema: {
      tags: ['auth'],
      operationId: 'register',
      body: RegisterBody,
      response: { 201: Registered },
    },
  }, async (request, reply) => {
    const { email, password, full_name } = request.body
    const user = await auth.register({ email, password, full_name }, requestContext(request))
    const message = user.verification_required
      ? 'Registration successful. Check your e-mail to verify your address.'
      : 'Registration successful. You can log in now.'
    return reply.code(201).send(ok(user, message))
  })

  app.post('/auth/verify-email', {
    ...common,
    schema: {
      tags: ['auth'],
      operationId: 'verifyEmail',
      body: TokenBody,
      response: { 200: Verified },
    },
  }, async (request) => ok(await auth.verifyEmail(request.body.token, requestContext(request))))

  app.post('/auth/resend-verification', {
    ...common,
    onRequest: limitByIp(limits, 'mail'),
    ...captcha.guard(),
    schema: {
      tags: ['auth'],
      operationId: 'resendVerification',
      body: EmailBody,
      response: { 202: Accepted },
    },
  }, async (request, reply) => {
    await auth.resendVerification(request.body.email)
    return reply.code(202).send(ok({}))
  })

  app.post('/auth/login', {
    ...common,
    onRequest: [refuseWhenSaturated(hasher), limitByIp(limits, 'login')],
    schema: {
      tags: ['auth'],
      operationId: 'login',
      headers: TransportHeaders,
      body: LoginBody,
      response: { 200: LoggedIn },
    },
  }, async (request, reply) => {
    // The refresh token goes where script cannot read it; the body keeps the login body's other fields.
    return ok(await cookies.signIn(request, reply, (transport) => auth.login(request.body, requestContext(request), transport)))
  })

  app.post('/auth/refresh', {
    ...common,
    preValidation: emptyBodyAsObject,
    schema: {
      tags: ['auth'],
      operationId: 'refresh',
      headers: TransportHeaders,
      body: RefreshTokenBody,
      response: { 200: Refreshed },
    },
  }, async (request, reply) => {
    const token = refreshTokenOf(request, request.body, cookies)
    try {
      if (token === null) throw new AppError('INVALID_REFRESH_TOKEN')
      return ok(await auth.refresh(token, requestContext(request), request.body.organization_id))
    } catch (error) {
      // A dead session's cookie is worthless: drop it, so the browser stops sending it.
      if (cookies.requested(request) && error instanceof AppError && error.code === 'INVALID_REFRESH_TOKEN') cookies.clear(reply)
      throw error
    }
  })
}

export async function protectedAuthRoutes(fastify: FastifyInstance, auth: AuthService): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  app.get('/auth/me', {
    schema: {
      tags: ['auth'],
      operationId: 'me',
      security: [{ bearer: [] }],
      response: { 200: Me },
    },
  }, async (request) => ok(await auth.me(principalOf(request))))
}

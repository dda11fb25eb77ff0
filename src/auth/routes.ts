import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { principalOf } from '../http/bearer.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import type { Limits } from '../limits/limits.ts'
import { Body, Envelope, ok } from '../http/schemas.ts'
import type { RequestContext } from '../accounts/audit.ts'
import type { AuthService } from './service.ts'
import { PASSWORD_MAX, PASSWORD_MIN } from './passwords.ts'

/** Auth bodies are small; a large one is refused before any parsing or hashing (16 KiB). */
export { Email, Password, Jwt, OneTimeToken }

export const AUTH_BODY_LIMIT = 16 * 1024

const Email = Type.String({ minLength: 1, maxLength: 320, description: 'Trimmed, NFC-normalised and lower-cased before use' })
// The upper bound is enforced again in code points by the password policy; this one stops huge input early.
const Password = Type.String({ minLength: 1, maxLength: 1024, description: `${PASSWORD_MIN} to ${PASSWORD_MAX} Unicode code points` })
const Jwt = Type.String({ minLength: 1, maxLength: 4096 })
const OneTimeToken = Type.String({ minLength: 1, maxLength: 256 })

const TokenPair = Type.Object({
  access_token: Type.String(),
  refresh_token: Type.String(),
  token_type: Type.Literal('bearer'),
  expires_in: Type.Integer(),
})

export function requestContext(request: FastifyRequest): RequestContext {
  const agent = request.headers['user-agent']
  return { ip: request.ip, userAgent: typeof agent === 'string' ? agent : null, requestId: request.id }
}

export async function publicAuthRoutes(fastify: FastifyInstance, auth: AuthService, limits: Limits, hasher: { saturated(): boolean }): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const common = { bodyLimit: AUTH_BODY_LIMIT }

  app.post('/auth/register', {
    ...common,
    onRequest: [limitByIp(limits, 'register'), refuseWhenSaturated(hasher)],
    schema: {
      tags: ['auth'],
      operationId: 'register',
      body: Body({ email: Email, password: Password, full_name: Type.String({ maxLength: 1024 }) }),
      response: {
        201: Envelope(
          Type.Object({ user_id: Type.String({ format: 'uuid' }), email: Type.String(), verification_required: Type.Boolean() }),
          { message: true },
        ),
      },
    },
  }, async (request, reply) => {
    const user = await auth.register(request.body, requestContext(request))
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
      body: Body({ token: OneTimeToken }),
      response: { 200: Envelope(Type.Object({ email: Type.String(), verified: Type.Literal(true) })) },
    },
  }, async (request) => ok(await auth.verifyEmail(request.body.token, requestContext(request))))

  app.post('/auth/resend-verification', {
    ...common,
    onRequest: limitByIp(limits, 'mail'),
    schema: {
      tags: ['auth'],
      operationId: 'resendVerification',
      body: Body({ email: Email }),
      response: { 202: Envelope(Type.Object({})) },
    },
  }, async (request, reply) => {
    await auth.resendVerification(request.body.email)
    return reply.code(202).send(ok({}, 'If the address has an unverified account, a new verification mail is on its way.'))
  })

  app.post('/auth/login', {
    ...common,
    onRequest: [limitByIp(limits, 'login'), refuseWhenSaturated(hasher)],
    schema: {
      tags: ['auth'],
      operationId: 'login',
      body: Body({ email: Email, password: Password }),
      response: { 200: Envelope(TokenPair) },
    },
  }, async (request) => ok(await auth.login(request.body, requestContext(request))))

  app.post('/auth/refresh', {
    ...common,
    schema: {
      tags: ['auth'],
      operationId: 'refresh',
      body: Body({ refresh_token: Jwt }),
      response: { 200: Envelope(Type.Object({ access_token: Type.String(), expires_in: Type.Integer() })) },
    },
  }, async (request) => ok(await auth.refresh(request.body.refresh_token, requestContext(request))))
}

export async function protectedAuthRoutes(fastify: FastifyInstance, auth: AuthService): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  app.get('/auth/me', {
    schema: {
      tags: ['auth'],
      operationId: 'me',
      security: [{ bearer: [] }],
      response: {
        200: Envelope(
          Type.Object({
            user_id: Type.String({ format: 'uuid' }),
            email: Type.String(),
            full_name: Type.String(),
            email_verified: Type.Boolean(),
            created_at: Type.String({ format: 'date-time' }),
          }),
        ),
      },
    },
  }, async (request) => ok(await auth.me(principalOf(request))))
}

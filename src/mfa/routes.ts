import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance, preHandlerHookHandler } from 'fastify'
import { emptyBodyAsObject, type CookieTransport } from '../auth/cookie-transport.ts'
import { LoggedIn } from '../auth/schemas.ts'
import { principalOf } from '../http/bearer.ts'
import { limitByIp } from '../http/ratelimit.ts'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import { CodeBody, Confirmed, EnrolTotpBody, FactorDeleted, FactorList, FactorParams, NewRecoveryCodes, SteppedUp, StepUpBody, TotpEnrolment, VerifyBody } from './schemas.ts'
import type { MfaService } from './service.ts'

const tags = ['mfa']
const security = [{ bearer: [] }]

/**
 * The preHandler of the sensitive actions (API.md, "Recent"): for an account with MFA, a second
 * factor verified in this session within MFA_STEP_UP_SECONDS, or 403 MFA_REQUIRED with `step_up`.
 */
export function recentSecondFactor(mfa: MfaService): preHandlerHookHandler {
  return async (request) => mfa.assertRecent(principalOf(request))
}

/** The second step of a login: no bearer token yet, only the mfa_token. */
export async function publicMfaRoutes(fastify: FastifyInstance, mfa: MfaService, limits: Limits, cookies: CookieTransport): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  app.post('/auth/mfa/verify', {
    bodyLimit: AUTH_BODY_LIMIT,
    // Counted with logins: the same per-IP budget guards both steps.
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, operationId: 'verifyMfa', body: VerifyBody, response: { 200: LoggedIn } },
  }, async (request, reply) => {
    const { body, transport } = await mfa.verify(request.body, requestContext(request))
    // The login's transport travels with the mfa_token: a cookie-mode login ends with the cookie.
    return ok(cookies.answerLogin(request, reply, body, transport === 'cookie'))
  })
}

export async function protectedMfaRoutes(fastify: FastifyInstance, mfa: MfaService, recent: preHandlerHookHandler): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const common = { bodyLimit: AUTH_BODY_LIMIT }

  app.get('/auth/mfa', {
    schema: { tags, security, operationId: 'listFactors', response: { 200: FactorList } },
  }, async (request) => ok(await mfa.list(principalOf(request))))

  app.post('/auth/mfa/totp', {
    ...common,
    // The name is optional, so an empty body (the seed's clients send the JSON content type) is fine.
    preValidation: emptyBodyAsObject,
    preHandler: recent,
    schema: { tags, security, operationId: 'enrolTotp', body: EnrolTotpBody, response: { 201: TotpEnrolment } },
  }, async (request, reply) => reply.code(201).send(ok(await mfa.enrolTotp(principalOf(request), request.body.name, requestContext(request)))))

  app.post('/auth/mfa/totp/:id/confirm', {
    ...common,
    schema: { tags, security, operationId: 'confirmTotp', params: FactorParams, body: CodeBody, response: { 200: Confirmed } },
  }, async (request) => ok(await mfa.confirmTotp(principalOf(request), request.params.id, request.body.code, requestContext(request))))

  app.delete('/auth/mfa/factors/:id', {
    preHandler: recent,
    schema: { tags, security, operationId: 'removeFactor', params: FactorParams, response: { 200: FactorDeleted } },
  }, async (request) => ok(await mfa.removeFactor(principalOf(request), request.params.id, requestContext(request))))

  app.post('/auth/mfa/recovery-codes', {
    preHandler: recent,
    schema: { tags, security, operationId: 'regenerateRecoveryCodes', response: { 200: NewRecoveryCodes } },
  }, async (request) => ok(await mfa.regenerateRecoveryCodes(principalOf(request), requestContext(request))))

  app.post('/auth/mfa/step-up', {
    ...common,
    schema: { tags, security, operationId: 'stepUp', body: StepUpBody, response: { 200: SteppedUp } },
  }, async (request) => ok(await mfa.stepUp(principalOf(request), request.body, requestContext(request))))
}

import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance, preHandlerHookHandler } from 'fastify'
import { emptyBodyAsObject, TransportHeaders, type CookieTransport } from '../auth/cookie-transport.ts'
import { LoggedIn } from '../auth/schemas.ts'
import type { AuthService } from '../auth/service.ts'
import { bearerPrincipal, principalOf } from '../http/bearer.ts'
import { limitByIp } from '../http/ratelimit.ts'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import {
  CodeBody, Confirmed, EnrolTotpBody, FactorDeleted, FactorList, FactorParams, LoginOptions, NewRecoveryCodes, PasskeyLoginBody, PasskeyRegisterBody,
  RegistrationOptions, RenameBody, Renamed, SecondFactorOptions, SecondFactorOptionsBody, SteppedUp, StepUpBody, TotpEnrolment, VerifyBody,
} from './schemas.ts'
import type { MfaService } from './service.ts'

const tags = ['mfa']
const security = [{ bearer: [] }]

/**
 * The preHandler of the sensitive actions (README.md, "Recent"): for an account with MFA, a second
 * factor verified in this session within MFA_STEP_UP_SECONDS, or 403 MFA_REQUIRED with `step_up`.
 */
export function recentSecondFactor(mfa: MfaService): preHandlerHookHandler {
  return async (request) => mfa.assertRecent(principalOf(request))
}

/** The second step of a login (no bearer token yet, only the mfa_token) and the passkey login. */
export async function publicMfaRoutes(fastify: FastifyInstance, mfa: MfaService, limits: Limits, cookies: CookieTransport, auth: Pick<AuthService, 'authenticate'>): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  // Counted with logins: the same per-IP budget guards every way in.
  const asLogin = limitByIp(limits, 'login')

  app.post('/auth/mfa/passkey/options', {
    bodyLimit: AUTH_BODY_LIMIT,
    preValidation: emptyBodyAsObject,
    onRequest: asLogin,
    schema: { tags, operationId: 'passkeyOptions', description: 'With {mfa_token}: the second step of a login. With a bearer token and no body: step-up.', body: SecondFactorOptionsBody, response: { 200: SecondFactorOptions } },
  }, async (request) => {
    const { mfa_token } = request.body
    return ok(await mfa.passkeyOptions(mfa_token !== undefined ? { mfaToken: mfa_token } : { principal: await bearerPrincipal(request, auth) }))
  })

  app.post('/auth/passkeys/login/options', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: asLogin,
    schema: { tags, operationId: 'passkeyLoginOptions', response: { 200: LoginOptions } },
  }, async () => ok(await mfa.passkeyLoginOptions()))

  app.post('/auth/passkeys/login', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: asLogin,
    schema: { tags, operationId: 'loginWithPasskey', headers: TransportHeaders, body: PasskeyLoginBody, response: { 200: LoggedIn } },
  }, async (request, reply) => {
    // A passkey login has no second step: the transport only shapes the answer.
    return ok(await cookies.signIn(request, reply, () => mfa.loginWithPasskey(request.body, requestContext(request))))
  })

  app.post('/auth/mfa/verify', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: asLogin,
    schema: { tags, operationId: 'verifyMfa', body: VerifyBody, response: { 200: LoggedIn } },
  }, async (request, reply) => {
    const { body, transport } = await mfa.verify(request.body, requestContext(request))
    // The login's transport travels with the mfa_token: a cookie-mode login ends with the cookie.
    return ok(cookies.answerLogin(request, reply, body, transport === 'cookie'))
  })
}

export async function protectedMfaRoutes(fastify: FastifyInstance, mfa: MfaService, limits: Limits, recent: preHandlerHookHandler): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const common = { bodyLimit: AUTH_BODY_LIMIT }

  app.get('/auth/mfa', {
    schema: { tags, security, operationId: 'listFactors', response: { 200: FactorList } },
  }, async (request) => ok(await mfa.list(principalOf(request))))

  app.post('/auth/mfa/totp', {
    ...common,
    // The name is optional, so an empty body (clients may send the JSON content type with none) is fine.
    preValidation: emptyBodyAsObject,
    preHandler: recent,
    schema: { tags, security, operationId: 'enrolTotp', body: EnrolTotpBody, response: { 201: TotpEnrolment } },
  }, async (request, reply) => reply.code(201).send(ok(await mfa.enrolTotp(principalOf(request), request.body.name, requestContext(request)))))

  app.post('/auth/mfa/totp/:id/confirm', {
    ...common,
    // Recent when the account already has MFA (checked again with the account locked, src/mfa/service.ts).
    preHandler: recent,
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

  app.patch('/auth/mfa/factors/:id', {
    ...common,
    schema: { tags, security, operationId: 'renameFactor', params: FactorParams, body: RenameBody, response: { 200: Renamed } },
  }, async (request) => ok(await mfa.renameFactor(principalOf(request), request.params.id, request.body.name, requestContext(request))))

  app.post('/auth/passkeys/register/options', {
    preHandler: recent,
    schema: { tags, security, operationId: 'passkeyRegistrationOptions', response: { 200: RegistrationOptions } },
  }, async (request) => ok(await mfa.passkeyRegistrationOptions(principalOf(request))))

  app.post('/auth/passkeys/register', {
    ...common,
    preHandler: recent,
    schema: { tags, security, operationId: 'registerPasskey', body: PasskeyRegisterBody, response: { 201: Confirmed } },
  }, async (request, reply) => reply.code(201).send(ok(await mfa.registerPasskey(principalOf(request), request.body, requestContext(request)))))

  app.post('/auth/mfa/step-up', {
    ...common,
    // A guess at a code, like a login's second step: the same per-IP budget.
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, security, operationId: 'stepUp', body: StepUpBody, response: { 200: SteppedUp } },
  }, async (request) => ok(await mfa.stepUp(principalOf(request), request.body, requestContext(request))))
}

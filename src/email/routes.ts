import { randomBytes } from 'node:crypto'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Accepted, LoggedIn } from '../auth/schemas.ts'
import { TransportHeaders, type CookieTransport } from '../auth/cookie-transport.ts'
import type { BotProtection } from '../captcha/verifier.ts'
import { limitByIp } from '../http/ratelimit.ts'
import { AUTH_BODY_LIMIT, cookieValues, requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import { emailPages } from '../pages/email.ts'
import { installFormPages, type Form } from '../pages/routes.ts'
import { pageCsp } from '../pages/style.ts'
import type { PageBrand } from '../pages/views.ts'
import { ExchangeBody, StartBody, VerifyBody } from './schemas.ts'
import { SIGN_IN_TTL_MS, type EmailSignIn } from './service.ts'

const tags = ['email']
/** Binds an e-mailed sign-in to the browser that started it (docs/email-sign-in.md). */
export const EMAIL_COOKIE = 'portcullis_email'

function emailCookieOf(request: FastifyRequest): string | undefined {
  return cookieValues(request, EMAIL_COOKIE)[0]
}

/** HttpOnly, SameSite=Lax (the link opens as a top-level navigation), path /, for the sign-in's 10 minutes. */
function setEmailCookie(reply: FastifyReply, value: string, secure: boolean): void {
  reply.header('set-cookie', [`${EMAIL_COOKIE}=${value}`, 'Path=/', `Max-Age=${SIGN_IN_TTL_MS / 1000}`, 'HttpOnly', 'SameSite=Lax', ...(secure ? ['Secure'] : [])].join('; '))
}

/** The API's side: start, the typed code, and the exchange of the link's login code. */
export async function publicEmailRoutes(fastify: FastifyInstance, email: EmailSignIn, limits: Limits, cookies: CookieTransport, options: { secure: boolean; captcha: BotProtection }): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.post('/auth/email/start', {
    bodyLimit: AUTH_BODY_LIMIT,
    // The forgot-password limits: per IP here, per address in the service.
    onRequest: limitByIp(limits, 'mail'),
    // The bot check before anything is looked up or mailed (docs/SECURITY.md, "Bot protection").
    ...options.captcha.guard(),
    schema: { tags, operationId: 'startEmailSignIn', description: 'Mails a 6-digit code and a link; the same 202 whether or not the address has an account. Sets the portcullis_email cookie that binds the link to this browser.', body: StartBody, response: { 202: Accepted } },
  }, async (request, reply) => {
    const cookie = randomBytes(32).toString('base64url')
    const { email: address, redirect_to: redirectTo, code_challenge: codeChallenge, code_challenge_method: codeChallengeMethod } = request.body
    email.start({ email: address, redirectTo, codeChallenge, codeChallengeMethod }, cookie, requestContext(request))
    setEmailCookie(reply, cookie, options.secure)
    return reply.code(202).send(ok({}))
  })

  app.post('/auth/email/verify', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, operationId: 'verifyEmailCode', headers: TransportHeaders, body: VerifyBody, response: { 200: LoggedIn } },
  }, async (request, reply) => {
    return ok(await cookies.signIn(request, reply, (transport) => email.verify(request.body, transport, requestContext(request))))
  })

  app.post('/auth/email/exchange', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, operationId: 'completeEmailLink', headers: TransportHeaders, body: ExchangeBody, response: { 200: LoggedIn } },
  }, async (request, reply) => {
    const proof = { code: request.body.code, codeVerifier: request.body.code_verifier, browserCookie: emailCookieOf(request) }
    return ok(await cookies.signIn(request, reply, (transport) => email.exchange(proof, transport, requestContext(request))))
  })
}

/** A page, with the pages' policy; a form that leads back to the application also names its origin. */
function page(reply: FastifyReply, status: number, html: { value: string }, formTargets: string[] = []): FastifyReply {
  return reply.code(status).header('content-security-policy', pageCsp(formTargets)).type('text/html; charset=utf-8').send(html.value)
}

/** The link's page, at the root of PUBLIC_URL beside the other mailed-link pages. */
export async function emailPageRoutes(app: FastifyInstance, deps: { email: EmailSignIn; limits: Limits; brand: PageBrand; ownOrigin: string }): Promise<void> {
  const { email, limits, brand } = deps
  installFormPages(app, { brand, ownOrigin: deps.ownOrigin, csp: null, answer: (reply, status, html) => page(reply, status, html) })
  const tokenOf = (value: unknown) => (typeof value === 'string' && value.length > 0 && value.length <= 256 ? value : null)

  // GET (and HEAD): the button only. Nothing is used up: scanners and link previews fetch links.
  app.get<{ Querystring: { token?: unknown } }>('/sign-in/email', async (request, reply) => {
    const token = tokenOf(request.query.token)
    const link = token ? await email.link(token) : ({ live: false } as const)
    if (!token || !link.live) return page(reply, 400, emailPages.dead(brand))
    return page(reply, 200, emailPages.confirm(brand, token), link.leadsTo ? [link.leadsTo] : [])
  })

  app.post('/sign-in/email', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
    const token = tokenOf(((request.body as Form | undefined) ?? {}).token)
    const outcome = token ? await email.followLink(token, emailCookieOf(request), requestContext(request)) : ({ dead: true } as const)
    if ('redirect' in outcome) return reply.redirect(outcome.redirect, 303)
    if ('code' in outcome) return page(reply, 200, emailPages.code(brand, outcome.code))
    return page(reply, 400, emailPages.dead(brand))
  })
}

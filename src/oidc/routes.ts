import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance, FastifyReply, FastifyRequest, preHandlerHookHandler } from 'fastify'
import type { CookieTransport } from '../auth/cookie-transport.ts'
import { LoggedIn } from '../auth/schemas.ts'
import { TransportHeaders } from '../auth/cookie-transport.ts'
import { principalOf } from '../http/bearer.ts'
import { limitByIp } from '../http/ratelimit.ts'
import { AUTH_BODY_LIMIT, cookieValues, requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import { PAGE_CSP } from '../pages/style.ts'
import { pages, type PageBrand } from '../pages/views.ts'
import { CallbackQuery, ExchangeBody, IdentityDeleted, IdentityList, IdentityParams, LinkBody, LinkStarted, ProviderList, ProviderParams, StartQuery } from './schemas.ts'
import { FLOW_TTL_MS, type OidcService } from './service.ts'

const tags = ['oidc']
const security = [{ bearer: [] }]
/** Binds a flow to the browser that started it (docs/oidc.md): a callback without it is refused. */
export const FLOW_COOKIE = 'portcullis_oidc'

export interface OidcRouteOptions {
  basePath: string
  /** Production: the cookie is Secure. */
  secure: boolean
  brand: PageBrand
}

export function flowCookieOf(request: FastifyRequest): string | undefined {
  return cookieValues(request, FLOW_COOKIE)[0]
}

/** HttpOnly, SameSite=Lax (it must come along on the provider's top-level redirect back), scoped to the OIDC routes. */
export function setFlowCookie(reply: FastifyReply, value: string, options: Pick<OidcRouteOptions, 'basePath' | 'secure'>): void {
  const attributes = [`${FLOW_COOKIE}=${value}`, `Path=${options.basePath}/auth/oidc`, `Max-Age=${FLOW_TTL_MS / 1000}`, 'HttpOnly', 'SameSite=Lax']
  if (options.secure) attributes.push('Secure')
  reply.header('set-cookie', attributes.join('; '))
}

/** The sign-in through an identity provider: no bearer token yet. */
export async function publicOidcRoutes(fastify: FastifyInstance, oidc: OidcService, limits: Limits, cookies: CookieTransport, options: OidcRouteOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.get('/auth/oidc/providers', {
    schema: { tags, operationId: 'oidcProviders', response: { 200: ProviderList } },
  }, async () => ok(oidc.providers()))

  app.get('/auth/oidc/:name/start', {
    // A flow row per call: counted with logins, so no one fills the table from one address.
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, operationId: 'startOidc', description: 'A 302 to the provider (or back to redirect_to with error=provider_unavailable), setting the portcullis_oidc cookie. With code_challenge (S256), the login code is exchanged only with its code_verifier; without, only with this browser\'s portcullis_oidc cookie.', params: ProviderParams, querystring: StartQuery },
  }, async (request, reply) => {
    const { redirect_to: redirectTo, code_challenge: codeChallenge, code_challenge_method: codeChallengeMethod } = request.query
    const { location, browser } = await oidc.start(request.params.name, { redirectTo, codeChallenge, codeChallengeMethod }, flowCookieOf(request))
    setFlowCookie(reply, browser, options)
    return reply.redirect(location, 302)
  })

  app.get('/auth/oidc/:name/callback', {
    // Each refused callback is an audit row: counted with logins, so it cannot be used to fill the table.
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, operationId: 'oidcCallback', description: 'Where the provider sends the browser back: a 302 to redirect_to with code, linked or error; a 400 HTML page when the flow is unknown, used, expired or not this browser\'s.', params: ProviderParams, querystring: CallbackQuery },
  }, async (request, reply) => {
    const url = request.raw.url ?? ''
    const rawQuery = url.includes('?') ? url.slice(url.indexOf('?') + 1) : ''
    const outcome = await oidc.callback(request.params.name, request.query, rawQuery, flowCookieOf(request), requestContext(request))
    if ('redirect' in outcome) return reply.redirect(outcome.redirect, 302)
    // No trusted redirect_to: a page, and nowhere to go.
    reply.header('content-security-policy', PAGE_CSP)
    const page = pages.problem(options.brand, 'This sign-in cannot continue', 'The sign-in is unknown, was finished already, has expired, or was started in another browser. Go back to the application and sign in again.', request.id)
    return reply.code(400).type('text/html; charset=utf-8').send(page.value)
  })

  app.post('/auth/oidc/exchange', {
    bodyLimit: AUTH_BODY_LIMIT,
    onRequest: limitByIp(limits, 'login'),
    schema: { tags, operationId: 'exchangeOidcCode', headers: TransportHeaders, body: ExchangeBody, response: { 200: LoggedIn } },
  }, async (request, reply) => {
    // The flow cookie's path covers this route, so a same-site application's exchange carries it:
    // the proof for a flow started without a code_challenge.
    const exchange = { code: request.body.code, codeVerifier: request.body.code_verifier, browser: flowCookieOf(request) }
    return ok(await cookies.signIn(request, reply, (transport) => oidc.exchange(exchange, transport, requestContext(request))))
  })
}

export async function protectedOidcRoutes(fastify: FastifyInstance, oidc: OidcService, recent: preHandlerHookHandler, options: OidcRouteOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.post('/auth/oidc/:name/link', {
    bodyLimit: AUTH_BODY_LIMIT,
    preHandler: recent,
    schema: { tags, security, operationId: 'linkOidc', params: ProviderParams, body: LinkBody, response: { 200: LinkStarted } },
  }, async (request, reply) => {
    const { location, browser } = await oidc.start(request.params.name, { redirectTo: request.body.redirect_to }, flowCookieOf(request), principalOf(request))
    setFlowCookie(reply, browser, options)
    return ok({ authorization_url: location })
  })

  app.get('/auth/me/identities', {
    schema: { tags, security, operationId: 'listIdentities', response: { 200: IdentityList } },
  }, async (request) => ok(await oidc.list(principalOf(request).userId)))

  app.delete('/auth/me/identities/:id', {
    preHandler: recent,
    schema: { tags, security, operationId: 'unlinkIdentity', params: IdentityParams, response: { 200: IdentityDeleted } },
  }, async (request) => ok(await oidc.unlink(principalOf(request), request.params.id, requestContext(request))))
}

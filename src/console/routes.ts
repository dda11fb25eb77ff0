import { createHash, randomBytes } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { decodeJwt } from 'jose'
import type { RequestContext } from '../audit/events.ts'
import { AppError } from '../errors.ts'
import { html, type Html } from '../html.ts'
import { cookieValues, requestContext } from '../http/request.ts'
import { installFormPages, type Form } from '../pages/routes.ts'
import type { PageBrand } from '../pages/views.ts'
import { CONSOLE_CLIENT_ID } from '../provider/clients.ts'
import type { AppServices } from '../services.ts'
import { CONSOLE_COOKIE, CONSOLE_MAX_AGE_MS, type ConsoleSessions, type Operator } from './sessions.ts'
import { CONSOLE_CSP, consoleMessage, type ConsolePage } from './views.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** The console's operator, set by its session check (src/console/routes.ts). */
    operator?: Operator
  }
}

/** The short-lived cookie of one sign-in under way: its state, nonce and PKCE verifier. */
const FLOW_COOKIE = 'portcullis_console_flow'
const FLOW_MAX_AGE_SECONDS = 600

/** What every area of the console is given: the services it calls, and the page helpers. */
export interface ConsoleContext {
  services: AppServices
  brand: PageBrand
  /** The console's path under PUBLIC_URL (`/console`, or `/base/console`). */
  base: string
  /** The page frame of a request (its operator). */
  page(request: FastifyRequest): ConsolePage
  /** Sends a page. */
  send(reply: FastifyReply, status: number, page: Html): FastifyReply
  /** A 303 to a console path, with a notice word (views.ts, NOTICES). */
  redirect(reply: FastifyReply, path: string, notice?: string): FastifyReply
  /** The audit context of a change: the operator as `actor: user:{id}`. */
  context(request: FastifyRequest): RequestContext
  /** The posted form. */
  form(request: FastifyRequest): Form
}

export interface ConsoleOptions {
  services: AppServices
  brand: PageBrand
  /** PUBLIC_URL, and the provider's issuer (the console signs in through it). */
  publicUrl: string
  issuer: string
  production: boolean
  sessions: ConsoleSessions
  /** The areas (src/console/*.ts), each registering its routes on the console's scope. */
  areas: ((app: FastifyInstance, console: ConsoleContext) => Promise<void> | void)[]
}

const b64url = (bytes: Buffer) => bytes.toString('base64url')

/** A refusal or a failure as a console page: its title and what to do, never an internal detail. */
function consoleProblem(error: AppError, base: string, requestId: string): [string, Html] {
  const back = html`<p><a href="${base}/users">Back to the console</a></p>`
  switch (error.code) {
    case 'AUTH_REQUIRED':
      return ['Your console session has ended', html`<p>Nothing was changed. <a href="${base}/sign-in">Sign in again</a>.</p>`]
    case 'FORBIDDEN':
      return ['Not allowed', html`<p>${error.message}</p>${back}`]
    case 'ORIGIN_NOT_ALLOWED':
      return ['This change came from another site', html`<p>For safety the console accepts changes only from its own pages, so nothing was changed.</p>${back}`]
    case 'HTTPS_REQUIRED':
      return ['A secure connection is needed', html`<p>The console answers only over https://.</p>`]
    case 'NOT_FOUND':
      return ['Not found', html`<p>There is nothing here, or it has been removed.</p>${back}`]
    case 'VALIDATION_ERROR':
      return ['That could not be used', html`<p>${error.message}</p>${error.details?.length ? html`<ul>${error.details.map((detail) => html`<li>${detail.field}: ${detail.message}</li>`)}</ul>` : ''}<p>Go back and correct it.</p>`]
    case 'RATE_LIMITED':
      return ['Too many requests', html`<p>Try again in a minute.</p>`]
    default:
      if (error.status < 500) return ['That could not be done', html`<p>${error.message}</p>${back}`]
      return ['Something went wrong', html`<p>It could not be finished on our side; try again in a few minutes. Reference: <code>${requestId}</code></p>`]
  }
}

/**
 * The operators' console (docs/console.md): server-rendered pages under `{PUBLIC_URL}/console` for
 * users with `console:read` (reading) and `console:write` (changing). It signs operators in through
 * Portcullis's own provider as its built-in first-party client, asking for a second factor
 * (`acr_values=aal2`), and keeps its own session (src/console/sessions.ts). Every page needs a live
 * session; every change is a same-origin POST by an operator with `console:write`, through the same
 * services the admin API calls, audited with `actor: user:{id}`.
 */
export async function consoleRoutes(app: FastifyInstance, options: ConsoleOptions): Promise<void> {
  const { services, brand, sessions } = options
  const publicUrl = new URL(options.publicUrl)
  const base = `${publicUrl.pathname.replace(/\/+$/, '')}/console`
  const redirectUri = `${publicUrl.origin}${base}/callback`
  const secure = options.production || publicUrl.protocol === 'https:'
  const cookie = (name: string, value: string, maxAgeSeconds: number, sameSite: 'Strict' | 'Lax') =>
    `${name}=${value}; Path=${base}; HttpOnly; SameSite=${sameSite}; Max-Age=${maxAgeSeconds}${secure ? '; Secure' : ''}`

  const send = (reply: FastifyReply, status: number, page: Html) => reply.code(status).header('content-security-policy', CONSOLE_CSP).type('text/html; charset=utf-8').send(page.value)
  // The console's own words for what went wrong (the mailed-link pages' speak of mail and links).
  installFormPages(app, {
    brand, ownOrigin: publicUrl.origin, csp: CONSOLE_CSP, answer: send,
    problem: (error, requestId) => ({ status: error.status, page: consoleMessage(brand, ...consoleProblem(error, base, requestId)) }),
  })

  // Production serves the console only over HTTPS (the service itself refuses plain HTTP there too).
  app.addHook('onRequest', async (request) => {
    if (options.production && request.protocol !== 'https') throw new AppError('HTTPS_REQUIRED')
  })

  /** Starts a sign-in through the provider: the flow's cookie, then the authorization request. */
  app.get(`${base}/sign-in`, async (_request, reply) => {
    const flow = { state: b64url(randomBytes(24)), nonce: b64url(randomBytes(24)), verifier: b64url(randomBytes(32)) }
    const authorize = new URL(`${options.issuer}/oauth/authorize`)
    authorize.search = new URLSearchParams({
      client_id: CONSOLE_CLIENT_ID,
      response_type: 'code',
      scope: 'openid email profile',
      redirect_uri: redirectUri,
      state: flow.state,
      nonce: flow.nonce,
      code_challenge: createHash('sha256').update(flow.verifier).digest('base64url'),
      code_challenge_method: 'S256',
      // An operator needs a second factor (docs/console.md): the provider asks for it, or refuses.
      acr_values: 'aal2',
    }).toString()
    reply.header('set-cookie', cookie(FLOW_COOKIE, b64url(Buffer.from(JSON.stringify(flow))), FLOW_MAX_AGE_SECONDS, 'Lax'))
    return reply.code(303).header('location', authorize.href).send()
  })

  /** The provider's answer: the code exchanged in-process, the ID token's second factor checked, the session opened. */
  app.get<{ Querystring: Record<string, string | undefined> }>(`${base}/callback`, async (request, reply) => {
    const clearFlow = cookie(FLOW_COOKIE, '', 0, 'Lax')
    reply.header('set-cookie', clearFlow)
    const refuse = (status: number, title: string, text: Html | string) =>
      send(reply, status, consoleMessage(brand, title, html`<p>${text}</p><p><a href="${base}/sign-in">Sign in again</a></p>`))
    let flow: { state: string; nonce: string; verifier: string }
    try {
      flow = JSON.parse(Buffer.from(cookieValues(request, FLOW_COOKIE)[0] ?? '', 'base64url').toString()) as typeof flow
    } catch {
      return refuse(400, 'This sign-in has expired', 'Start again from the console.')
    }
    if (typeof flow?.state !== 'string' || request.query.state !== flow.state) return refuse(400, 'This sign-in has expired', 'Start again from the console.')
    if (request.query.error) {
      const why = request.query.error === 'access_denied'
        ? 'The console needs a second factor: add an authenticator app or a passkey to your account, then sign in again.'
        : 'The sign-in did not finish.'
      return refuse(403, 'You could not be signed in', why)
    }
    const exchanged = await app.inject({
      method: 'POST',
      url: '/oauth/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: new URLSearchParams({ grant_type: 'authorization_code', code: request.query.code ?? '', redirect_uri: redirectUri, client_id: CONSOLE_CLIENT_ID, code_verifier: flow.verifier }).toString(),
    })
    if (exchanged.statusCode !== 200) return refuse(400, 'This sign-in has expired', 'Start again from the console.')
    // From this process's own token endpoint, not over a network: its ID token is read, not re-verified.
    const claims = decodeJwt(String(exchanged.json().id_token)) as { sub?: string; nonce?: string; acr?: string; aud?: unknown }
    if (claims.nonce !== flow.nonce || claims.aud !== CONSOLE_CLIENT_ID || typeof claims.sub !== 'string') return refuse(400, 'This sign-in has expired', 'Start again from the console.')
    if (claims.acr !== 'aal2') return refuse(403, 'You could not be signed in', 'The console needs a second factor.')
    if (!(await sessions.mayUse(claims.sub))) {
      return refuse(403, 'This account may not use the console', 'Only accounts with the operator or viewer role (the permission console:read) may. An operator can give it: portcullis users roles EMAIL --add operator.')
    }
    const grantRef = await services.provider.grantOfAccessToken(String(exchanged.json().access_token))
    if (!grantRef) return refuse(400, 'This sign-in has expired', 'Start again from the console.')
    const token = await sessions.open(claims.sub, grantRef)
    reply.header('set-cookie', [clearFlow, cookie(CONSOLE_COOKIE, token, CONSOLE_MAX_AGE_MS / 1000, 'Strict')])
    return reply.code(303).header('location', `${base}/users`).send()
  })

  // Everything else needs a live session; a change needs console:write.
  await app.register(async (scope) => {
    scope.addHook('preHandler', async (request, reply) => {
      const operator = await sessions.operator(cookieValues(request, CONSOLE_COOKIE)[0])
      if (!operator) {
        reply.header('set-cookie', cookie(CONSOLE_COOKIE, '', 0, 'Strict'))
        if (request.method === 'GET') return reply.code(303).header('location', `${base}/sign-in`).send()
        throw new AppError('AUTH_REQUIRED', { message: 'Your console session has ended; sign in again.' })
      }
      if (request.method === 'POST' && !operator.canWrite && !request.url.startsWith(`${base}/sign-out`)) {
        throw new AppError('FORBIDDEN', { message: 'Your role lets you read the console, not change anything.' })
      }
      request.operator = operator
    })

    scope.get(base, async (_request, reply) => reply.code(303).header('location', `${base}/users`).send())

    scope.post(`${base}/sign-out`, async (request, reply) => {
      await sessions.close(cookieValues(request, CONSOLE_COOKIE)[0])
      reply.header('set-cookie', cookie(CONSOLE_COOKIE, '', 0, 'Strict'))
      return send(reply, 200, consoleMessage(brand, 'Signed out of the console', html`<p>Your account's other sessions are as they were.</p><p><a href="${base}/sign-in">Sign in again</a></p>`))
    })

    const context: ConsoleContext = {
      services,
      brand,
      base,
      page: (request) => ({ brand, base, operator: request.operator! }),
      send,
      redirect: (reply, path, notice) => reply.code(303).header('location', `${base}${path}${notice ? `${path.includes('?') ? '&' : '?'}notice=${notice}` : ''}`).send(),
      context: (request) => ({ ...requestContext(request), actor: `user:${request.operator!.userId}` }),
      form: (request) => (request.body as Form | undefined) ?? Object.create(null),
    }
    for (const area of options.areas) await area(scope, context)
  })
}

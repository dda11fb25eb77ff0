import { createHash, randomBytes } from 'node:crypto'
import Value from 'typebox/value'
import type { FastifyInstance, FastifyReply, FastifyRequest, preHandlerHookHandler } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { decodeJwt } from 'jose'
import type { LifecycleService } from '../accounts/lifecycle.ts'
import type { LoginBody } from '../auth/sessions.ts'
import type { AuthService } from '../auth/service.ts'
import type { BotProtection } from '../captcha/verifier.ts'
import { widgetSources } from '../captcha/widget.ts'
import { AppError } from '../errors.ts'
import { principalOf } from '../http/bearer.ts'
import { ok } from '../http/schemas.ts'
import type { Html } from '../html.ts'
import { logServerError, toAppError } from '../http/errors.ts'
import { pathOf } from '../http/security.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import { cookieValues, requestContext } from '../http/request.ts'
import type { Limits } from '../limits/limits.ts'
import { AssertionCredential } from '../mfa/schemas.ts'
import type { MfaService } from '../mfa/service.ts'
import { flowCookieOf, setFlowCookie } from '../oidc/routes.ts'
import type { OidcService } from '../oidc/service.ts'
import type { EmailSignIn } from '../email/service.ts'
import { LIBRARY_PAGE_CSP, providerPageCsp, providerPages } from '../pages/provider.ts'
import { installFormPages, problemPage, type Form } from '../pages/routes.ts'
import type { PageBrand } from '../pages/views.ts'
import type { ClientRegistry } from './clients.ts'
import { RegistrationError, type DynamicRegistration } from './registration.ts'
import { ROUTES } from './configuration.ts'
import { AppList, AppParams, AppRevoked } from './schemas.ts'
import { resourceMetadata } from './resource.ts'
import type { ProviderService } from './service.ts'

export interface ProviderRouteDeps {
  provider: ProviderService
  clients: ClientRegistry
  auth: AuthService
  mfa: MfaService
  lifecycle: LifecycleService
  limits: Limits
  hasher: { saturated(): boolean }
  brand: PageBrand
  ownOrigin: string
  /** The API's protected resource metadata (RFC 9728): its URL, the API's identifier, the issuer. */
  resourceMetadata: { url: string; resource: string; issuer: string }
  /** Sign-in with an upstream identity provider ("Continue with ..."), and its flow cookie's settings. */
  oidc: OidcService
  oidcCookie: { basePath: string; secure: boolean }
  /** Sign-in with an e-mailed code (src/email/), on the sign-in page. */
  email: EmailSignIn
  /** Bot protection: the widget in the e-mailed code's address form, and its check before a code is mailed. */
  captcha: BotProtection
  /** Dynamic client registration (RFC 7591), when OP_REGISTRATION is not off. */
  registration: DynamicRegistration
}

/** The PKCE verifier of an upstream sign-in started from an interaction, kept by the browser under the interaction's path. */
const FEDERATED_COOKIE = 'portcullis_op_upstream'

/** The paths the library answers itself: its endpoints and the two discovery documents. */
const LIBRARY_PATHS = ['/oauth/*', '/.well-known/openid-configuration', '/.well-known/oauth-authorization-server']

/**
 * Hands a request to the library untouched: before Fastify reads the body (the library parses its
 * own), with the headers every answer carries (request id, no-store, hardening) copied onto the
 * raw response, since Fastify will not write them once the reply is hijacked.
 */
async function handOver(provider: ProviderService, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  reply.header('content-security-policy', LIBRARY_PAGE_CSP)
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    // CORS here is the library's, per client (its registered origins), never CORS_ORIGINS'.
    if (value === undefined || name.startsWith('access-control-') || name === 'vary') continue
    reply.raw.setHeader(name, value as string)
  }
  reply.hijack()
  await provider.handle(request.raw, reply.raw)
}

function send(reply: FastifyReply, status: number, page: Html, formTargets: string[] = [], widget?: Parameters<typeof providerPageCsp>[1]): FastifyReply {
  return reply.code(status).header('content-security-policy', providerPageCsp(formTargets, widget)).type('text/html; charset=utf-8').send(page.value)
}

/** Where a finished sign-in is redirected in the end, for the page's form-action (see providerPageCsp). */
function redirectTarget(redirectUri: unknown): string[] {
  if (typeof redirectUri !== 'string') return []
  try {
    const url = new URL(redirectUri)
    return url.protocol === 'http:' || url.protocol === 'https:' ? [url.origin] : [url.protocol]
  } catch {
    return []
  }
}

interface Interaction {
  uid: string
  prompt: { name: 'login' | 'consent'; reasons: string[]; details: Record<string, unknown> }
  params: Record<string, unknown>
  session?: { accountId?: string }
  grantId?: string
}

/**
 * The person's side of the provider (docs/provider.md, "The pages"): the pages at /oauth/interaction/{uid} the library
 * sends a browser to, to sign in (password, then the second factor when the account has one) and
 * to consent. A sign-in here is a Portcullis login, through the same service (limits counted
 * before judging, login order, audit, the credential epoch, the second-factor seam), and opens a
 * Portcullis session that the provider's session then is.
 */
export async function providerRoutes(app: FastifyInstance, deps: ProviderRouteDeps): Promise<void> {
  const { provider, clients, auth, mfa, lifecycle, limits, hasher, brand, ownOrigin, oidc, captcha } = deps
  const issuer = deps.resourceMetadata.issuer
  // Only the address form of the e-mailed code shows the widget, and only it allows its provider's
  // script and frames; every other page keeps its policy.
  const widget = captcha.widget
  const widgetPolicy = widget ? widgetSources(widget) : undefined
  const upstream = () => oidc.providers().providers.filter((entry) => entry.available).map(({ name, label }) => ({ name, label }))

  // Dynamic registration is Portcullis's own (src/provider/registration.ts), not the library's: public
  // clients only, limited per IP, stored in the registry as dynamic. Off, the path is the library's
  // (which answers that it does not know it).
  app.post(ROUTES.registration, {
    onRequest: async (request, reply) => {
      if (!deps.registration.enabled) return handOver(provider, request, reply)
    },
  }, async (request, reply) => {
    reply.header('cache-control', 'no-store')
    try {
      reply.headers(await limits.perIp('client_registration', request.ip))
      const bearer = /^Bearer ([\x21-\x7e]{1,512})$/.exec(request.headers.authorization ?? '')?.[1] ?? null
      return reply.code(201).send(await deps.registration.register(request.body, bearer, requestContext(request)))
    } catch (error) {
      if (error instanceof RegistrationError) {
        if (error.status === 401) reply.header('www-authenticate', `Bearer error="${error.error}"`)
        return reply.code(error.status).send({ error: error.error, error_description: error.description })
      }
      const appError = toAppError(error)
      if (appError.code !== 'RATE_LIMITED') throw error
      for (const [name, value] of Object.entries(appError.headers)) reply.header(name, value)
      return reply.code(429).send({ error: 'invalid_request', error_description: 'too many registrations from this address; try again later' })
    }
  })

  for (const url of LIBRARY_PATHS) {
    app.route({
      method: ['GET', 'POST', 'OPTIONS', 'HEAD'],
      url,
      onRequest: async (request, reply) => {
        // A device's user code is 8 of 20 letters: guessing is held to the login budget (docs/provider.md).
        if (request.method === 'POST' && pathOf(request) === ROUTES.code_verification) {
          try {
            reply.headers(await limits.perIp('login', request.ip))
          } catch (error) {
            const appError = toAppError(error)
            for (const [name, value] of Object.entries(appError.headers)) reply.header(name, value)
            const { status, page } = problemPage(brand, appError, request.id)
            return send(reply, status, page)
          }
        }
        return handOver(provider, request, reply)
      },
      handler: async () => undefined,
    })
  }

  // Public and the same for everyone: any client may cache it.
  const metadata = resourceMetadata(deps.resourceMetadata.resource, deps.resourceMetadata.issuer)
  app.get(new URL(deps.resourceMetadata.url).pathname, async (_request, reply) => reply.header('cache-control', 'public, max-age=300').send(metadata))

  await app.register(async (pages) => {
    // Each page sets its own policy: its form may lead on to the client's redirect origin.
    installFormPages(pages, { brand, ownOrigin, csp: null, answer: (reply, status, page) => send(reply, status, page) })

    const details = async (request: FastifyRequest, reply: FastifyReply): Promise<Interaction | null> => {
      try {
        return (await (await provider.provider()).interactionDetails(request.raw, reply.raw)) as Interaction
      } catch {
        return null
      }
    }
    const expired = (reply: FastifyReply) =>
      send(reply, 400, providerPages.error(brand, 'This sign-in has expired', 'Go back to the app and start again.'))
    const clientName = (interaction: Interaction) => provider.clientForPages(String(interaction.params.client_id), interaction.params.redirect_uri)
    /** Where the browser goes on once the interaction has its result (the authorization resumes there). */
    const resultLocation = async (request: FastifyRequest, reply: FastifyReply, result: Record<string, unknown>) =>
      (await provider.provider()).interactionResult(request.raw, reply.raw, result, { mergeWithLastSubmission: true })
    const finish = async (request: FastifyRequest, reply: FastifyReply, result: Record<string, unknown>) =>
      reply.code(303).header('location', await resultLocation(request, reply, result)).send()
    const form = (request: FastifyRequest): Form => (request.body as Form | undefined) ?? Object.create(null)

    pages.get<{ Params: { uid: string } }>('/oauth/interaction/:uid', async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid) return expired(reply)
      const { name, firstParty, document } = await clientName(interaction)
      const targets = redirectTarget(interaction.params.redirect_uri)
      if (interaction.prompt.name === 'login') {
        const hint = typeof interaction.params.login_hint === 'string' ? interaction.params.login_hint : undefined
        return send(reply, 200, providerPages.signIn(brand, interaction.uid, name, { providers: upstream(), ...(hint ? { email: hint } : {}) }), targets)
      }
      // A first-party client is not asked (docs/provider.md); everything else is, scope by scope.
      if (firstParty) return finish(request, reply, { consent: { grantId: await grantFor(interaction) } })
      const email = interaction.session?.accountId ? await provider.emailOf(interaction.session.accountId) : null
      const scopes = String(interaction.params.scope ?? '').split(' ').filter(Boolean)
      // A registered resource is named, with what each of its scopes asked for lets the app do there.
      const resources = []
      for (const uri of resourcesOf(interaction)) {
        const described = await provider.describeResource(uri)
        if (described) resources.push({ name: described.name, host: new URL(described.uri).host, scopes: described.scopes.filter((scope) => scopes.includes(scope.name)) })
      }
      return send(reply, 200, providerPages.consent(brand, interaction.uid, name, scopes, email ?? '', resources, document), targets)
    })

    /** The resources an authorization names (`resource`, once or more). */
    const resourcesOf = (interaction: Interaction): string[] => {
      const value = interaction.params.resource
      return (Array.isArray(value) ? value : value === undefined ? [] : [value]).filter((uri): uri is string => typeof uri === 'string')
    }

    /** The grant the person approves: what the request asked for, within what the client registered. */
    async function grantFor(interaction: Interaction): Promise<string> {
      const library = await provider.provider()
      const grant = interaction.grantId ? await library.Grant.find(interaction.grantId) : new library.Grant({ accountId: interaction.session!.accountId, clientId: interaction.params.client_id })
      const missing = interaction.prompt.details
      if (Array.isArray(missing.missingOIDCScope)) grant.addOIDCScope(missing.missingOIDCScope.join(' '))
      if (Array.isArray(missing.missingOIDCClaims)) grant.addOIDCClaims(missing.missingOIDCClaims)
      const resources = (missing.missingResourceScopes ?? {}) as Record<string, string[]>
      for (const [resource, scopes] of Object.entries(resources)) {
        const offered = new Set(await provider.scopesOf(resource))
        grant.addResourceScope(resource, scopes.filter((scope) => offered.has(scope)).join(' '))
      }
      return grant.save()
    }

    /** A login that opened a Portcullis session: the result the library resumes the authorization with. */
    const signedIn = async (request: FastifyRequest, reply: FastifyReply, interaction: Interaction, body: LoginBody) =>
      finish(request, reply, await signInResult(request, interaction, body))

    const signInResult = async (request: FastifyRequest, interaction: Interaction, body: LoginBody): Promise<Record<string, unknown>> => {
      const claims = decodeJwt(body.access_token) as { sub: string; sid: string; acr: 'aal1' | 'aal2'; amr: string[]; auth_time: number }
      const acrValues = typeof interaction.params.acr_values === 'string' ? interaction.params.acr_values.split(' ') : []
      if (acrValues.includes('aal2') && claims.acr !== 'aal2') {
        // The client asked for a second factor and this account has none: no session for it.
        await lifecycle.endSession(claims.sub, claims.sid, requestContext(request))
        return { error: 'access_denied', error_description: 'this client requires a second factor, and the account has none' }
      }
      await provider.nameSession(claims.sid, (await clientName(interaction)).name)
      return {
        login: { accountId: claims.sub, acr: claims.acr, amr: claims.amr, ts: claims.auth_time, remember: true },
        portcullis: { sessionId: claims.sid },
      }
    }

    const loginFailure = async (reply: FastifyReply, interaction: Interaction, error: unknown, email: string, password?: string) => {
      if (!(error instanceof AppError)) throw error
      const { name } = await clientName(interaction)
      const targets = redirectTarget(interaction.params.redirect_uri)
      if (error.code === 'MFA_REQUIRED') {
        const { mfa_token: token, methods } = (error.mfa ?? {}) as { mfa_token?: string; methods?: string[] }
        if (token) return send(reply, 200, providerPages.secondFactor(brand, interaction.uid, token, methods ?? []), targets)
      }
      const messages: Record<string, string> = {
        INVALID_CREDENTIALS: email === '' && password === undefined ? 'That sign-in did not work. Try again.' : 'That e-mail address and password do not match an account.',
        EMAIL_NOT_VERIFIED: 'Confirm your e-mail address first: open the link we mailed you.',
        ACCOUNT_DISABLED: 'This account is disabled.',
        VALIDATION_ERROR: 'Enter your e-mail address and password.',
      }
      const message = messages[error.code]
      if (!message) throw error
      return send(reply, error.status, providerPages.signIn(brand, interaction.uid, name, { email, message, providers: upstream() }), targets)
    }

    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/login', { onRequest: [refuseWhenSaturated(hasher), limitByIp(limits, 'login')] }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return expired(reply)
      const { email = '', password = '' } = form(request)
      try {
        return await signedIn(request, reply, interaction, await auth.login({ email, password }, requestContext(request)))
      } catch (error) {
        return loginFailure(reply, interaction, error, email, password)
      }
    })

    // An e-mailed code instead of a password (src/email/): the address, then the code, on these
    // pages; the mail's link, opened anywhere, shows the same code (no redirect_to).
    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/email', { onRequest: limitByIp(limits, 'mail') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return expired(reply)
      const sending = form(request).step === 'send'
      // Judged before the address is read and before anything is mailed, so the answer (400, 503 or
      // the code page) never depends on whether an account exists.
      const refused = sending ? await captcha.refuseForm(form(request), request.ip) : null
      const { name } = await clientName(interaction)
      const targets = redirectTarget(interaction.params.redirect_uri)
      const addressForm = (status: number, options: Parameters<typeof providerPages.emailAddress>[4]) =>
        send(reply, status, providerPages.emailAddress(brand, interaction.uid, name, widget, options), [], widgetPolicy)
      if (!sending) return addressForm(200, typeof interaction.params.login_hint === 'string' ? { email: interaction.params.login_hint } : {})
      const address = form(request).email ?? ''
      if (refused) return addressForm(400, { email: address, captcha: refused })
      try {
        deps.email.start({ email: address }, randomBytes(32).toString('base64url'), requestContext(request))
      } catch (error) {
        if (error instanceof AppError && error.code === 'VALIDATION_ERROR') return addressForm(400, { email: address, message: 'Enter a valid e-mail address.' })
        throw error
      }
      return send(reply, 200, providerPages.emailCode(brand, interaction.uid, address), targets)
    })

    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/email-code', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return expired(reply)
      const { email: address = '', code = '' } = form(request)
      try {
        return await signedIn(request, reply, interaction, await deps.email.verify({ email: address, code: code.replace(/\s+/g, '') }, 'body', requestContext(request)))
      } catch (error) {
        if (error instanceof AppError && error.code === 'INVALID_CREDENTIALS') return send(reply, 401, providerPages.emailCode(brand, interaction.uid, address, 'That code is wrong, already used or expired.'), redirectTarget(interaction.params.redirect_uri))
        return loginFailure(reply, interaction, error, address)
      }
    })

    // "Continue with {provider}": the upstream sign-in of src/oidc/, coming back to this interaction
    // with a login code bound to a PKCE verifier this browser keeps under the interaction's path.
    pages.post<{ Params: { uid: string; name: string } }>('/oauth/interaction/:uid/federated/:name', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return expired(reply)
      const verifier = randomBytes(32).toString('base64url')
      const started = await oidc.start(
        request.params.name,
        { redirectTo: `${issuer}/oauth/interaction/${interaction.uid}/federated`, codeChallenge: createHash('sha256').update(verifier).digest('base64url'), codeChallengeMethod: 'S256' },
        flowCookieOf(request),
      )
      setFlowCookie(reply, started.browser, deps.oidcCookie)
      const attributes = [`${FEDERATED_COOKIE}=${verifier}`, `Path=/oauth/interaction/${interaction.uid}`, 'Max-Age=600', 'HttpOnly', 'SameSite=Lax', ...(deps.oidcCookie.secure ? ['Secure'] : [])]
      reply.header('set-cookie', [reply.getHeader('set-cookie') as string, attributes.join('; ')])
      return reply.code(303).header('location', started.location).send()
    })

    pages.get<{ Params: { uid: string }; Querystring: { code?: string; error?: string } }>('/oauth/interaction/:uid/federated', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return expired(reply)
      const verifier = cookieValues(request, FEDERATED_COOKIE)[0]
      const code = typeof request.query.code === 'string' ? request.query.code : ''
      try {
        if (!code || !verifier) throw new AppError('INVALID_CREDENTIALS')
        return await signedIn(request, reply, interaction, await oidc.exchange({ code, codeVerifier: verifier }, 'body', requestContext(request)))
      } catch (error) {
        return loginFailure(reply, interaction, error, '')
      }
    })

    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/mfa', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return expired(reply)
      const { mfa_token: token = '', code = '' } = form(request)
      const trimmed = code.replace(/\s+/g, '')
      const method = /^\d{6}$/.test(trimmed) ? 'totp' : 'recovery_code'
      try {
        const { body } = await mfa.verify({ mfa_token: token, method, code: trimmed }, requestContext(request))
        return await signedIn(request, reply, interaction, body)
      } catch (error) {
        if (error instanceof AppError && error.code === 'INVALID_MFA_CODE') {
          return send(reply, 401, providerPages.secondFactor(brand, interaction.uid, token, [], 'That code is wrong, already used or expired.'), redirectTarget(interaction.params.redirect_uri))
        }
        if (error instanceof AppError && error.code === 'INVALID_MFA_TOKEN') {
          const { name } = await clientName(interaction)
          return send(reply, 401, providerPages.signIn(brand, interaction.uid, name, { message: 'Too many wrong codes, or it took too long. Sign in again.' }))
        }
        throw error
      }
    })

    // A passkey, where JavaScript runs (src/pages/provider.ts): a passwordless sign-in from the
    // sign-in page, or the second step with the mfa_token. JSON answers for the page's script.
    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/passkey/options', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return reply.code(400).send({ message: 'This sign-in has expired. Go back to the app and start again.' })
      const { mfa_token: mfaToken } = form(request)
      try {
        return mfaToken ? await mfa.passkeyOptions({ mfaToken }) : await mfa.passkeyLoginOptions()
      } catch (error) {
        const appError = toAppError(error)
        return reply.code(appError.status).send({ message: appError.message })
      }
    })

    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/passkey', { onRequest: limitByIp(limits, 'login') }, async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'login') return reply.code(400).send({ message: 'This sign-in has expired. Go back to the app and start again.' })
      const { mfa_token: mfaToken, challenge_id: challengeId = '', credential = '' } = form(request)
      try {
        let parsed: unknown
        try {
          parsed = JSON.parse(credential)
        } catch {
          parsed = null
        }
        // The same shape the API's passkey routes check, before anything reads it.
        if (!Value.Check(AssertionCredential, parsed)) throw new AppError('INVALID_CREDENTIALS')
        const body = mfaToken
          ? (await mfa.verify({ mfa_token: mfaToken, method: 'passkey', credential: parsed as never }, requestContext(request))).body
          : await mfa.loginWithPasskey({ challenge_id: challengeId, credential: parsed as never }, requestContext(request))
        return { location: await resultLocation(request, reply, await signInResult(request, interaction, body)) }
      } catch (error) {
        const appError = toAppError(error)
        logServerError(request, appError, error)
        const messages: Record<string, string> = { INVALID_CREDENTIALS: 'That passkey did not sign you in.', ACCOUNT_DISABLED: 'This account is disabled.', EMAIL_NOT_VERIFIED: 'Confirm your e-mail address first: open the link we mailed you.' }
        return reply.code(appError.status).send({ message: messages[appError.code] ?? appError.message })
      }
    })

    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/consent', async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid || interaction.prompt.name !== 'consent') return expired(reply)
      return finish(request, reply, { consent: { grantId: await grantFor(interaction) } })
    })

    pages.post<{ Params: { uid: string } }>('/oauth/interaction/:uid/abort', async (request, reply) => {
      const interaction = await details(request, reply)
      if (!interaction || interaction.uid !== request.params.uid) return expired(reply)
      return finish(request, reply, { error: 'access_denied', error_description: 'the person did not allow it' })
    })
  })
}

/**
 * The apps a user approved through the provider (README.md, Endpoints): listed, and each revocable at once (its
 * grant and refresh tokens end; its access tokens stop working here within the revocation bound).
 */
export async function protectedProviderRoutes(fastify: FastifyInstance, provider: ProviderService, recent: preHandlerHookHandler): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['provider']
  const security = [{ bearer: [] }]

  app.get('/auth/me/apps', {
    schema: { tags, security, operationId: 'listApps', response: { 200: AppList } },
  }, async (request) => ok({ apps: await provider.appsOf(principalOf(request).userId) }))

  app.delete('/auth/me/apps/:client_id', {
    preHandler: recent,
    schema: { tags, security, operationId: 'revokeApp', params: AppParams, response: { 200: AppRevoked } },
  }, async (request) => {
    if (!(await provider.revokeApp(principalOf(request).userId, request.params.client_id))) throw new AppError('NOT_FOUND')
    return ok({ client_id: request.params.client_id, revoked: true as const })
  })
}

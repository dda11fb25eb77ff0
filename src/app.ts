import { randomUUID } from 'node:crypto'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import { dataRightsRoutes, protectedLifecycleRoutes, publicLifecycleRoutes } from './accounts/routes.ts'
import { adminRoutes } from './admin/routes.ts'
import { invitationPageRoutes } from './authz/invitation-pages.ts'
import { organizationAdminRoutes, protectedOrganizationRoutes } from './authz/org-routes.ts'
import { roleAdminRoutes } from './authz/roles-routes.ts'
import { importAdminRoutes } from './imports/routes.ts'
import { CookieTransport } from './auth/cookie-transport.ts'
import { protectedAuthRoutes, publicAuthRoutes } from './auth/routes.ts'
import { BotProtection, CaptchaVerifier } from './captcha/verifier.ts'
import type { Config } from './config.ts'
import { AppError } from './errors.ts'
import { protect } from './http/bearer.ts'
import { registerApiDocs } from './http/docs.ts'
import { answerClientError, installErrorHandling, logServerError, sendError, toAppError } from './http/errors.ts'
import { opsRoutes } from './http/ops.ts'
import { installTransportSecurity, pathOf, setCommonHeaders } from './http/security.ts'
import { lazySerializers } from './http/serialization.ts'
import { installValidation } from './http/validation.ts'
import { HandlersInFlight } from './http/in-flight.ts'
import { lazyRequestLogger, logDestination, REDACT_PATHS, requestLineWriter, serializeError } from './logger.ts'
import { emailPageRoutes, publicEmailRoutes } from './email/routes.ts'
import { protectedMfaRoutes, publicMfaRoutes, recentSecondFactor } from './mfa/routes.ts'
import { protectedOidcRoutes, publicOidcRoutes } from './oidc/routes.ts'
import { pageRoutes } from './pages/routes.ts'
import { profilePageRoutes, protectedProfileRoutes } from './profile/routes.ts'
import { webhookAdminRoutes } from './webhooks/routes.ts'
import { advertiseResourceMetadata, resourceMetadataUrl } from './provider/resource.ts'
import { protectedProviderRoutes, providerRoutes } from './provider/routes.ts'
import { resourceAdminRoutes } from './provider/resources-routes.ts'
import { apiKeyRoutes } from './console/api-keys.ts'
import { clientRoutes } from './console/clients.ts'
import { eventRoutes } from './console/events.ts'
import { organizationRoutes } from './console/organizations.ts'
import { resourceRoutes } from './console/resources.ts'
import { roleRoutes } from './console/roles.ts'
import { consoleRoutes } from './console/routes.ts'
import { userRoutes } from './console/users.ts'
import { webhookRoutes } from './console/webhooks.ts'
import { startServices, type AppOverrides, type AppServices } from './services.ts'
import { watchlistRoutes } from './watchlists/routes.ts'

export type { AppOverrides, AppServices } from './services.ts'

declare module 'fastify' {
  interface FastifyInstance {
    services: AppServices
  }
}

const DEFAULT_BODY_LIMIT = 64 * 1024
/** How long shutdown waits for handlers whose client has gone (a queued hash waits at most HASH_WAIT_SECONDS, 5 s by default). */
const HANDLER_DEADLINE_MS = 10_000
const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/
const KEEP_ALIVE_TIMEOUT_MS = 72_000

/**
 * Node's own settings for the request timeout: headers are held to the same limit as the whole
 * request, and the connections are checked every second rather than Node's default 30 s, so a
 * slow request is cut within a second of its limit, not up to 30 s after it.
 */
function slowClientLimits(requestTimeoutMs: number) {
  return { requestTimeout: requestTimeoutMs, headersTimeout: requestTimeoutMs, connectionsCheckingInterval: Math.min(1000, requestTimeoutMs / 2) }
}

/** Builds the whole service in-process: no listening and no process.* here (see server.ts). */
export async function buildApp(config: Config, overrides: AppOverrides = {}): Promise<FastifyInstance> {
  // One stream for every line, so the request lines' own logger (below) keeps them in order.
  const logStream = overrides.logStream ?? logDestination()
  const app = Fastify({
    logger: {
      level: config.logLevel,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      // Fastify's type insists on a `stack` field; leaving it out is the point (src/logger.ts).
      serializers: { err: serializeError as never },
      stream: logStream,
    },
    // Its per-request child logger is made when the request first writes a line (src/logger.ts).
    childLoggerFactory: lazyRequestLogger,
    // One line per request is written by the onResponse hook below, not Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    // Malformed URLs and similar router-level failures answer with the envelope too.
    frameworkErrors: (error, request, reply) => {
      setCommonHeaders(request, reply, config.production)
      const appError = toAppError(error)
      logServerError(request, appError, error)
      sendError(reply, appError)
    },
    // Requests Node's parser refuses (headers over 16 KiB, an unknown method) answer in the envelope too.
    clientErrorHandler: answerClientError,
    // A caller's request id is kept when it is harmless, so logs join up across services.
    genReqId: (request) => {
      const given = request.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID()
    },
    requestIdHeader: false,
    trustProxy: config.trustProxy ?? false,
    bodyLimit: DEFAULT_BODY_LIMIT,
    // Slow clients (docs/SECURITY.md): a request trickled a byte at a time would hold a
    // connection and its parser for as long as the sender likes, so one whose headers and body have
    // not all arrived within REQUEST_TIMEOUT_SECONDS is cut. Node reports it as a clientError
    // (ERR_HTTP_REQUEST_TIMEOUT), which answerClientError turns into the 408 envelope. The time
    // spent in a handler does not count: the clock stops once the request has fully arrived.
    requestTimeout: config.requestTimeoutMs,
    // Longer than the idle timeouts of the usual load balancers (60 s), so they, not we, close an
    // idle pooled connection, and never just as they send a request down it.
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    ...(config.tls ? { https: { ...config.tls, ...slowClientLimits(config.requestTimeoutMs) } } : { http: slowClientLimits(config.requestTimeoutMs) }),
    // Fastify's own 503 while closing is not in the envelope; the onRequest hook below answers instead.
    return503OnClosing: false,
    // Route schemas compile on first use, not all at start-up (src/http/serialization.ts, validation.ts).
    schemaController: lazySerializers(),
  })

  const { services, stop } = await startServices(config, overrides, app.log)
  app.decorate('services', services)
  // Fastify's own close (listener, open connections) runs before this hook; handlers whose client
  // has gone are waited for here (src/http/in-flight.ts), then the services stop.
  const handlers = new HandlersInFlight()
  handlers.install(app)
  app.addHook('onClose', async () => {
    await handlers.idle(HANDLER_DEADLINE_MS)
    await stop()
  })

  // On shutdown, requests still arriving on open connections get a 503 in the envelope, and
  // connections busy when it began close after their answer instead of lingering for the
  // keep-alive timeout (idle ones Node closes at once).
  let draining = false
  app.addHook('preClose', async () => {
    draining = true
  })
  // The hooks every request passes through take a callback rather than return a promise: they do
  // nothing asynchronous, and a promise and its tick on every request were a measurable part of the
  // bearer read (issue 46). A throw is caught by Fastify and answered like a rejection.
  app.addHook('onRequest', (request, reply, done) => {
    setCommonHeaders(request, reply, config.production)
    if (draining) throw new AppError('SERVICE_UNAVAILABLE', { headers: { 'retry-after': '5' } })
    done()
  })
  // From the moment the instance leaves, every answer asks the client not to reuse the connection,
  // so keep-alive clients reconnect (through the load balancer, to another instance).
  app.addHook('onSend', (_request, reply, _payload, done) => {
    if (draining || services.readiness.leaving) reply.header('connection', 'close')
    done()
  })
  const requestLine = requestLineWriter(config.logLevel, logStream)
  // With request lines off (LOG_LEVEL=warn) there is no hook at all.
  if (requestLine) {
    app.addHook('onResponse', (request, reply, done) => {
      requestLine({ reqId: request.id, method: request.method, path: pathOf(request), status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 })
      done()
    })
  }

  // Cookies are Secure in production and whenever the service is reached over https.
  const secureCookies = config.production || config.publicUrl.startsWith('https://')
  const cookies = new CookieTransport({
    basePath: config.basePath,
    secure: secureCookies,
    allowedOrigins: [new URL(config.publicUrl).origin, ...config.corsOrigins],
    sessionIsLive: (token) => services.auth.refreshTokenIsLive(token),
  })
  services.metrics.install(app)
  installTransportSecurity(app, {
    production: config.production,
    nativeTls: config.tls !== undefined,
    corsOrigins: config.corsOrigins,
    // The cookie routes, and linking an identity provider (its answer sets the flow's cookie).
    credentialPaths: [
      ...cookies.routes(),
      ...config.oidc.providers.map((p) => `${config.basePath}/auth/oidc/${p.name}/link`),
      // The e-mailed sign-in: its start sets the cookie its link and exchange are bound to; verify answers in cookie mode.
      `${config.basePath}/auth/email/start`,
      `${config.basePath}/auth/email/verify`,
      `${config.basePath}/auth/email/exchange`,
    ],
  })
  installValidation(app)
  installErrorHandling(app)

  await registerApiDocs(app, config.publicUrl, config.exposure.docs)

  const { auth, mfa, oidc, lifecycle, dataRights, admin, apiKeys, db, keys, watchlists, limits, hasher, metrics, readiness } = services
  // Bot protection on the routes that make an account or mail an address, and on the pages' forms
  // for them (src/captcha/); off unless CAPTCHA_PROVIDER is set.
  const captcha = new BotProtection(config.captcha && new CaptchaVerifier(config.captcha, app.log, metrics.counter({
    name: 'portcullis_captcha_checks_total',
    help: 'Bot checks by outcome: passed, missing, refused (400), unavailable (the provider could not be asked: 503).',
    labelNames: ['outcome'] as const,
  })))
  // The sensitive actions need a recent second factor when the account has one (src/mfa/).
  const recent = recentSecondFactor(mfa)
  const brand = { appName: config.appName, appUrl: config.appUrl }
  const oidcRoutes = { basePath: config.basePath, secure: secureCookies, brand }
  // The API's protected resource metadata (RFC 9728), named in its 401s.
  const metadataUrl = resourceMetadataUrl(config.publicUrl, config.basePath)
  await app.register(opsRoutes, { db, keys, metrics, readiness, metricsAccess: config.exposure.metrics })
  // The pages behind the mailed links, at the root of PUBLIC_URL (outside the base path).
  await app.register(pageRoutes, { auth, lifecycle, limits, hasher, brand, captcha, ownOrigin: new URL(config.publicUrl).origin })
  // The e-mailed sign-in link's page, beside them (src/email/).
  await app.register(emailPageRoutes, { email: services.email, limits, brand, ownOrigin: new URL(config.publicUrl).origin })
  // The change-of-address link's page, beside them (src/profile/).
  await app.register(profilePageRoutes, { profile: services.profile, brand, ownOrigin: new URL(config.publicUrl).origin })
  // The invitation link's page, beside them (src/authz/).
  await app.register(invitationPageRoutes, { invitations: services.invitations, brand, ownOrigin: new URL(config.publicUrl).origin, mode: config.organizations })
  // The operators' console: server-rendered pages under /console, signing in through the provider (src/console/).
  if (config.console) {
    await app.register(consoleRoutes, {
      services, brand, publicUrl: config.publicUrl, issuer: config.provider.issuer, production: config.production, sessions: services.consoleSessions,
      areas: [userRoutes, eventRoutes, organizationRoutes, roleRoutes, clientRoutes, resourceRoutes, webhookRoutes, apiKeyRoutes],
    })
  }
  // Portcullis as an OpenID provider: the library's endpoints under /oauth/, and its pages (src/provider/).
  await app.register(providerRoutes, {
    provider: services.provider, clients: services.clients, auth, mfa, lifecycle, limits, hasher, brand,
    ownOrigin: new URL(config.publicUrl).origin,
    resourceMetadata: { url: metadataUrl, resource: config.audience, issuer: config.provider.issuer },
    oidc,
    oidcCookie: oidcRoutes,
    email: services.email,
    captcha,
    registration: services.registration,
  })
  await app.register(
    async (api) => {
      await api.register(async (open) => {
        advertiseResourceMetadata(open, metadataUrl)
        await publicAuthRoutes(open, auth, limits, hasher, cookies, captcha)
        await publicLifecycleRoutes(open, lifecycle, limits, hasher, cookies, captcha)
        await publicMfaRoutes(open, mfa, limits, cookies, auth)
        // Sign-in with an identity provider (src/oidc/).
        await publicOidcRoutes(open, oidc, limits, cookies, oidcRoutes)
        // Sign-in with an e-mailed code or link (src/email/).
        await publicEmailRoutes(open, services.email, limits, cookies, { secure: secureCookies, captcha })
      })
      await api.register(async (scope) => {
        advertiseResourceMetadata(scope, metadataUrl)
        protect(scope, auth)
        await protectedAuthRoutes(scope, auth)
        await protectedLifecycleRoutes(scope, lifecycle, hasher, cookies, recent)
        await dataRightsRoutes(scope, dataRights, limits, hasher, cookies, recent)
        // The user's name and address (src/profile/).
        await protectedProfileRoutes(scope, { profile: services.profile, auth, limits, hasher, recent })
        // Organisations, their members and invitations (src/authz/).
        await protectedOrganizationRoutes(scope, { organizations: services.organizations, invitations: services.invitations, limits })
        await protectedMfaRoutes(scope, mfa, limits, recent)
        await protectedOidcRoutes(scope, oidc, recent, oidcRoutes)
        // The apps the user approved through the OpenID provider (src/provider/).
        await protectedProviderRoutes(scope, services.provider, recent)
      })
      // The example resource: Portcullis's own tokens, and the provider's for this API (src/provider/resource.ts).
      await api.register(async (resource) => {
        advertiseResourceMetadata(resource, metadataUrl)
        protect(resource, {
          authenticateFromMemory: (token) => services.resourceTokens.authenticateFromMemory(token, auth),
          authenticate: (token) => services.resourceTokens.authenticate(token, auth),
        })
        await watchlistRoutes(resource, watchlists, metadataUrl)
      })
      // Operators: API keys, never a user's token (src/admin/).
      await api.register(adminRoutes, { admin, apiKeys, limits, clients: services.clients })
      // The operators' webhook endpoints and their deliveries (src/webhooks/).
      await api.register(webhookAdminRoutes, { webhooks: services.webhooks, apiKeys, limits })
      // Operators make organisations for accounts (src/authz/).
      await api.register(organizationAdminRoutes, { organizations: services.organizations, apiKeys, limits })
      // The roles catalogue, users' global roles and app_metadata (src/authz/).
      await api.register(roleAdminRoutes, { roles: services.roles, admin, apiKeys, limits })
      // The APIs registered as resources of the OpenID provider (src/provider/resources.ts).
      await api.register(resourceAdminRoutes, { resources: services.resources, apiKeys, limits })
      // Moving in: accounts imported from another system (src/imports/).
      await api.register(importAdminRoutes, { imports: services.imports, apiKeys, limits })
    },
    { prefix: config.basePath },
  )
  return app
}

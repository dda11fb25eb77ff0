import { randomBytes, randomUUID } from 'node:crypto'
import path from 'node:path'
import type { Writable } from 'node:stream'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import { LifecycleService } from './accounts/lifecycle.ts'
import { protectedLifecycleRoutes, publicLifecycleRoutes } from './accounts/routes.ts'
import { AccountService } from './accounts/service.ts'
import { CookieTransport } from './auth/cookie-transport.ts'
import { KeyStore } from './auth/keys.ts'
import { boundedHasher, createArgon2Hasher, loadCommonPasswords, type BoundedHasher, type PasswordHasher } from './auth/passwords.ts'
import { Limits } from './limits/limits.ts'
import { MemoryStore, RedisStore } from './limits/store.ts'
import { protectedAuthRoutes, publicAuthRoutes } from './auth/routes.ts'
import { SessionGate, type SessionGateOptions } from './auth/revocation.ts'
import { AuthService } from './auth/service.ts'
import { Background } from './background.ts'
import { REFRESH_TTL_SECONDS, TokenService } from './auth/tokens.ts'
import { systemClock, type Clock } from './clock.ts'
import type { Config } from './config.ts'
import { migrate, openDatabase, type Db } from './db/index.ts'
import { secrets } from './db/repositories.ts'
import { protect } from './http/bearer.ts'
import { answerClientError, installErrorHandling, logServerError, sendError, toAppError } from './http/errors.ts'
import { Metrics } from './http/metrics.ts'
import { opsRoutes, Readiness } from './http/ops.ts'
import { pageRoutes } from './pages/routes.ts'
import { installTransportSecurity, pathOf, setCommonHeaders } from './http/security.ts'
import { installValidation } from './http/validation.ts'
import { AppError } from './errors.ts'
import { REDACT_PATHS } from './logger.ts'
import { createMailTransport, type MailTransport } from './mail/index.ts'
import { DEFAULT_MAIL_QUEUE, MailQueue, type MailQueueOptions } from './mail/queue.ts'
import { CursorCodec } from './watchlists/cursor.ts'
import { watchlistRoutes } from './watchlists/routes.ts'
import { WatchlistService } from './watchlists/service.ts'

/** Everything a test (or another embedding) may replace. */
export interface AppOverrides {
  clock?: Clock
  hasher?: PasswordHasher
  /** A database the caller owns (and closes); by default one is opened from the config. */
  db?: Db
  mailTransport?: MailTransport
  /** Revocation-feed timings (poll interval, window). */
  gate?: SessionGateOptions
  /** Where log lines go; stdout by default. */
  logStream?: Writable
  /** Mail queue timings (poll interval, retry delays, lease). */
  mailQueue?: Partial<MailQueueOptions>
}

export interface AppServices {
  db: Db
  keys: KeyStore
  auth: AuthService
  lifecycle: LifecycleService
  accounts: AccountService
  watchlists: WatchlistService
  gate: SessionGate
  background: Background
  mailQueue: MailQueue
  limits: Limits
  metrics: Metrics
  hasher: BoundedHasher
  clock: Clock
  readiness: Readiness
}

declare module 'fastify' {
  interface FastifyInstance {
    services: AppServices
  }
}

const DEFAULT_BODY_LIMIT = 64 * 1024
const API_VERSION = '1.0.0'
const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/
/** The interactive reference runs Swagger UI's own scripts and styles, from this origin only. */
const DOCS_CSP = [
  "default-src 'self'", "connect-src 'self'", "img-src 'self' data:", "font-src 'self' data:", "style-src 'self'",
  "script-src 'self'", "script-src-attr 'none'", "object-src 'none'", "base-uri 'self'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ')

/** Builds the whole service in-process: no listening and no process.* here (see server.ts). */
export async function buildApp(config: Config, overrides: AppOverrides = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: {
      level: config.logLevel,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      ...(overrides.logStream ? { stream: overrides.logStream } : {}),
    },
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
    // Fastify's own 503 while closing is not in the envelope; the onRequest hook below answers instead.
    return503OnClosing: false,
    ...(config.tls ? { https: config.tls } : {}),
  })

  const clock = overrides.clock ?? systemClock
  const db = overrides.db ?? openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    onPoolError: (error) => app.log.warn({ err: { message: error.message } }, 'database connection lost'),
  })
  // What has been started, so a start-up that fails half-way stops it again (timers polling a
  // closed database, an open Redis connection) and a normal close stops it in reverse order.
  const started: (() => unknown)[] = []
  const stopStarted = async () => {
    for (const stop of started.reverse()) await stop()
    if (!overrides.db) await db.close()
  }
  try {
    // Read the blocklist at start, not on the first registration's request path.
    loadCommonPasswords()
    await migrate(db)
    const keys = new KeyStore(db, { clock, refreshTtlSeconds: REFRESH_TTL_SECONDS })
    await keys.start()
    started.push(() => keys.stop())
    const metrics = new Metrics()
    const mail =
      overrides.mailTransport ??
      createMailTransport({ smtpUrl: config.smtpUrl, from: config.mailFrom, outboxDir: path.join(config.dataDir, 'outbox'), logger: app.log })
    started.push(() => mail.close())
    const mailQueue = new MailQueue(db, mail, clock, app.log, metrics, { ...DEFAULT_MAIL_QUEUE, ...config.mailQueue, ...overrides.mailQueue })
    mailQueue.start()
    started.push(() => mailQueue.stop())
    const background = new Background(app.log)
    const gate = new SessionGate(db, app.log, overrides.gate)
    gate.start()
    started.push(() => gate.stop())
    const hasher = boundedHasher(overrides.hasher ?? createArgon2Hasher(), config.hashing)
    const store = config.redisUrl
      ? new RedisStore(config.redisUrl, (error) => app.log.warn({ err: { message: error.message } }, 'redis connection problem'))
      : new MemoryStore(clock)
    started.push(() => store.close())
    if (store instanceof RedisStore) await store.ready()
    const limits = new Limits(store, clock, config.limits)
    const tokens = new TokenService(keys, { issuer: config.issuer, audience: config.audience, clock })
    const auth = new AuthService({
      db,
      clock,
      hasher,
      tokens,
      mailQueue,
      background,
      gate,
      limits,
      logger: app.log,
      requireEmailVerification: config.requireEmailVerification,
      verifyEmailUrl: config.verifyEmailUrl,
      brand: { appName: config.appName },
    })
    const lifecycle = new LifecycleService({ db, clock, hasher, tokens, gate, mailQueue, background, limits, resetPasswordUrl: config.resetPasswordUrl, brand: { appName: config.appName } })
    const accounts = new AccountService(db, clock, (changes) => gate.apply(changes))
    const cursorSecret = await secrets.getOrCreate(db.kysely, 'cursor_hmac', randomBytes(32).toString('base64url'), clock.now())
    const watchlists = new WatchlistService(db, clock, new CursorCodec(cursorSecret))
    metrics.gauge({ name: 'portcullis_session_gate_sessions', help: 'Sessions held in the in-memory revocation gate.', read: () => gate.size().sessions })
    metrics.gauge({ name: 'portcullis_session_gate_accounts', help: 'Accounts held in the in-memory revocation gate.', read: () => gate.size().accounts })
    metrics.gauge({ name: 'portcullis_password_hashes_waiting', help: 'Password hashes queued for a free slot.', read: () => hasher.waiting() })
    app.decorate('services', { db, keys, auth, lifecycle, accounts, watchlists, gate, background, mailQueue, limits, metrics, hasher, clock, readiness: new Readiness() })

    app.addHook('onClose', async () => {
      // Background work (the mail-sending flows) uses the mail queue, limits and the database: first.
      await background.drain()
      await stopStarted()
    })
  } catch (error) {
    await stopStarted().catch(() => {})
    throw error
  }

  // On shutdown, requests still arriving on open connections get a 503 in the envelope, and
  // connections busy when it began close after their answer instead of lingering for the
  // keep-alive timeout (idle ones Node closes at once).
  let draining = false
  app.addHook('preClose', async () => {
    draining = true
  })
  app.addHook('onRequest', async (request, reply) => {
    setCommonHeaders(request, reply, config.production)
    if (draining) throw new AppError('SERVICE_UNAVAILABLE', { headers: { 'retry-after': '5' } })
  })
  // From the moment the instance leaves, every answer asks the client not to reuse the connection,
  // so keep-alive clients reconnect (through the load balancer, to another instance).
  app.addHook('onSend', async (_request, reply) => {
    if (draining || app.services.readiness.leaving) reply.header('connection', 'close')
  })
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { method: request.method, path: pathOf(request), status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 },
      'request',
    )
  })

  const cookies = new CookieTransport({
    basePath: config.basePath,
    secure: config.production || config.publicUrl.startsWith('https://'),
    allowedOrigins: [new URL(config.publicUrl).origin, ...config.corsOrigins],
  })
  app.services.metrics.install(app)
  installTransportSecurity(app, {
    production: config.production,
    nativeTls: config.tls !== undefined,
    corsOrigins: config.corsOrigins,
    credentialPaths: cookies.routes(),
  })
  installValidation(app)
  installErrorHandling(app)

  // Registered before the routes so it sees every schema: the document is generated from the same
  // schemas that validate requests and serialise answers.
  await app.register(swagger, {
    hideUntagged: true,
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Portcullis', version: API_VERSION, description: 'Authentication service: register, verify, log in, refresh, bearer auth; sessions; watchlists.' },
      // Relative to wherever the document is served (PUBLIC_URL's path, if it has one), so /docs
      // can "Try it out" from any host name that reaches it without becoming a cross-origin call.
      servers: [{ url: new URL(config.publicUrl).pathname, description: 'this server' }],
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
    },
  })
  // The base layout leaves out Swagger UI's "explore any URL" bar (whose input carries an inline
  // style the policy below refuses); no validator badge, so nothing is fetched from elsewhere.
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: DOCS_CSP, validatorUrl: false, uiConfig: { layout: 'BaseLayout' } })

  const { auth, lifecycle, db: database, keys, watchlists, limits, hasher } = app.services
  await app.register(opsRoutes, { db: database, keys, metrics: app.services.metrics, readiness: app.services.readiness })
  // The pages behind the mailed links, at the root of PUBLIC_URL (outside the base path).
  await app.register(pageRoutes, { auth, lifecycle, limits, hasher, brand: { appName: config.appName, appUrl: config.appUrl } })
  await app.register(
    async (api) => {
      await api.register(async (open) => {
        await publicAuthRoutes(open, auth, limits, hasher, cookies)
        await publicLifecycleRoutes(open, lifecycle, limits, hasher, cookies)
      })
      await api.register(async (scope) => {
        protect(scope, auth)
        await protectedAuthRoutes(scope, auth)
        await protectedLifecycleRoutes(scope, lifecycle, hasher)
        await watchlistRoutes(scope, watchlists)
      })
    },
    { prefix: config.basePath },
  )
  return app
}

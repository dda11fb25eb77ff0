import { randomBytes } from 'node:crypto'
import path from 'node:path'
import type { Writable } from 'node:stream'
import { LifecycleService } from './accounts/lifecycle.ts'
import { DataRights } from './accounts/data-rights.ts'
import { AccountService } from './accounts/service.ts'
import { AuditLog } from './audit/service.ts'
import { KeySealer, resolveKek } from './auth/key-encryption.ts'
import { KeyStore, sealedSecret } from './auth/keys.ts'
import { ApiKeyService } from './admin/api-keys.ts'
import { AdminService } from './admin/service.ts'
import { boundedHasher, createArgon2Hasher, loadCommonPasswords, type BoundedHasher, type PasswordHasher } from './auth/passwords.ts'
import { SessionGate } from './auth/revocation.ts'
import { SessionOpener } from './auth/sessions.ts'
import { ClaimsSource } from './authz/claims.ts'
import { InvitationService } from './authz/invitations.ts'
import { RolesService } from './authz/roles.ts'
import { OrganizationService } from './authz/organizations.ts'
import { LoginCodes } from './auth/login-codes.ts'
import { AccountSignOut } from './auth/sign-out.ts'
import { EmailSignIn } from './email/service.ts'
import { SecretHasher } from './mfa/codes.ts'
import { MfaService } from './mfa/service.ts'
import { RelyingParty } from './mfa/webauthn.ts'
import { OidcProviders } from './oidc/providers.ts'
import { OidcService } from './oidc/service.ts'
import { AuthService } from './auth/service.ts'
import { REFRESH_TTL_SECONDS, TokenService } from './auth/tokens.ts'
import { Background } from './background.ts'
import { ChangeFeed, type ChangeFeedOptions } from './changes/feed.ts'
import { systemClock, type Clock } from './clock.ts'
import type { Config } from './config.ts'
import { GroupCommit } from './db/group-commit.ts'
import { migrate, openDatabase, type Db } from './db/index.ts'
import { batchesOf, secrets } from './db/repositories.ts'
import { Metrics } from './http/metrics.ts'
import { Readiness } from './http/ops.ts'
import { Limits } from './limits/limits.ts'
import { MemoryStore, RedisStore } from './limits/store.ts'
import type { Logger } from './logger.ts'
import { createMailTransport, type MailTransport } from './mail/index.ts'
import { DEFAULT_MAIL_QUEUE, MailQueue, type MailQueueOptions } from './mail/queue.ts'
import { CursorCodec } from './cursor.ts'
import { ClientRegistry } from './provider/clients.ts'
import { libraryPages } from './pages/provider.ts'
import { ResourceTokens } from './provider/resource.ts'
import { endProviderGrants, endProviderSessions } from './provider/logouts.ts'
import { ProviderService } from './provider/service.ts'
import { ResourceRegistry } from './provider/resources.ts'
import { DynamicRegistration } from './provider/registration.ts'
import { ClientMetadataDocuments } from './provider/client-metadata.ts'
import { ConsoleSessions } from './console/sessions.ts'
import { ProfileService } from './profile/service.ts'
import type { Resolve } from './webhooks/sender.ts'
import { WebhookService } from './webhooks/service.ts'
import type { DurableQueueOptions } from './queue/durable.ts'
import { Retention } from './retention.ts'
import { WatchlistService } from './watchlists/service.ts'
import { withImportedFormats } from './imports/formats.ts'
import { LegacyVerifier } from './imports/legacy.ts'
import { ImportService } from './imports/service.ts'
import { ImportedHashSample } from './imports/timing.ts'
import { PasswordCheck } from './auth/password-check.ts'

/**
 * What ends with all of an account's sessions, besides them and the pending proofs (which die by the
 * epoch, src/auth/pending-proofs.ts): the OpenID provider's grants, and its sessions with some of
 * them (src/auth/sign-out.ts). The CLI uses it too.
 */
export function accountSignOut(clock: Clock): AccountSignOut {
  return new AccountSignOut(clock, [endProviderGrants], [endProviderSessions])
}

/** Where the provider sends an operator back to the console (src/console/routes.ts). */
export function consoleCallback(publicUrl: string): string {
  const url = new URL(publicUrl)
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}/console/callback`
}

/** Everything a test (or another embedding) may replace. */
export interface AppOverrides {
  clock?: Clock
  hasher?: PasswordHasher
  /** A database the caller owns (and closes); by default one is opened from the config. */
  db?: Db
  mailTransport?: MailTransport
  /** Change-feed timings (poll interval, window, retention). */
  feed?: ChangeFeedOptions
  /** Where log lines go; stdout by default. */
  logStream?: Writable
  /** Mail queue timings (poll interval, retry delays, lease). */
  mailQueue?: Partial<MailQueueOptions>
  /** How many verified access tokens to remember. */
  tokenCacheSize?: number
  /** Rows a retention batch deletes (tests make it small to see several batches). */
  retentionBatch?: number
  /** Webhook queue timings and the receivers' time to answer (tests make them short); how endpoint names resolve (tests resolve one to loopback). */
  webhooks?: { queue?: Partial<DurableQueueOptions>; timeoutMs?: number; resolve?: Resolve }
  /** How the legacy system's name resolves (tests resolve one to loopback, to try the production address policy). */
  legacyResolve?: Resolve
  /** Client ID metadata documents: how names resolve, and a certificate authority to trust (tests serve https with their own). */
  clientMetadata?: { resolve?: Resolve; ca?: string | Buffer }
}

export interface AppServices {
  db: Db
  keys: KeyStore
  /** Seals and opens what is stored encrypted under KEY_ENCRYPTION_KEY. */
  sealer: KeySealer
  tokens: TokenService
  auth: AuthService
  mfa: MfaService
  oidc: OidcService
  /** Sign-in with an e-mailed code or link (src/email/). */
  email: EmailSignIn
  /** The user's name and address (src/profile/). */
  profile: ProfileService
  /** Organisations, their members (src/authz/organizations.ts) and invitations (src/authz/invitations.ts). */
  organizations: OrganizationService
  invitations: InvitationService
  /** The roles catalogue, users' global roles and app_metadata (src/authz/roles.ts). */
  roles: RolesService
  /** Events to the application (src/webhooks/): the endpoints, the outbox and its delivery queue. */
  webhooks: WebhookService
  lifecycle: LifecycleService
  accounts: AccountService
  dataRights: DataRights
  audit: AuditLog
  apiKeys: ApiKeyService
  admin: AdminService
  /** The OpenID provider's registered clients (src/provider/clients.ts). */
  clients: ClientRegistry
  /** Portcullis as an OpenID provider (src/provider/): the library, loaded on first use. */
  provider: ProviderService
  /** The watchlists API's view of the provider's access tokens (src/provider/resource.ts). */
  resourceTokens: ResourceTokens
  /** The APIs registered as resources of the provider (src/provider/resources.ts). */
  resources: ResourceRegistry
  /** Dynamic client registration (src/provider/registration.ts). */
  registration: DynamicRegistration
  /** The operators' console's sessions (src/console/sessions.ts). */
  consoleSessions: ConsoleSessions
  /** Moving in: imports of accounts from other systems (src/imports/). */
  imports: ImportService
  /** Lazy migration's questions to the old system (src/imports/legacy.ts). */
  legacy: LegacyVerifier
  /** The imported hash every failing password check spends while one is left (src/imports/timing.ts). */
  importedHashes: ImportedHashSample
  watchlists: WatchlistService
  feed: ChangeFeed
  gate: SessionGate
  commits: GroupCommit
  background: Background
  mailQueue: MailQueue
  retention: Retention
  limits: Limits
  metrics: Metrics
  hasher: BoundedHasher
  clock: Clock
  readiness: Readiness
}

/**
 * The rate-limit counters in Redis, with this instance's own to fall back on while Redis is away:
 * the gauge is what an operator alerts on (the limits then hold per instance), the counter says how
 * often it happened.
 */
function sharedCounters(url: string, clock: Clock, logger: Logger, metrics: Metrics): RedisStore {
  const fallbacks = metrics.counter({ name: 'portcullis_limits_redis_fallbacks_total', help: 'Times this instance lost Redis and went on counting the rate limits alone (once per outage).' })
  const store = new RedisStore(url, { local: new MemoryStore(clock), logger, onFallback: () => fallbacks.inc() })
  metrics.gauge({ name: 'portcullis_limits_redis_fallback', help: '1 while Redis is unreachable and this instance counts the rate limits alone (per instance, not shared), 0 while they are shared.', read: () => (store.fallingBack() ? 1 : 0) })
  return store
}

/** The parts that run in the background or hold connections: started in order, stopped in reverse. */
type Infrastructure = Awaited<ReturnType<typeof startInfrastructure>>

async function startInfrastructure(config: Config, overrides: AppOverrides, logger: Logger, db: Db, started: (() => unknown)[]) {
  const clock = overrides.clock ?? systemClock
  for (const { origin, reason } of config.webauthn.unlisted) logger.warn({ origin }, `CORS origin ${origin} cannot use passkeys: ${reason}`)
  // Read the blocklist at start, not on the first registration's request path.
  loadCommonPasswords()
  await migrate(db)
  const sealer = new KeySealer(resolveKek(config.keyEncryptionKey, config.dataDir, (message) => logger.warn({}, message)))
  const keys = new KeyStore(db, { clock, sealer, refreshTtlSeconds: REFRESH_TTL_SECONDS })
  await keys.start()
  started.push(() => keys.stop())
  const metrics = new Metrics()
  const mail =
    overrides.mailTransport ??
    createMailTransport({ smtpUrl: config.smtpUrl, from: config.mailFrom, outboxDir: path.join(config.dataDir, 'outbox'), logger })
  started.push(() => mail.close())
  const mailQueue = new MailQueue(db, mail, { current: sealer, previous: config.oldKeyEncryptionKey && new KeySealer(config.oldKeyEncryptionKey) }, clock, logger, metrics, { ...DEFAULT_MAIL_QUEUE, ...config.mailQueue, ...overrides.mailQueue })
  await mailQueue.sealWaiting()
  mailQueue.start()
  started.push(() => mailQueue.stop())
  const retention = new Retention(db, clock, logger, { ...config.retention, ...(overrides.retentionBatch ? { batch: overrides.retentionBatch } : {}) })
  retention.start()
  started.push(() => retention.stop())
  const commits = new GroupCommit(db)
  started.push(() => commits.flush())
  // A gap in the feed empties the caches it keeps current (src/changes/feed.ts): an operator alerts on this.
  const feedGaps = metrics.counter({ name: 'portcullis_change_feed_gaps_total', help: 'Times this instance went longer than the change feed window without a good read, and so dropped its cached sessions, account states and API keys.' })
  const feed = new ChangeFeed(db, logger, { clock, ...overrides.feed, onGap: () => feedGaps.inc() })
  metrics.gauge({ name: 'portcullis_change_feed_read_age_seconds', help: 'Seconds since this instance last read the change feed successfully (normally under a second).', read: () => feed.readAgeMs() / 1000 })
  const gate = new SessionGate(db, feed, { clock })
  feed.start()
  started.push(() => feed.stop())
  const store = config.redisUrl ? sharedCounters(config.redisUrl, clock, logger, metrics) : new MemoryStore(clock)
  started.push(() => store.close())
  // A Redis down at start does not stop the service: it starts counting alone (src/limits/store.ts).
  if (store instanceof RedisStore) await store.start()
  // Discovery at start; a provider that does not answer is retried and shown as unavailable.
  const identityProviders = new OidcProviders(config.oidc.providers, logger)
  await identityProviders.start()
  started.push(() => identityProviders.stop())
  const dropped = metrics.counter({ name: 'portcullis_background_tasks_dropped_total', help: 'Work after an answer (mail, audit of refusals) dropped because too many such tasks were pending, by task.', labelNames: ['task'] as const })
  // While accounts are still on imported hashes, every failing password check spends one of those too (src/imports/timing.ts).
  const importedHashes = new ImportedHashSample(db, logger)
  await importedHashes.start()
  started.push(() => importedHashes.stop())
  const background = new Background(logger, { onDropped: (task) => dropped.inc({ task }) })
  metrics.gauge({ name: 'portcullis_background_tasks', help: 'Work after an answer (mail, audit of refusals) pending on this instance.', read: () => background.size() })
  return {
    db, clock, sealer, keys, metrics, mailQueue, retention, commits, feed, gate, identityProviders, background,
    limits: new Limits(store, clock, config.limits),
    // Every password check goes through one hasher that knows the imported formats too (src/imports/formats.ts).
    hasher: boundedHasher(withImportedFormats(overrides.hasher ?? createArgon2Hasher(), config.imports.firebase, () => importedHashes.current()), config.hashing),
    importedHashes,
  }
}

/** The services the routes call, built on the infrastructure; nothing here starts anything. */
async function wireDomain(infra: Infrastructure, config: Config, overrides: AppOverrides, logger: Logger) {
  const { db, clock, sealer, keys, mailQueue, commits, feed, gate, background, limits, hasher } = infra
  const cursors = new CursorCodec(await secrets.getOrCreate(db.kysely, 'cursor_hmac', randomBytes(32).toString('base64url'), clock.now()))
  // The account modules write their events into the webhooks' outbox, in the transaction of each change.
  const webhooks = new WebhookService({
    db, clock, sealer, logger, cursors, metrics: infra.metrics, production: config.production,
    ...(overrides.webhooks?.queue ? { queue: overrides.webhooks.queue } : {}),
    ...(overrides.webhooks?.timeoutMs ? { timeoutMs: overrides.webhooks.timeoutMs } : {}),
    ...(overrides.webhooks?.resolve ? { resolve: overrides.webhooks.resolve } : {}),
  })
  const events = webhooks.outbox
  const tokens = new TokenService(keys, { issuer: config.issuer, audience: config.audience, clock, ...(overrides.tokenCacheSize ? { cacheSize: overrides.tokenCacheSize } : {}) })
  const brand = { appName: config.appName }
  // What every token claims the user may do, asked by every issuer through this one seam (src/authz/).
  const claims = new ClaimsSource(db, feed)
  const sessions = new SessionOpener({ tokens, clock, commits, claims, requireEmailVerification: config.requireEmailVerification })
  const mfa: MfaService = new MfaService({
    db, clock, sealer, sessions, tokens, limits, mailQueue, brand, events,
    hasher: new SecretHasher(await sealedSecret(db, sealer, 'mfa_hmac', clock.now())),
    stepUpMs: config.mfaStepUpMs,
    rp: new RelyingParty(config.webauthn),
    // The identity module is built after this one (it needs the second-factor seam); asked only at run time.
    hasIdentity: (trx, userId): Promise<boolean> => oidc.hasIdentity(trx, userId),
  })
  // Lazy migration: an account imported without a hash asks the system it came from, once (src/imports/legacy.ts).
  const legacy = new LegacyVerifier(config.imports.legacy, logger, { production: config.production, ...(overrides.legacyResolve ? { resolve: overrides.legacyResolve } : {}) })
  const passwords = new PasswordCheck({ db, clock, hasher, legacy })
  const auth = new AuthService({
    db, clock, hasher, passwords, tokens, mailQueue, background, gate, limits, logger, brand, commits, sessions, secondFactor: mfa, events,
    requireEmailVerification: config.requireEmailVerification,
    verifyEmailUrl: config.verifyEmailUrl,
  })
  const watchlists = new WatchlistService(db, clock, cursors)
  const audit = new AuditLog(db)
  // The one-time login code a sign-in ending in the browser hands to the application (providers, e-mailed links).
  const loginCodes = new LoginCodes(clock, await sealedSecret(db, sealer, 'login_code_hmac', clock.now()))
  const oidc = new OidcService({
    db, clock, sealer, sessions, logger, auth, events,
    providers: infra.identityProviders,
    hmacKey: await sealedSecret(db, sealer, 'oidc_hmac', clock.now()),
    loginCodes,
    secondFactor: mfa,
    hasPasskey: (userId, trx) => mfa.hasPasskey(userId, trx),
    mailQueue, brand,
    apiUrl: `${config.publicUrl}${config.basePath}`,
    redirectOrigins: config.oidc.redirectOrigins,
  })
  // Every event that ends all of an account's sessions also ends the sign-ins under way and the
  // proofs pending in these modules (src/auth/sign-out.ts).
  const signOut = accountSignOut(clock)
  const lifecycle = new LifecycleService({ db, clock, hasher, passwords, tokens, feed, mailQueue, background, limits, brand, signOut, events, resetPasswordUrl: config.resetPasswordUrl })
  const accounts = new AccountService(db, clock, signOut, events, (changes) => feed.applyLocally(changes))
  const email = new EmailSignIn({
    db, clock, sealer, limits, mailQueue, background, brand, sessions, loginCodes, signOut, events,
    hmacKey: await sealedSecret(db, sealer, 'email_hmac', clock.now()),
    secondFactor: mfa,
    applyLocally: (changes) => feed.applyLocally(changes),
    registerWithoutPassword: (address, context) => auth.registerFederated({ email: address, fullName: '' }, context, async () => {}, 'email_sign_in'),
    removeUnprovenAdditions: async (trx, userId) => {
      await mfa.removeAllFor(trx, userId)
      await oidc.unlinkAllFor(trx, userId)
    },
    linkBase: `${config.publicUrl}/sign-in/email?token=`,
    redirectOrigins: config.oidc.redirectOrigins,
    signup: config.emailSignup,
  })
  const profile = new ProfileService({
    db, clock, hasher, passwords, limits, mailQueue, lifecycle, brand, events,
    confirmUrl: `${config.publicUrl}/confirm-email-change?token=`,
    cancelUrl: `${config.publicUrl}/cancel-email-change?token=`,
    recentMs: config.mfaStepUpMs,
  })
  const organizations = new OrganizationService({ db, clock, events, cursors, applyLocally: (changes) => feed.applyLocally(changes), mode: config.organizations })
  const invitations = new InvitationService({ db, clock, mailQueue, brand, organizations, acceptUrl: `${config.publicUrl}/accept-invitation?token=` })
  const clients = new ClientRegistry({ db, clock, sealer })
  const resourceTokens = new ResourceTokens({ db, keys: infra.keys, gate, clock, sessions, issuer: config.provider.issuer, resource: config.audience })
  // The APIs operators register as resources of the provider, besides the built-in one (src/provider/resources.ts).
  const resources = new ResourceRegistry({ db, clock, builtIn: config.audience, production: config.production })
  // Clients that register themselves (RFC 7591), when OP_REGISTRATION allows it (src/provider/registration.ts).
  const registration = new DynamicRegistration({ db, clock, clients, mode: config.provider.registration })
  // Client ID metadata documents (src/provider/client-metadata.ts): a client_id that is an https URL.
  const clientMetadata = config.provider.clientMetadata
    ? new ClientMetadataDocuments({
        production: config.production,
        allowedHosts: config.provider.clientMetadataHosts,
        clock: () => clock.now(),
        ...(overrides.clientMetadata?.resolve ? { resolve: overrides.clientMetadata.resolve } : {}),
        ...(overrides.clientMetadata?.ca ? { ca: overrides.clientMetadata.ca } : {}),
      })
    : null
  const provider = new ProviderService({
    db, clock, sealer, clients, logger, events, resources, clientMetadata, production: config.production,
    keys: infra.keys,
    hmacKey: await sealedSecret(db, sealer, 'op_hmac', clock.now()),
    cookieKey: await sealedSecret(db, sealer, 'op_cookie_key', clock.now()),
    settings: { issuer: config.provider.issuer, accessTokenTtlSeconds: config.provider.accessTokenTtlSeconds, apiResource: config.audience, registration: config.provider.registration !== 'off' },
    pages: libraryPages({ appName: config.appName, appUrl: config.appUrl }),
    endSession: (userId, sessionId, context) => lifecycle.endSession(userId, sessionId, context),
    metrics: infra.metrics,
    resourceTokens,
    claims,
    commits: infra.commits,
    allowLoopbackFetch: !config.production,
  })
  const dataRights = new DataRights({ db, clock, hasher, passwords, limits, accounts, audit, watchlists, secondFactors: mfa, identities: oidc, apps: provider, mail: mailQueue, organizations })
  const apiKeys = new ApiKeyService(db, clock, await sealedSecret(db, sealer, 'api_key_hmac', clock.now()), background, feed)
  const roles = new RolesService({ db, clock, events, applyLocally: (changes) => feed.applyLocally(changes) })
  const admin = new AdminService(db, clock, accounts, audit, cursors, mfa, oidc, provider, roles)
  // The operators' console's sessions (src/console/): judged against the account and its roles on every request.
  const consoleSessions = new ConsoleSessions({ db, clock, claims, grants: provider })
  // Moving in: accounts from another system, with their hashes, factors, identities and roles (src/imports/).
  const imports = new ImportService({ db, clock, sealer, roles, events, importedHashes: infra.importedHashes, providers: new Set(config.oidc.providers.map((p) => p.name)), firebase: config.imports.firebase })
  return { legacy, imports, resources, registration, clientMetadata, consoleSessions, tokens, claims, auth, mfa, oidc, email, profile, organizations, invitations, roles, webhooks, lifecycle, accounts, watchlists, audit, dataRights, apiKeys, admin, clients, provider, resourceTokens }
}

function registerGauges({ metrics, gate, hasher, commits, db }: Infrastructure, tokens: TokenService): void {
  metrics.gauge({ name: 'portcullis_group_commits', help: 'Transactions committed by the group commit since start.', read: () => commits.stats.groups })
  metrics.gauge({ name: 'portcullis_group_commit_writes', help: 'Writes those transactions carried (writes / commits = the grouping).', read: () => commits.stats.jobs })
  metrics.gauge({ name: 'portcullis_session_gate_sessions', help: 'Sessions held in the in-memory revocation gate.', read: () => gate.size().sessions })
  metrics.gauge({ name: 'portcullis_session_gate_accounts', help: 'Accounts held in the in-memory revocation gate.', read: () => gate.size().accounts })
  metrics.gauge({ name: 'portcullis_verified_tokens_cached', help: 'Verified access tokens remembered (signature checks skipped on reuse).', read: () => tokens.cachedTokens() })
  metrics.gauge({ name: 'portcullis_password_hashes_waiting', help: 'Password hashes queued for a free slot.', read: () => hasher.waiting() })
  if (db.engine === 'postgres') {
    const { users, pages } = batchesOf(db)
    metrics.gauge({ name: 'portcullis_batched_read_queries', help: 'Queries that carried the batched request reads (PostgreSQL).', read: () => users.stats.queries + pages.stats.queries })
    metrics.gauge({ name: 'portcullis_batched_reads', help: 'Request reads those queries answered (reads / queries = the batching).', read: () => users.stats.reads + pages.stats.reads })
  }
}

/**
 * Wires the services (no HTTP here): opens and migrates the database, starts what runs in the
 * background (key refresh, change feed, mail queue, the Redis connection), builds the services on
 * them, and returns them with a stop that ends all of it in reverse order. A start-up that fails
 * half-way stops what it had started.
 */
export async function startServices(config: Config, overrides: AppOverrides, logger: Logger): Promise<{ services: AppServices; stop(): Promise<void> }> {
  const db = overrides.db ?? openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    lockTimeoutMs: config.lockTimeoutMs,
    onPoolError: (error) => logger.warn({ err: { message: error.message } }, 'database connection lost'),
  })
  const started: (() => unknown)[] = []
  const stopStarted = async () => {
    for (const stop of started.reverse()) await stop()
    if (!overrides.db) await db.close()
  }
  try {
    const infra = await startInfrastructure(config, overrides, logger, db, started)
    const domain = await wireDomain(infra, config, overrides, logger)
    // The provider's Back-Channel Logout queue delivers through the provider (loaded when a notice is due).
    started.push(() => domain.legacy.close())
    started.push(() => domain.clientMetadata?.close())
    domain.registration.start((error) => logger.warn({ err: { message: error.message } }, 'removing unused dynamic clients failed'))
    if (config.console) {
      // The console's built-in client of the provider, and the hourly sweep of its ended sessions.
      await domain.clients.ensureConsoleClient(consoleCallback(config.publicUrl))
      const sweep = setInterval(() => domain.consoleSessions.deleteEnded().catch((error: Error) => logger.warn({ err: { message: error.message } }, 'deleting ended console sessions failed')), 3600_000)
      sweep.unref()
      started.push(() => clearInterval(sweep))
    }
    started.push(() => domain.registration.stop())
    domain.provider.logouts.start()
    started.push(() => domain.provider.logouts.stop())
    await domain.webhooks.start()
    started.push(() => domain.webhooks.stop())
    registerGauges(infra, domain.tokens)
    return {
      services: { ...infra, ...domain, readiness: new Readiness() },
      async stop() {
        // Background work (the mail-sending flows) uses the mail queue, limits and the database: first.
        await infra.background.drain()
        await stopStarted()
      },
    }
  } catch (error) {
    await stopStarted().catch(() => {})
    throw error
  }
}

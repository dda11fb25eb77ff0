import type { RegisteredResource, ResourceRegistry } from './resources.ts'
import { AsyncLocalStorage } from 'node:async_hooks'
import type { AccountEvents } from '../webhooks/events.ts'
import { createSecretKey, type KeyObject } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { KoaContextWithOIDC, Provider } from 'oidc-provider'
import type { RequestContext } from '../audit/events.ts'
import type { KeySealer } from '../auth/key-encryption.ts'
import type { KeyStore } from '../auth/keys.ts'
import type { Clock } from '../clock.ts'
import type { GroupCommit } from '../db/group-commit.ts'
import type { Db } from '../db/index.ts'
import { sessions, users } from '../db/repositories.ts'
import type { Logger } from '../logger.ts'
import { decodeJwt } from 'jose'
import type { Metrics } from '../http/metrics.ts'
import { adapterFactory, grantReferences, LostRace, PortcullisAdapter, revokeGrant, revokeGrantIn, successorOf, type RequestState } from './adapter.ts'
import type { ResourceTokens } from './resource.ts'
import { BackchannelLogouts, queueLogoutNotices, type LogoutRow } from './logouts.ts'
import type { ClientRegistry } from './clients.ts'
import { ClientMetadataError, isMetadataDocumentUrl, type ClientMetadata, type ClientMetadataDocuments, type FetchedClientMetadata } from './client-metadata.ts'
import { RESOURCE_SCOPES, ROUTES, providerConfiguration, type ConfigurationDeps } from './configuration.ts'
import { records } from './store.ts'
import type { ClaimsSource } from '../authz/claims.ts'
import { organizationsOf } from '../authz/provider-claims.ts'
import { AppError } from '../errors.ts'
import { isUuid } from '../text.ts'

type Library = typeof import('oidc-provider')

/** Marks the queue's own deliveries, which the end-session interception must let through. */
const delivering = new AsyncLocalStorage<true>()

export interface ProviderSettings {
  issuer: string
  accessTokenTtlSeconds: number
  /** `{PUBLIC_URL}{BASE_PATH}`: the API a JWT access token is for by default. */
  apiResource: string
  /** Dynamic registration is on (OP_REGISTRATION open or token): discovery names its endpoint. */
  registration: boolean
}

/**
 * A metadata document's client as the library reads it: public, PKCE, third-party. The document's
 * `loopbackOnly` is Portcullis's own (the consent page's warning), not the library's.
 */
function libraryMetadata(metadata: ClientMetadata): Record<string, unknown> {
  const { loopbackOnly: _loopbackOnly, ...client } = metadata
  return { ...client, first_party: false, pkce_required: true }
}

export interface ProviderServiceDeps {
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
  db: Db
  clock: Clock
  sealer: KeySealer
  keys: KeyStore
  clients: ClientRegistry
  logger: Logger
  /** Keys the hashes of every identifier the library stores. */
  hmacKey: Buffer
  /** Signs the library's cookies. */
  cookieKey: Buffer
  settings: ProviderSettings
  /** The pages the library renders itself (src/pages/provider.ts). */
  pages: ConfigurationDeps['pages']
  /** Ends a Portcullis session as a logout (the provider's end-session ends the session it is). */
  endSession: (userId: string, sessionId: string, context: RequestContext) => Promise<void>
  metrics: Metrics
  /** Judges the JWT access tokens the API accepts; introspection asks it too. */
  resourceTokens: ResourceTokens
  /** The APIs operators registered as resources (src/provider/resources.ts). */
  resources: ResourceRegistry
  /** Client ID metadata documents (OP_CLIENT_METADATA), or null when off. */
  clientMetadata: ClientMetadataDocuments | null
  /** Production: document URLs must be https. */
  production: boolean
  /** What a user's access tokens claim they may do: the one seam every token issuer asks (src/authz/claims.ts). */
  claims: Pick<ClaimsSource, 'forToken'>
  /** The group commit a token request's transaction joins (src/db/group-commit.ts). */
  commits: Pick<GroupCommit, 'run'>
  /**
   * Outbound requests to loopback addresses (a back-channel receiver or jwks_uri on this machine),
   * which the library refuses as a guard against request forgery: allowed outside production only.
   */
  allowLoopbackFetch: boolean
}

/** How finely a grant's last use is kept: the token endpoint writes it at most once a minute a grant. */
const GRANT_USE_RESOLUTION_MS = 60_000

/** An app a user approved, as `GET /auth/me/apps` lists it. */
export interface ApprovedApp {
  client_id: string
  name: string
  scopes: string[]
  granted_at: string
  last_used_at: string | null
}

interface Loaded {
  library: Library
  provider: Provider
  callback: (req: IncomingMessage, res: ServerResponse) => void
}

/**
 * Portcullis as an OpenID provider (docs/provider.md): panva's certified oidc-provider, configured strictly
 * (src/provider/configuration.ts), on the project's database (src/provider/adapter.ts), with
 * Portcullis's accounts, sessions, keys and pages. The library costs about a quarter of a second
 * to import, so it is loaded on the first request that needs it, never at start-up; it is rebuilt
 * (about a millisecond) when the key store's keys change, since it reads its keys once.
 */
export class ProviderService {
  private loading: Promise<Loaded> | null = null
  private readonly states = new WeakMap<object, RequestState>()
  private library: Library | null = null
  /** Back-Channel Logout notices, through the shared durable queue (src/provider/logouts.ts). */
  readonly logouts: BackchannelLogouts
  /** Grant references under the identifiers' key, imported once; the adapter hashes grants through the same. */
  private readonly grantReferences: (grantId: string) => string
  /** The identifiers' key, imported once (a Buffer would be imported again at every HMAC). */
  private readonly hmacKey: KeyObject
  /** The issuer's host and scheme, which every request handed to the library is said to come through. */
  private readonly issuerHost: string
  private readonly issuerProtocol: string
  /** The library's records of fetched client ID metadata documents (set when the library loads). */
  private documents: PortcullisAdapter | null = null
  /** Documents refused in the last minute, by URL, and the fetches under way. */
  private readonly refusedDocuments = new Map<string, { description: string; until: number }>()
  private readonly fetchingDocuments = new Map<string, Promise<FetchedClientMetadata>>()

  constructor(private readonly deps: ProviderServiceDeps) {
    this.hmacKey = createSecretKey(deps.hmacKey)
    const issuer = new URL(deps.settings.issuer)
    this.issuerHost = issuer.host
    this.issuerProtocol = issuer.protocol.slice(0, -1)
    this.grantReferences = grantReferences(this.hmacKey)
    this.logouts = new BackchannelLogouts(deps.db, deps.clock, deps.logger, deps.metrics, (row) => this.deliverLogout(row))
    deps.keys.onChange(() => {
      // The next request builds a provider on the new key set; one under way finishes on the old.
      if (this.loading) this.loading = this.build(this.loading)
    })
  }

  /** The keyed hash a grant is stored under, and the reference its JWT access tokens carry. */
  grantReference(grantId: string): string {
    return this.grantReferences(grantId)
  }

  private async build(previous?: Promise<Loaded>): Promise<Loaded> {
    const library = previous ? (await previous).library : await import('oidc-provider')
    this.library = library
    await this.deps.keys.ensureFamily('RS256')
    const { db, clock, sealer, settings } = this.deps
    const storage = adapterFactory({
      db, clock, sealer,
      hmacKey: this.hmacKey,
      grantHash: this.grantReferences,
      current: () => this.current(),
      sessionLive: (sessionId) => this.sessionLive(sessionId),
      invalidGrant: (message) => new library.errors.InvalidGrant!(message),
    })
    // Fetched client ID metadata documents, shared by every instance through the library's records.
    const documents = storage('ClientMetadataDocument')
    this.documents = documents
    const policy = library.interactionPolicy.base()
    // acr_values=aal2 (docs/provider.md): a session without a second factor signs in again, with one.
    policy.get('login').checks.add(
      new library.interactionPolicy.Check('aal2_required', 'a second factor is required', (ctx: KoaContextWithOIDC) =>
        wantsSecondFactor(ctx) && ctx.oidc.session?.acr !== 'aal2' ? library.interactionPolicy.Check.REQUEST_PROMPT : library.interactionPolicy.Check.NO_NEED_TO_PROMPT,
      ),
    )
    const configuration = providerConfiguration({
      adapter: (model: string) => (model === 'Client' ? this.clientStorage(documents, library) : storage(model)),
      jwks: this.deps.keys.privateJwks(),
      cookieKeys: [this.deps.cookieKey.toString('base64url')],
      apiResource: settings.apiResource,
      accessTokenTtlSeconds: settings.accessTokenTtlSeconds,
      findClient: (clientId) => this.deps.clients.findForLibrary(clientId),
      findAccount: (accountId) => this.findAccount(accountId),
      grantReference: (grantId) => this.grantReference(grantId),
      tokenClaims: (accountId) => this.tokenClaims(accountId, library),
      pages: this.deps.pages,
      findResource: async (uri) => {
        const found = await this.deps.resources.find(uri)
        return found && { scopes: found.scopes.map((scope) => scope.name) }
      },
      invalidTarget: () => new library.errors.InvalidTarget!('this resource is unknown here'),
      fetch: (url, options) => this.fetch(url, options),
      policy,
    })
    configuration.acrValues = ['aal1', 'aal2']
    const provider = new library.Provider(settings.issuer, configuration)
    // Its endpoint URLs come from the issuer alone (the mount sets the forwarded headers from it).
    provider.proxy = true
    // Every ID token carries `sid`, not only those of clients registered for Back-Channel Logout.
    provider.Client.prototype.includeSid = () => true
    provider.use(async (ctx, next) => {
      await next()
      try {
        await this.afterRequest(ctx)
      } catch (error) {
        // Past the library's own error handling: answered as the library answers its failures
        // (Koa's default would print the stack and answer in plain text).
        this.deps.logger.error({ err: { message: (error as Error).message } }, 'openid provider error')
        ctx.status = 500
        ctx.body = { error: 'server_error', error_description: 'oops! something went wrong' }
      }
    })
    provider.on('server_error', (_ctx: unknown, error: Error) => this.deps.logger.error({ err: { message: error.message } }, 'openid provider error'))
    return { library, provider, callback: provider.callback() }
  }

  /** The scopes a resource offers: the built-in API's, a registered resource's, none for an unknown one. */
  async scopesOf(resource: string): Promise<string[]> {
    if (resource === this.deps.settings.apiResource) return [...RESOURCE_SCOPES]
    return (await this.deps.resources.find(resource))?.scopes.map((scope) => scope.name) ?? []
  }

  /** A registered resource as the consent page names it; null for the built-in API (its scopes have words of their own) or an unknown one. */
  describeResource(resource: string): Promise<RegisteredResource | null> {
    return resource === this.deps.settings.apiResource ? Promise.resolve(null) : this.deps.resources.find(resource)
  }

  /**
   * The library's Client model: the registry, read on every find (an operator's change applies at
   * once), or a client ID metadata document (src/provider/client-metadata.ts).
   */
  private clientStorage(documents: PortcullisAdapter, library: Library): Pick<PortcullisAdapter, 'find'> {
    return {
      find: async (id: string) => {
        const registered = await this.deps.clients.findForLibrary(id)
        if (registered) return registered as unknown as Record<string, unknown>
        const metadata = await this.metadataDocument(id, documents, library)
        return metadata ? libraryMetadata(metadata) : undefined
      },
    }
  }

  /**
   * A client ID metadata document's client, from the shared cache (the library's records, kept as
   * long as HTTP caching said, 5 minutes to 24 hours) or fetched now; undefined when the id is not a
   * document URL (or the feature is off). A document that breaks a rule is invalid_client with the
   * reason; the refusal is remembered for a minute, and fetches of one URL at once are one fetch, so
   * authorization requests cannot make this server fetch a URL over and over.
   */
  private async metadataDocument(id: string, documents: PortcullisAdapter, library: Library): Promise<ClientMetadata | undefined> {
    const fetcher = this.deps.clientMetadata
    if (!fetcher || !isMetadataDocumentUrl(id, { production: this.deps.production })) return undefined
    const cached = (await documents.find(id)) as { metadata?: ClientMetadata } | undefined
    if (cached?.metadata) return cached.metadata
    const now = this.deps.clock.now()
    const refused = this.refusedDocuments.get(id)
    if (refused && refused.until > now) throw new library.errors.InvalidClient!(refused.description)
    let fetching = this.fetchingDocuments.get(id)
    if (!fetching) {
      fetching = fetcher.fetch(id).finally(() => this.fetchingDocuments.delete(id))
      this.fetchingDocuments.set(id, fetching)
    }
    try {
      const { metadata, expiresAt } = await fetching
      await documents.upsert(id, { clientId: id, metadata } as never, Math.max(1, Math.ceil((expiresAt - this.deps.clock.now()) / 1000)))
      return metadata
    } catch (error) {
      if (!(error instanceof ClientMetadataError)) throw error
      if (this.refusedDocuments.size >= 10_000) this.refusedDocuments.clear()
      this.refusedDocuments.set(id, { description: error.description, until: now + 60_000 })
      this.deps.logger.info({ clientId: id.slice(0, 200), reason: error.detail.slice(0, 300) }, 'client metadata document refused')
      throw new library.errors.InvalidClient!(error.description)
    }
  }

  /**
   * What the pages show of a client: its name, whether it is first-party, and for a metadata
   * document's client, that it is one (always third-party), its redirect host and whether it
   * redirects only to this machine (the consent page warns then).
   */
  async clientForPages(clientId: string, redirectUri: unknown): Promise<{ name: string; firstParty: boolean; document: { host: string; loopbackOnly: boolean } | null }> {
    const registered = await this.deps.clients.findForLibrary(clientId)
    if (registered) return { name: registered.client_name, firstParty: registered.first_party === true, document: null }
    const { library } = await this.loaded()
    const metadata = await this.metadataDocument(clientId, this.documents!, library).catch(() => undefined)
    if (!metadata) return { name: clientId, firstParty: false, document: null }
    const host = typeof redirectUri === 'string' ? (URL.parse(redirectUri)?.host ?? '') : ''
    return { name: metadata.client_name, firstParty: false, document: { host, loopbackOnly: metadata.loopbackOnly } }
  }

  /** The provider, loaded on first use. */
  private loaded(): Promise<Loaded> {
    this.loading ??= this.build()
    this.loading.catch(() => {
      this.loading = null
    })
    return this.loading
  }

  /** Hands a request to the library (the routes mount it under /oauth/ and the discovery paths). */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { callback } = await this.loaded()
    req.headers['x-forwarded-host'] = this.issuerHost
    req.headers['x-forwarded-proto'] = this.issuerProtocol
    delete req.headers['x-forwarded-for']
    callback(req, res)
  }

  /**
   * The library's outbound requests. Its end-session endpoint tells the clients of the session it
   * ends at once, once, with a 2.5 s timeout; those notices go to the durable queue instead (the
   * queue's deliveries come back here outside any request and are sent).
   */
  private async fetch(url: string | URL, options: RequestInit & { dispatcher?: unknown }): Promise<Response> {
    const ctx = this.library?.Provider.ctx as KoaContextWithOIDC | undefined
    // A queued delivery may run in the async context of the request that queued it: it is sent.
    if (!delivering.getStore() && ctx?.oidc?.route === 'end_session_confirm' && options.body instanceof URLSearchParams && options.body.has('logout_token')) {
      const claims = decodeJwt(options.body.get('logout_token')!)
      if (typeof claims.aud === 'string' && typeof claims.sub === 'string' && typeof claims.sid === 'string') {
        await queueLogoutNotices(this.deps.db.kysely, [{ clientId: claims.aud, subject: claims.sub, sid: claims.sid }], this.deps.clock.now())
        this.logouts.kick()
      }
      return new Response(null, { status: 204 })
    }
    const host = new URL(url).hostname
    if (this.deps.allowLoopbackFetch && (host === 'localhost' || host === '127.0.0.1' || host === '[::1]')) delete options.dispatcher
    return fetch(url, options as RequestInit)
  }

  /** One queued notice: the library signs a fresh logout token (they live 120 s) and posts it. */
  private async deliverLogout(row: LogoutRow): Promise<void> {
    const provider = await this.provider()
    const client = await provider.Client.find(row.client_id)
    // A client removed, or no longer registered for notices, has nothing to be told.
    if (!client?.backchannelLogoutUri) return
    await delivering.run(true, () => client.backchannelLogout(row.subject, row.sid))
  }

  /** The library itself, for the interaction pages. */
  async provider(): Promise<Provider> {
    return (await this.loaded()).provider
  }

  /**
   * The grant reference of an access token the provider issued (an opaque one, for userinfo): how a
   * first-party client of Portcullis's own (the console) ties its session to the person's grant,
   * which ends with all their sessions (src/auth/sign-out.ts). Null for an unknown token.
   */
  async grantOfAccessToken(token: string): Promise<string | null> {
    const library = (await this.provider()) as unknown as { AccessToken: { find(token: string): Promise<{ grantId?: string } | undefined> } }
    const found = await library.AccessToken.find(token)
    return found?.grantId ? this.grantReference(found.grantId) : null
  }

  /** Whether the grant behind a reference is still the user's (not revoked, not expired). */
  async grantStands(grantRef: string, userId: string): Promise<boolean> {
    return (await records.grantOwner(this.deps.db.kysely, grantRef, this.deps.clock.now())) === userId
  }

  private current(): RequestState | undefined {
    const ctx = this.library?.Provider.ctx as KoaContextWithOIDC | undefined
    if (!ctx) return undefined
    let state = this.states.get(ctx)
    if (!state) {
      // A token request's writes wait for its one transaction (commitTokenRequest).
      state = ctx.oidc?.route === 'token' ? { deferred: [] } : {}
      this.states.set(ctx, state)
    }
    // The interaction that just finished signed the person in through a Portcullis session.
    state.openedSession = (ctx.oidc?.result?.portcullis?.sessionId as string | undefined) ?? null
    return state
  }

  /** After the library answered: the logged-out session, JWT introspection, the refresh retry's stored successor, the grant's last use. */
  private async afterRequest(ctx: KoaContextWithOIDC): Promise<void> {
    const state = this.states.get(ctx)
    if (ctx.oidc?.route === 'introspection' && ctx.oidc.client && (ctx.body as { error?: string } | undefined)?.error === 'unsupported_token_type') {
      await this.introspectJwt(ctx)
      return
    }
    if (ctx.oidc?.route === 'end_session_confirm' && ctx.oidc.session?.destroyed && state?.endedSession) {
      const session = await sessions.findAuthState(this.deps.db.kysely, state.endedSession)
      const agent = ctx.get('user-agent')
      if (session) await this.deps.endSession(session.user_id, state.endedSession, { ip: ctx.ip ?? null, userAgent: agent || null, requestId: ctx.get('x-request-id') || null })
    }
    if (ctx.oidc?.route === 'discovery' && ctx.status === 200 && typeof ctx.body === 'object' && ctx.body !== null) {
      // Dynamic registration is Portcullis's own route (src/provider/registration.ts): named only when on.
      if (this.deps.settings.registration) (ctx.body as Record<string, unknown>).registration_endpoint = `${this.deps.settings.issuer}${ROUTES.registration}`
      // Client ID metadata documents are answered from the Client model's lookup, not the library's feature.
      if (this.deps.clientMetadata) (ctx.body as Record<string, unknown>).client_id_metadata_document_supported = true
      return
    }
    if (ctx.oidc?.route !== 'token') return
    const answered = ctx.status === 200 && typeof ctx.body === 'object' && ctx.body !== null
    if (!answered) {
      // A refused request keeps nothing it would have written: what was presented stays unspent.
      if (state) state.deferred = undefined
      return
    }
    if (!(await this.commitTokenRequest(ctx, state))) return
    // The client's last use (a dynamic one unused for 30 days is removed).
    const client = ctx.oidc.client as { clientId: string } | undefined
    if (client) await this.deps.clients.used(client.clientId)
    if (!state?.retry) return
    const successor = state.retry.successor ?? (await successorOf(this.deps.db, this.deps.sealer, state.retry.idHash, this.deps.clock))
    if (successor === null) {
      ctx.status = 400
      ctx.body = { error: 'invalid_grant', error_description: 'refresh token already used' }
      return
    }
    ;(ctx.body as Record<string, unknown>).refresh_token = successor
  }

  /**
   * A successful token request's writes in one transaction, made after the library answered and
   * before the answer leaves (one commit instead of one a write: on SQLite each is a flush to
   * disk). The transaction is a job of the group commit, so under load the token requests answered
   * in one turn of the event loop share a commit, and none is answered before its writes are
   * durable; a group in which one request lost a race is rolled back and each of its requests runs
   * again alone, so the loser's writes never stand and the others' do. When another request consumed the same code or
   * refresh token between this one's read and the commit, the transaction rolls back, and the
   * loser is answered as in the adapter's own race (docs/provider.md): a code used twice revokes
   * its grant, a refresh token is the client's retry and gets the winner's successor. False when
   * the answer became an error here.
   */
  private async commitTokenRequest(ctx: KoaContextWithOIDC, state: RequestState | undefined): Promise<boolean> {
    const writes = state?.deferred ?? []
    if (state) state.deferred = undefined
    const grant = ctx.oidc.entities?.Grant as { jti?: string } | undefined
    if (grant?.jti) {
      // The grant's last use, to the minute: the row this request read says when it was last written.
      const grantRef = this.grantReference(grant.jti)
      const now = this.deps.clock.now()
      const lastUsed = state?.found?.get(grantRef)?.last_used_at
      if (lastUsed == null || now - lastUsed >= GRANT_USE_RESOLUTION_MS) writes.push({ kind: 'other', run: (trx) => records.touchGrant(trx, grantRef, now) })
    }
    const commit = (list: typeof writes) =>
      list.length ? this.deps.commits.run(async (trx) => {
        for (const write of list) await write.run(trx)
      }) : Promise.resolve()
    try {
      await commit(writes)
      return true
    } catch (error) {
      if (!(error instanceof LostRace)) throw error
      if (error.model === 'RefreshToken' && state) {
        // What it issued stands but for the rotation: it answers with the winner's successor.
        state.retry = { idHash: error.idHash, successor: null }
        await commit(writes.filter((write) => write.kind === 'other'))
        return true
      }
      if (error.grantHash) await revokeGrant(this.deps.db, error.grantHash)
      ctx.status = 400
      ctx.body = { error: 'invalid_grant', error_description: `${error.model === 'AuthorizationCode' ? 'authorization code' : 'code'} already used` }
      return false
    }
  }

  /**
   * RFC 7662 for a JWT access token, which the library refuses (it never stores one): answered
   * from its signature, expiry, grant and account, to the confidential client it was issued to
   * (the client has authenticated by the time the library refuses).
   */
  private async introspectJwt(ctx: KoaContextWithOIDC): Promise<void> {
    const client = ctx.oidc.client as { clientId: string; clientAuthMethod: string }
    const token = await this.deps.resourceTokens.introspect(String(ctx.oidc.params.token))
    ctx.status = 200
    ctx.body = token && client.clientAuthMethod !== 'none' && token.clientId === client.clientId
      ? { active: true, iss: this.deps.settings.issuer, token_type: 'Bearer', ...token, clientId: undefined, client_id: token.clientId }
      : { active: false }
  }

  private async sessionLive(sessionId: string): Promise<boolean> {
    const state = await sessions.findAuthState(this.deps.db.kysely, sessionId)
    return state !== null && state.revoked_at === null && state.expires_at > this.deps.clock.now() && state.status === 'active'
  }

  /** A session signed in through the provider's pages is listed with the app it was for. */
  async nameSession(sessionId: string, clientName: string): Promise<void> {
    await records.nameSession(this.deps.db.kysely, sessionId, clientName)
  }

  async emailOf(userId: string): Promise<string | null> {
    return (await users.findById(this.deps.db.kysely, userId))?.email ?? null
  }

  private async findAccount(accountId: string) {
    const user = isUuid(accountId) ? await users.read(this.deps.db, accountId) : null
    if (!user || user.status !== 'active') return undefined
    const db = this.deps.db.kysely
    return {
      accountId: user.id,
      claims: async (_use: string, scope: string) => ({
        sub: user.id,
        name: user.full_name,
        email: user.email,
        email_verified: user.email_verified_at !== null,
        // Read only when granted: the library masks claims by scope, but the read is not free.
        ...(scope.split(' ').includes('organizations') ? { organizations: await organizationsOf(db, user.id) } : {}),
      }),
    }
  }

  /**
   * A JWT access token's claims of what its user may do: global roles and permissions,
   * app_metadata, and the claims version `cv` that the resource side compares (src/provider/resource.ts).
   * No organisation: a provider token has no active one (docs/provider.md).
   */
  private async tokenClaims(accountId: string, library: Library): Promise<Record<string, unknown>> {
    try {
      const { authz } = await this.deps.claims.forToken(accountId, null)
      return { ...authz.claims, cv: authz.version }
    } catch (error) {
      // The account went between the grant's checks and now: no token, an OAuth error rather than a 500.
      if (error instanceof AppError && error.code === 'INVALID_TOKEN') throw new library.errors.InvalidGrant!('the account no longer exists')
      throw error
    }
  }

  /** The apps a user approved (README.md, Endpoints: `GET /auth/me/apps`). */
  async appsOf(userId: string): Promise<ApprovedApp[]> {
    const rows = await records.grantsOf(this.deps.db.kysely, userId, this.deps.clock.now())
    const apps: ApprovedApp[] = []
    for (const row of rows) {
      if (row.client_id === null) continue
      const payload = JSON.parse(this.deps.sealer.open(row.payload, `op:Grant:${row.id_hash}`)) as { openid?: { scope?: string }; resources?: Record<string, string> }
      const scopes = new Set([...(payload.openid?.scope?.split(' ') ?? []), ...Object.values(payload.resources ?? {}).flatMap((scope) => scope.split(' '))])
      const client = await this.deps.clients.findForLibrary(row.client_id)
      apps.push({
        client_id: row.client_id,
        name: (client?.client_name as string | undefined) ?? row.client_id,
        scopes: [...scopes].filter(Boolean),
        granted_at: new Date(row.created_at).toISOString(),
        last_used_at: row.last_used_at === null ? null : new Date(row.last_used_at).toISOString(),
      })
    }
    return apps
  }

  /** Ends a user's grants of one client and their refresh tokens at once; false when there were none. */
  async revokeApp(userId: string, clientId: string): Promise<boolean> {
    const rows = (await records.grantsOf(this.deps.db.kysely, userId, this.deps.clock.now())).filter((row) => row.client_id === clientId)
    if (rows.length === 0) return false
    await this.deps.db.kysely.transaction().execute(async (trx) => {
      for (const row of rows) await revokeGrantIn(trx, row.id_hash)
      const user = await users.findById(trx, userId)
      if (user) await this.deps.events.emit(trx, 'oauth.grant_revoked', user, { client_id: clientId })
    })
    return true
  }
}

/** Whether the authorization request asked for a second factor (`acr_values=aal2`). */
export function wantsSecondFactor(ctx: KoaContextWithOIDC): boolean {
  const asked = ctx.oidc?.params?.acr_values
  return typeof asked === 'string' && asked.split(' ').includes('aal2')
}


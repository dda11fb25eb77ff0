import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { SignJWT, decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, type CryptoKey, type JWK, type JWTPayload } from 'jose'

/**
 * A real OpenID provider (panva's `oidc-provider`, the certified implementation) on loopback, for
 * the relying-party tests. Everything the relying party sees is the provider's own behaviour:
 * discovery, the JWKS, the authorization endpoint with PKCE, state and nonce, the token endpoint
 * with client authentication, signed ID tokens. The helper adds only what a test needs around it:
 * a login that is driven over HTTP (`signIn`), accounts the test controls, and ID tokens that can be
 * made to misbehave on purpose (`tamper`).
 */

export interface TestAccount { sub: string; email?: string; email_verified?: boolean | 'true' | 'false'; name?: string }

export interface TestProvider {
  issuer: string                 // e.g. http://127.0.0.1:PORT (loopback, plain http)
  clientId: string; clientSecret: string
  /** Add or replace an account the provider knows. */
  addAccount(account: TestAccount): void
  /** Makes the next ID tokens misbehave, for negative tests: re-signed by the test with the provider's own key but with a changed claim, or signed with a key not in the JWKS. null = behave. */
  tamper(mode: null | { nonce?: string; aud?: string; iss?: string; foreignKey?: true; alg?: 'none' }): void
  /** Drives the provider's own login (and consent) for `sub` starting from the authorization URL the relying party produced, over HTTP with a cookie jar, and returns the final redirect URL the provider sends the browser to (the relying party's callback with code and state, or with error=access_denied when `deny` is true). It must NOT follow that last redirect (the caller sends it to the RP with its own cookie). */
  signIn(authorizationUrl: string, sub: string, options?: { deny?: boolean }): Promise<string>
  close(): Promise<void>
}

type TamperMode = Exclude<Parameters<TestProvider['tamper']>[0], null>

// oidc-provider ships no type declarations and @types/oidc-provider is not installed, so the few
// parts of its API (and of Koa's context, which it is built on) this helper touches are typed here.
interface KoaContext {
  method: string
  path: string
  status: number
  body: unknown
  type: string
  req: IncomingMessage
  res: ServerResponse
  redirect(url: string): void
}
type Middleware = (ctx: KoaContext, next: () => Promise<void>) => Promise<void>

interface Grant {
  jti: string
  accountId: string
  clientId: string
  addOIDCScope(scope: Set<string>): void
  addOIDCClaims(claims: Set<string>): void
  save(): Promise<string>
}

interface OidcContext {
  client: { clientId: string }
  session: { accountId?: string; grantIdFor(clientId: string): string | undefined }
  result?: { consent?: { grantId?: string } }
  requestParamOIDCScopes: Set<string>
  requestParamClaims: Set<string>
}

interface Interaction {
  uid: string
  prompt: { name: string; reasons: string[] }
}

interface Provider {
  callback(): (req: IncomingMessage, res: ServerResponse) => void
  use(middleware: Middleware): unknown
  on(event: string, listener: (...args: unknown[]) => void): unknown
  interactionDetails(req: IncomingMessage, res: ServerResponse): Promise<Interaction>
  interactionResult(req: IncomingMessage, res: ServerResponse, result: object, options?: { mergeWithLastSubmission?: boolean }): Promise<string>
  Client: { find(id: string): Promise<unknown> }
  Grant: {
    new (init: { accountId: string; clientId: string }): Grant
    find(id: string): Promise<Grant | undefined>
  }
}
type ProviderConstructor = new (issuer: string, configuration: object) => Provider

const verbose = /\boidc\b|oidc-provider/.test(process.env.DEBUG ?? '')

let loaded: Promise<ProviderConstructor> | undefined

function loadProvider(): Promise<ProviderConstructor> {
  loaded ??= (async () => {
    const specifier: string = 'oidc-provider' // a string, not a literal: the package has no types
    const module = (await import(specifier)) as { default: ProviderConstructor }
    return module.default
  })()
  return loaded
}

/** An in-memory store for the provider's models, one per provider, with the adapter interface it expects. */
function memoryAdapter() {
  const records = new Map<string, { payload: Record<string, unknown>; expiresAt: number }>()
  const uids = new Map<string, string>()
  const grants = new Map<string, Set<string>>()
  const live = (key: string) => {
    const record = records.get(key)
    if (record && record.expiresAt <= Date.now()) {
      records.delete(key)
      return undefined
    }
    return record
  }
  return class MemoryAdapter {
    constructor(private readonly model: string) {}
    private key(id: string): string {
      return `${this.model}:${id}`
    }
    async upsert(id: string, payload: Record<string, unknown>, expiresIn?: number): Promise<void> {
      const key = this.key(id)
      records.set(key, { payload: structuredClone(payload), expiresAt: typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : Infinity })
      if (this.model === 'Session' && typeof payload.uid === 'string') uids.set(payload.uid, id)
      if (typeof payload.grantId === 'string') {
        const members = grants.get(payload.grantId) ?? new Set<string>()
        members.add(key)
        grants.set(payload.grantId, members)
      }
    }
    async find(id: string): Promise<Record<string, unknown> | undefined> {
      const record = live(this.key(id))
      return record && structuredClone(record.payload)
    }
    async findByUid(uid: string): Promise<Record<string, unknown> | undefined> {
      const id = uids.get(uid)
      return id === undefined ? undefined : this.find(id)
    }
    async findByUserCode(): Promise<undefined> {
      return undefined // no device flow here
    }
    async consume(id: string): Promise<void> {
      const record = live(this.key(id))
      if (record) record.payload.consumed = Math.floor(Date.now() / 1000)
    }
    async destroy(id: string): Promise<void> {
      records.delete(this.key(id))
    }
    async revokeByGrantId(grantId: string): Promise<void> {
      for (const key of grants.get(grantId) ?? []) records.delete(key)
      grants.delete(grantId)
    }
  }
}

/** Cookies as a browser keeps them for one origin: by name and path, sent where the path matches, dropped once expired. */
class CookieJar {
  private cookies = new Map<string, { name: string; value: string; path: string; expires: number }>()

  store(response: Response): void {
    for (const line of response.headers.getSetCookie()) {
      const [pair = '', ...attributes] = line.split(';')
      const eq = pair.indexOf('=')
      if (eq <= 0) continue
      const cookie = { name: pair.slice(0, eq).trim(), value: pair.slice(eq + 1).trim(), path: '/', expires: Infinity }
      for (const attribute of attributes) {
        const [rawName = '', ...rest] = attribute.split('=')
        const name = rawName.trim().toLowerCase()
        const value = rest.join('=').trim()
        if (name === 'path' && value.startsWith('/')) cookie.path = value
        else if (name === 'expires') cookie.expires = Date.parse(value)
        else if (name === 'max-age') cookie.expires = Date.now() + Number(value) * 1000
      }
      const key = `${cookie.name};${cookie.path}`
      if (cookie.expires <= Date.now()) this.cookies.delete(key)
      else this.cookies.set(key, cookie)
    }
  }

  header(url: URL): string {
    const now = Date.now()
    const matches = (path: string) => url.pathname === path || url.pathname.startsWith(path.endsWith('/') ? path : `${path}/`)
    return [...this.cookies.values()]
      .filter((cookie) => cookie.expires > now && matches(cookie.path))
      .map((cookie) => `${cookie.name}=${cookie.value}`)
      .join('; ')
  }
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'))
}

const encodeSegment = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url')

export async function startTestProvider(options: { redirectUris: string[]; accounts?: TestAccount[] }): Promise<TestProvider> {
  const Provider = await loadProvider()

  const accounts = new Map<string, TestAccount>()
  for (const account of options.accounts ?? []) accounts.set(account.sub, { ...account })

  // The provider's signing key, generated here so tamper() can sign with it too.
  const signing = await generateKeyPair('RS256', { extractable: true })
  const kid = randomBytes(8).toString('base64url')
  const privateJwk: JWK = { ...(await exportJWK(signing.privateKey)), kid, alg: 'RS256', use: 'sig' }
  let foreign: Promise<CryptoKey> | undefined // a key of the same kind that is in no JWKS, made on first use

  let tampering: TamperMode | null = null

  const clientId = `portcullis-test-${randomBytes(4).toString('hex')}`
  const clientSecret = randomBytes(32).toString('base64url')

  // The port has to be known before the provider exists (the issuer names it), so listen first.
  let handle: ((req: IncomingMessage, res: ServerResponse) => void) | undefined
  const server = createServer((req, res) => {
    if (handle) return handle(req, res)
    res.writeHead(503).end()
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo
  const issuer = `http://127.0.0.1:${port}`

  const closeServer = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    })

  let provider: Provider
  try {
    provider = new Provider(issuer, {
      adapter: memoryAdapter(),
      jwks: { keys: [privateJwk] },
      cookies: { keys: [randomBytes(32).toString('base64url')] },
      clients: [
        {
          client_id: clientId,
          client_secret: clientSecret,
          application_type: 'web', // a web client may register http redirect URIs (only implicit needs https)
          redirect_uris: options.redirectUris,
          grant_types: ['authorization_code'],
          response_types: ['code'],
          // what openid-client v6 uses when given a bare client secret
          token_endpoint_auth_method: 'client_secret_post',
          id_token_signed_response_alg: 'RS256',
        },
      ],
      responseTypes: ['code'],
      pkce: { required: () => true }, // S256 is the only method oidc-provider 9 implements
      scopes: ['openid', 'email', 'profile'],
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
      // Put the scope's claims in the ID token as most providers do, not only behind userinfo.
      conformIdTokenClaims: false,
      features: {
        devInteractions: { enabled: false }, // replaced by the two routes below, without its console warnings
        userinfo: { enabled: true },
      },
      async findAccount(_ctx: unknown, sub: string) {
        if (!accounts.has(sub)) return undefined
        return {
          accountId: sub,
          async claims() {
            const account = accounts.get(sub) ?? { sub }
            const claims: Record<string, unknown> = { sub }
            if (account.email !== undefined) claims.email = account.email
            if (account.email_verified !== undefined) claims.email_verified = account.email_verified // strings too, as some providers send
            if (account.name !== undefined) claims.name = account.name
            return claims
          },
        }
      },
      // No consent screen: the test client is granted whatever OIDC scopes and claims it asks for.
      async loadExistingGrant(ctx: { oidc: OidcContext & { provider: Provider } }) {
        const { oidc } = ctx
        const accountId = oidc.session.accountId
        if (!accountId) return undefined
        const grantId = oidc.result?.consent?.grantId ?? oidc.session.grantIdFor(oidc.client.clientId)
        const grant = (grantId ? await oidc.provider.Grant.find(grantId) : undefined) ?? new oidc.provider.Grant({ accountId, clientId: oidc.client.clientId })
        grant.addOIDCScope(oidc.requestParamOIDCScopes)
        grant.addOIDCClaims(oidc.requestParamClaims)
        await grant.save()
        return grant
      },
      // Numbers instead of the default functions, which print a notice when first called.
      ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 600, Session: 3600, Grant: 3600 },
      clientBasedCORS: () => false,
      // Errors as JSON, so signIn() can say what went wrong (the default page prints a notice).
      async renderError(ctx: KoaContext, out: Record<string, string>) {
        ctx.type = 'json'
        ctx.body = out
      },
    })
    // Static clients are only checked when first used; check now, so a bad redirect URI fails here.
    await provider.Client.find(clientId)
  } catch (error) {
    await closeServer() // and leave no listening server behind
    const description = (error as { error_description?: string }).error_description
    throw description ? new Error(`test provider: ${(error as Error).message} (${description})`, { cause: error }) : error
  }

  // Koa would print unhandled errors; oidc-provider reports its own as events. DEBUG=oidc shows both.
  const report = (...args: unknown[]) => {
    if (verbose) console.error('test OIDC provider:', ...args.filter((arg) => arg instanceof Error))
  }
  provider.on('error', report)
  provider.on('server_error', report)

  // The interaction routes: a minimal login page (usable by a real browser too), the login itself, and "cancel".
  provider.use(async (ctx, next) => {
    const match = /^\/interaction\/([^/]+)(?:\/(login|abort))?$/.exec(ctx.path)
    if (!match) return next()
    const [, uid, action] = match
    try {
      const details = await provider.interactionDetails(ctx.req, ctx.res)
      if (details.uid !== uid) throw new Error('interaction mismatch')
      if (details.prompt.name !== 'login') throw new Error(`unexpected prompt ${details.prompt.name} (${details.prompt.reasons.join(', ')})`)
      if (!action && ctx.method === 'GET') {
        const safe = escapeHtml(details.uid)
        ctx.type = 'html'
        ctx.body = `<!doctype html><title>Test provider sign-in</title>
<form method="post" action="/interaction/${safe}/login"><label>sub <input name="sub" autofocus></label><button>Sign in</button></form>
<form method="post" action="/interaction/${safe}/abort"><button>Cancel</button></form>`
        return
      }
      if (!action || ctx.method !== 'POST') {
        ctx.status = 405
        return
      }
      let result: object
      if (action === 'abort') {
        result = { error: 'access_denied', error_description: 'End-User aborted interaction' }
      } else {
        const sub = (await readForm(ctx.req)).get('sub') ?? ''
        if (!accounts.has(sub)) {
          ctx.status = 400
          ctx.body = { error: 'unknown_account', error_description: `no test account with sub ${JSON.stringify(sub)}` }
          return
        }
        result = { login: { accountId: sub } }
      }
      const returnTo = await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false })
      ctx.redirect(returnTo)
      ctx.status = 303
    } catch (error) {
      ctx.status = 400
      ctx.body = { error: 'interaction_failed', error_description: (error as Error).message }
    }
  })

  // Tampering: the token endpoint's answer is rewritten after the provider made it.
  provider.use(async (ctx, next) => {
    await next()
    const mode = tampering
    if (!mode || ctx.method !== 'POST' || ctx.path !== '/token' || ctx.status !== 200) return
    const body = ctx.body as Record<string, unknown> | null
    if (!body || typeof body !== 'object' || typeof body.id_token !== 'string') return
    ctx.body = { ...body, id_token: await tamperIdToken(body.id_token, mode) }
  })

  async function tamperIdToken(idToken: string, mode: TamperMode): Promise<string> {
    const header = decodeProtectedHeader(idToken)
    const payload: JWTPayload = { ...decodeJwt(idToken) }
    if (mode.nonce !== undefined) payload.nonce = mode.nonce
    if (mode.aud !== undefined) payload.aud = mode.aud
    if (mode.iss !== undefined) payload.iss = mode.iss
    if (mode.alg === 'none') {
      const { kid: _kid, ...rest } = header
      return `${encodeSegment({ ...rest, alg: 'none' })}.${encodeSegment(payload)}.`
    }
    let key: CryptoKey = signing.privateKey
    if (mode.foreignKey) {
      foreign ??= generateKeyPair('RS256').then((pair) => pair.privateKey)
      key = await foreign
    }
    // Same header (alg, kid, typ) either way: with a foreign key, the kid points at the provider's real key.
    return new SignJWT(payload).setProtectedHeader({ ...header, alg: header.alg ?? 'RS256' }).sign(key)
  }

  handle = provider.callback()

  async function signIn(authorizationUrl: string, sub: string, signInOptions: { deny?: boolean } = {}): Promise<string> {
    const jar = new CookieJar()
    const request = async (url: URL, form?: URLSearchParams) => {
      const headers: Record<string, string> = {}
      const cookie = jar.header(url)
      if (cookie) headers.cookie = cookie
      const response = await fetch(url, form ? { method: 'POST', headers, body: form, redirect: 'manual' } : { headers, redirect: 'manual' })
      jar.store(response)
      return response
    }

    let url = new URL(authorizationUrl)
    if (url.origin !== new URL(issuer).origin) throw new Error(`signIn: ${authorizationUrl} is not at the test provider ${issuer}`)
    let response = await request(url)
    let submitted = false
    for (let hop = 0; hop < 10; hop++) {
      if (response.status >= 300 && response.status < 400) {
        await response.body?.cancel()
        const location = response.headers.get('location')
        if (!location) throw new Error(`signIn: ${response.status} without Location at ${url.pathname}`)
        const next = new URL(location, url)
        // Leaving the provider: this is the redirect to the relying party, handed back unfollowed.
        if (next.origin !== url.origin) return next.href
        url = next
        response = await request(url)
        continue
      }
      const text = await response.text()
      const interaction = /^\/interaction\/([^/]+)$/.exec(url.pathname)
      if (response.status === 200 && interaction && !submitted) {
        submitted = true
        const action = signInOptions.deny ? 'abort' : 'login'
        url = new URL(`/interaction/${interaction[1]}/${action}`, url)
        response = await request(url, new URLSearchParams(signInOptions.deny ? {} : { sub }))
        continue
      }
      let reason = text.slice(0, 500)
      try {
        const { error, error_description } = JSON.parse(text) as { error?: string; error_description?: string }
        if (error) reason = error_description ? `${error} (${error_description})` : error
      } catch {}
      throw new Error(`signIn: the provider answered ${response.status} at ${url.pathname}: ${reason}`)
    }
    throw new Error('signIn: too many redirects')
  }

  return {
    issuer,
    clientId,
    clientSecret,
    addAccount(account) {
      accounts.set(account.sub, { ...account })
    },
    tamper(mode) {
      tampering = mode && { ...mode }
    },
    signIn,
    async close() {
      handle = undefined
      await closeServer()
    },
  }
}

/**
 * The resource server's side (docs/client.md, "Protecting your own API or MCP server"): an API of
 * the application's own, or an MCP server, that accepts the access tokens Portcullis's OpenID
 * provider issues for it (RFC 9068 JWTs, EdDSA), publishes its RFC 9728 metadata, and answers
 * RFC 6750's challenges. WebCrypto and fetch only, so it runs in Node 22+ and in workers alike.
 */

/** The RFC 6750 section 3.1 error codes a refused token answers with. */
export type BearerErrorCode = 'invalid_token' | 'insufficient_scope'

/** Why a token was refused: stable words for logs and metrics (the description is for people). */
export type AccessTokenRefusal =
  | 'missing'
  | 'malformed'
  | 'type'
  | 'algorithm'
  | 'unknown_key'
  | 'signature'
  | 'issuer'
  | 'audience'
  | 'expired'
  | 'issued_in_future'
  | 'not_yet_valid'
  | 'claims'
  | 'scope'

/**
 * A token refused. `error` is the challenge to answer with (null: no token was sent, so the
 * challenge carries no error, RFC 6750 section 3.1); `status` is 401, or 403 for a missing scope;
 * `scope` lists the scopes the resource needs (insufficient_scope). The message is the
 * `error_description`: it never quotes the token.
 */
export class AccessTokenError extends Error {
  readonly error: BearerErrorCode | null
  readonly reason: AccessTokenRefusal
  readonly status: 401 | 403
  readonly scope: readonly string[]

  constructor(reason: AccessTokenRefusal, description: string, scope: readonly string[] = []) {
    super(description)
    this.name = 'AccessTokenError'
    this.reason = reason
    this.error = reason === 'missing' ? null : reason === 'scope' ? 'insufficient_scope' : 'invalid_token'
    this.status = reason === 'scope' ? 403 : 401
    this.scope = scope
  }
}

/**
 * The authorization server's keys could not be had (discovery or the JWKS unreachable, refused or
 * malformed), so nothing can be said about the token: answer 503, never 401, or a client would
 * throw away a good token.
 */
export class KeySetUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'KeySetUnavailableError'
  }
}

export interface VerifyAccessTokenOptions {
  /** The provider's issuer exactly as its discovery says (Portcullis: `OP_ISSUER`, by default PUBLIC_URL's origin). */
  issuer: string
  /** This resource's identifier: the token's `aud` must contain it (RFC 8707's `resource`). */
  audience: string
  /** Scopes the request needs, all of them; a token without one is insufficient_scope (403). */
  scopes?: readonly string[]
  /** Where the keys are; by default the `jwks_uri` of `{issuer}/.well-known/oauth-authorization-server`. */
  jwksUri?: string
  /** Leeway for `exp`, `iat` and `nbf` against this machine's clock (default 30). */
  clockToleranceSeconds?: number
  /** For discovery and the JWKS (default: the global fetch). */
  fetch?: typeof globalThis.fetch
  /** Milliseconds since the epoch (default Date.now): the token's times and the key cache's. */
  now?: () => number
}

/**
 * What a verified token says. RFC 9068's claims are checked and typed; `aud` and `scope` are lists
 * here whatever form the token used; every other claim (`acr`, `auth_time`, `roles`, ...) is
 * passed on as it is.
 */
export interface AccessTokenClaims {
  iss: string
  sub: string
  client_id: string
  aud: string[]
  scope: string[]
  exp: number
  iat: number
  jti: string
  [claim: string]: unknown
}

/** The only algorithm accepted: Portcullis signs access tokens with Ed25519. */
const ALGORITHM = 'EdDSA'
/** Longer than any token Portcullis issues (4 KB at most); a bound before any decoding. */
const MAX_TOKEN_LENGTH = 8192
const MAX_KID_LENGTH = 256
/** Discovery and JWKS documents are a few KB; a larger answer is refused before it is all read. */
const MAX_DOCUMENT_BYTES = 64 * 1024
const FETCH_TIMEOUT_MS = 5000
/** How long a key set is used before it is fetched again unasked. */
const KEY_SET_MAX_AGE_MS = 10 * 60 * 1000
/**
 * The least time between two fetches of one key set. A token naming an unknown kid may mean a
 * rotation (a new key signs now), so it fetches again, but no more often than this: tokens with
 * made-up kids cannot make this process hammer the authorization server.
 */
const MIN_REFETCH_INTERVAL_MS = 30 * 1000
/** RFC 6749's scope-token: printable ASCII without space, `"` and `\`. */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/
const BASE64URL = /^[A-Za-z0-9_-]*$/

const utf8 = new TextDecoder('utf-8', { fatal: true })

/**
 * The token of an `Authorization: Bearer ...` header, or null when there is no bearer token (no
 * header, another scheme). What follows the scheme is handed on as it is: a malformed token is
 * then refused as invalid_token rather than taken for a missing one.
 */
export function bearerToken(authorization: string | null | undefined): string | null {
  const match = /^bearer[ \t]+(.*)$/i.exec(authorization?.trim() ?? '')
  const token = match?.[1]?.trim()
  return token ? token : null
}

/**
 * Verifies an access token Portcullis's OpenID provider issued for this resource (RFC 9068) and
 * answers its claims, or throws an AccessTokenError naming the challenge to answer (or a
 * KeySetUnavailableError when the keys cannot be had). Offline: a grant revoked at Portcullis
 * leaves its tokens valid here until their `exp`.
 */
export async function verifyAccessToken(token: string | null | undefined, options: VerifyAccessTokenOptions): Promise<AccessTokenClaims> {
  const issuer = required(options.issuer, 'issuer')
  const audience = required(options.audience, 'audience')
  const needed = [...(options.scopes ?? [])]
  for (const scope of needed) if (!SCOPE_TOKEN.test(scope)) throw new TypeError(`scopes: ${JSON.stringify(scope)} is not a scope (RFC 6749: no spaces, quotes or backslashes)`)
  const tolerance = options.clockToleranceSeconds ?? 30
  if (!Number.isFinite(tolerance) || tolerance < 0) throw new TypeError('clockToleranceSeconds must be a number of seconds, 0 or more')
  const now = options.now ?? Date.now

  if (!token) throw new AccessTokenError('missing', 'No access token was sent')
  const { header, payload, signingInput, signature } = parse(token)

  // RFC 9068 section 4: the type keeps an ID token, a refresh token or any other JWT signed by the
  // same key from passing for an access token.
  const typ = typeof header.typ === 'string' ? header.typ.toLowerCase() : ''
  if (typ !== 'at+jwt' && typ !== 'application/at+jwt') throw new AccessTokenError('type', 'The token is not an access token (typ must be at+jwt)')
  // Pinned, never read from the token as a choice: "none", HS256 keyed with the public key and
  // every other algorithm are refused before any key is looked at.
  if (header.alg !== ALGORITHM) throw new AccessTokenError('algorithm', `The token is not signed with ${ALGORITHM}`)
  // No extension this code understands may be critical (RFC 7515 section 4.1.11), `b64` among them.
  if (header.crit !== undefined) throw new AccessTokenError('malformed', 'The token has critical header parameters this resource does not support')
  const kid = header.kid
  // The key comes only from the issuer's key set by kid: `jku`, `jwk` and `x5u` in a header are the
  // token's own say-so and are never followed.
  if (typeof kid !== 'string' || kid.length === 0 || kid.length > MAX_KID_LENGTH) throw new AccessTokenError('malformed', 'The token names no key (kid)')

  const key = await keyFor(kid, issuer, options.jwksUri, options.fetch ?? globalThis.fetch.bind(globalThis), now)
  if (!key) throw new AccessTokenError('unknown_key', 'The token is signed with a key the issuer does not publish')
  if (signature.length !== 64 || !(await crypto.subtle.verify('Ed25519', key, signature, signingInput))) {
    throw new AccessTokenError('signature', 'The token\'s signature does not verify')
  }

  // Only a genuine token gets this far: what it says may now be believed, and judged.
  const { iss, aud, sub, client_id: clientId, exp, iat, nbf, jti, scope } = payload
  if (iss !== issuer) throw new AccessTokenError('issuer', 'The token is from another issuer')
  const audiences = typeof aud === 'string' ? [aud] : Array.isArray(aud) && aud.every((item) => typeof item === 'string') ? (aud as string[]) : null
  if (!audiences) throw new AccessTokenError('claims', 'The token has no valid aud claim')
  if (!audiences.includes(audience)) throw new AccessTokenError('audience', 'The token is for another resource (aud)')
  if (typeof exp !== 'number' || !Number.isFinite(exp)) throw new AccessTokenError('claims', 'The token has no valid exp claim')
  if (typeof iat !== 'number' || !Number.isFinite(iat)) throw new AccessTokenError('claims', 'The token has no valid iat claim')
  if (nbf !== undefined && (typeof nbf !== 'number' || !Number.isFinite(nbf))) throw new AccessTokenError('claims', 'The token has an invalid nbf claim')
  const seconds = now() / 1000
  if (seconds >= exp + tolerance) throw new AccessTokenError('expired', 'The token has expired')
  // A token from the future is forged or comes from a broken clock; either way it is no good now.
  if (iat > seconds + tolerance) throw new AccessTokenError('issued_in_future', 'The token was issued in the future')
  if (nbf !== undefined && (nbf as number) > seconds + tolerance) throw new AccessTokenError('not_yet_valid', 'The token is not valid yet (nbf)')
  for (const [name, value] of [['sub', sub], ['client_id', clientId], ['jti', jti]] as const) {
    if (typeof value !== 'string' || value.length === 0) throw new AccessTokenError('claims', `The token has no ${name} claim`)
  }
  if (scope !== undefined && typeof scope !== 'string') throw new AccessTokenError('claims', 'The token has an invalid scope claim')
  const granted = typeof scope === 'string' ? scope.split(' ').filter((item) => item.length > 0) : []

  if (needed.some((item) => !granted.includes(item))) {
    throw new AccessTokenError('scope', `The token lacks a scope this request needs: ${needed.join(' ')}`, needed)
  }
  return { ...payload, iss: iss as string, sub: sub as string, client_id: clientId as string, aud: audiences, scope: granted, exp, iat, jti: jti as string }
}

function required(value: string, name: string): string {
  if (typeof value !== 'string' || value.length === 0) throw new TypeError(`${name} is required`)
  return value
}

interface ParsedToken {
  header: Record<string, unknown>
  payload: Record<string, unknown>
  signingInput: Uint8Array<ArrayBuffer>
  signature: Uint8Array<ArrayBuffer>
}

function parse(token: string): ParsedToken {
  const malformed = () => new AccessTokenError('malformed', 'The token is not a signed JWT')
  if (token.length > MAX_TOKEN_LENGTH) throw new AccessTokenError('malformed', 'The token is too long')
  const parts = token.split('.')
  if (parts.length !== 3) throw malformed()
  const [headerPart, payloadPart, signaturePart] = parts as [string, string, string]
  const header = jsonObject(headerPart)
  const payload = jsonObject(payloadPart)
  const signature = base64url(signaturePart)
  if (!header || !payload || !signature) throw malformed()
  return { header, payload, signature, signingInput: new TextEncoder().encode(`${headerPart}.${payloadPart}`) }
}

function base64url(text: string): Uint8Array<ArrayBuffer> | null {
  if (!BASE64URL.test(text) || text.length % 4 === 1) return null
  const binary = atob(text.replace(/-/g, '+').replace(/_/g, '/'))
  const bytes = new Uint8Array(binary.length)
  for (let index = 0; index < binary.length; index++) bytes[index] = binary.charCodeAt(index)
  return bytes
}

function jsonObject(part: string): Record<string, unknown> | null {
  const bytes = base64url(part)
  if (!bytes || bytes.length === 0) return null
  try {
    const value: unknown = JSON.parse(utf8.decode(bytes))
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null
  } catch {
    return null
  }
}

// The key sets -------------------------------------------------------------------------------

interface KeySet {
  /** Where the keys are (given, or discovered once from the issuer's metadata). */
  jwksUri: string | null
  keys: Map<string, CryptoKey> | null
  /** When the keys were last fetched successfully, and when a fetch was last tried. */
  fetchedAt: number
  triedAt: number
  /** A fetch under way: callers at the same moment share it. */
  pending: Promise<void> | null
}

/** One key set per issuer (and JWKS address, when given), for the life of the process. */
const keySets = new Map<string, KeySet>()

async function keyFor(kid: string, issuer: string, jwksUri: string | undefined, fetcher: typeof globalThis.fetch, now: () => number): Promise<CryptoKey | null> {
  const cacheKey = `${issuer}\n${jwksUri ?? ''}`
  let set = keySets.get(cacheKey)
  if (!set) {
    set = { jwksUri: jwksUri ?? null, keys: null, fetchedAt: 0, triedAt: Number.NEGATIVE_INFINITY, pending: null }
    keySets.set(cacheKey, set)
  }
  const stale = set.keys === null || now() - set.fetchedAt >= KEY_SET_MAX_AGE_MS
  const unknown = set.keys !== null && !set.keys.has(kid)
  let failure: unknown = null
  if ((stale || unknown) && (set.pending || now() - set.triedAt >= MIN_REFETCH_INTERVAL_MS)) {
    set.pending ??= refresh(set, issuer, fetcher, now).finally(() => {
      set.pending = null
    })
    try {
      await set.pending
    } catch (error) {
      failure = error
    }
  }
  const key = set.keys?.get(kid)
  if (key) return key
  // A key set that could not be had says nothing about the token: the caller answers 503. A stale
  // one that could not be renewed still serves the kids it holds (above).
  if (failure) throw failure
  if (!set.keys) throw new KeySetUnavailableError(`The keys of ${issuer} could not be fetched a moment ago; trying again within ${MIN_REFETCH_INTERVAL_MS / 1000} s`)
  return null
}

async function refresh(set: KeySet, issuer: string, fetcher: typeof globalThis.fetch, now: () => number): Promise<void> {
  set.triedAt = now()
  const discovered = set.jwksUri === null
  try {
    set.jwksUri ??= await discoverJwksUri(issuer, fetcher)
    set.keys = await fetchKeys(set.jwksUri, fetcher)
    set.fetchedAt = now()
  } catch (error) {
    // The next try discovers again: the issuer may have moved its keys.
    if (discovered) set.jwksUri = null
    throw error
  }
}

/** RFC 8414 section 3.1: the well-known path goes between the issuer's host and its path. */
async function discoverJwksUri(issuer: string, fetcher: typeof globalThis.fetch): Promise<string> {
  let url: URL
  try {
    url = new URL(issuer)
  } catch {
    throw new TypeError(`issuer: ${JSON.stringify(issuer)} is not a URL`)
  }
  const path = url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '')
  const address = `${url.origin}/.well-known/oauth-authorization-server${path}`
  const metadata = await fetchJson(address, fetcher)
  // RFC 8414 section 3.3: a document that names another issuer is not this issuer's.
  if (metadata.issuer !== issuer) throw new KeySetUnavailableError(`${address} names the issuer ${JSON.stringify(metadata.issuer)}, not ${issuer}`)
  if (typeof metadata.jwks_uri !== 'string' || !/^https?:\/\//i.test(metadata.jwks_uri)) throw new KeySetUnavailableError(`${address} has no jwks_uri`)
  return metadata.jwks_uri
}

/** The Ed25519 signing keys of a JWKS by kid; other keys (the provider's RSA ID-token keys) are left out. */
async function fetchKeys(jwksUri: string, fetcher: typeof globalThis.fetch): Promise<Map<string, CryptoKey>> {
  const document = await fetchJson(jwksUri, fetcher)
  if (!Array.isArray(document.keys)) throw new KeySetUnavailableError(`${jwksUri} is not a JWK set (no keys)`)
  const keys = new Map<string, CryptoKey>()
  for (const jwk of document.keys as unknown[]) {
    if (typeof jwk !== 'object' || jwk === null) continue
    const { kty, crv, x, kid, use, alg, key_ops: ops } = jwk as Record<string, unknown>
    if (kty !== 'OKP' || crv !== 'Ed25519' || typeof x !== 'string' || typeof kid !== 'string' || keys.has(kid)) continue
    if ((use !== undefined && use !== 'sig') || (alg !== undefined && alg !== ALGORITHM && alg !== 'Ed25519')) continue
    if (ops !== undefined && !(Array.isArray(ops) && ops.includes('verify'))) continue
    try {
      keys.set(kid, await crypto.subtle.importKey('jwk', { kty, crv, x }, { name: 'Ed25519' }, false, ['verify']))
    } catch {
      // A key this runtime cannot import verifies nothing; the others still do.
    }
  }
  return keys
}

async function fetchJson(url: string, fetcher: typeof globalThis.fetch): Promise<Record<string, unknown>> {
  let response: Response
  try {
    response = await fetcher(url, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) })
  } catch (error) {
    throw new KeySetUnavailableError(`${url} could not be fetched`, { cause: error })
  }
  if (response.status !== 200) {
    await response.body?.cancel()
    throw new KeySetUnavailableError(`${url} answered ${response.status}`)
  }
  const declared = Number(response.headers.get('content-length'))
  if (declared > MAX_DOCUMENT_BYTES) {
    await response.body?.cancel()
    throw new KeySetUnavailableError(`${url} is larger than ${MAX_DOCUMENT_BYTES} bytes`)
  }
  const text = await readBounded(response, url)
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    throw new KeySetUnavailableError(`${url} is not JSON`, { cause: error })
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new KeySetUnavailableError(`${url} is not a JSON object`)
  return value as Record<string, unknown>
}

/** The body as text, read only up to the bound (a Content-Length may be absent or untrue). */
async function readBounded(response: Response, url: string): Promise<string> {
  if (!response.body) return ''
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      total += value.byteLength
      if (total > MAX_DOCUMENT_BYTES) {
        await reader.cancel()
        throw new KeySetUnavailableError(`${url} is larger than ${MAX_DOCUMENT_BYTES} bytes`)
      }
      chunks.push(value)
    }
  } catch (error) {
    if (error instanceof KeySetUnavailableError) throw error
    throw new KeySetUnavailableError(`${url} could not be read`, { cause: error })
  }
  const bytes = new Uint8Array(total)
  let at = 0
  for (const chunk of chunks) {
    bytes.set(chunk, at)
    at += chunk.byteLength
  }
  try {
    return utf8.decode(bytes)
  } catch (error) {
    throw new KeySetUnavailableError(`${url} is not UTF-8`, { cause: error })
  }
}

// RFC 9728 and RFC 6750 --------------------------------------------------------------------------

export interface ProtectedResourceMetadataInput {
  /** The resource's identifier: the URL clients call, and the `aud` of its tokens. */
  resource: string
  /** The issuers whose tokens it accepts (Portcullis's provider issuer). */
  authorizationServers: readonly string[]
  scopesSupported: readonly string[]
  resourceName?: string
}

/** RFC 9728 section 2's document, as a resource serves it at resourceMetadataUrl(resource). */
export interface ProtectedResourceMetadata {
  resource: string
  authorization_servers: string[]
  scopes_supported: string[]
  bearer_methods_supported: ['header']
  resource_name?: string
}

/**
 * The protected resource metadata of a resource. `bearer_methods_supported` is `header` only:
 * bearerToken() reads the Authorization header and nothing else (a token in a query string ends
 * up in logs and Referer headers).
 */
export function protectedResourceMetadata(input: ProtectedResourceMetadataInput): ProtectedResourceMetadata {
  resourceUrl(input.resource)
  if (input.authorizationServers.length === 0) throw new TypeError('authorizationServers: name at least one issuer')
  for (const scope of input.scopesSupported) if (!SCOPE_TOKEN.test(scope)) throw new TypeError(`scopesSupported: ${JSON.stringify(scope)} is not a scope`)
  return {
    resource: input.resource,
    authorization_servers: [...input.authorizationServers],
    scopes_supported: [...input.scopesSupported],
    bearer_methods_supported: ['header'],
    ...(input.resourceName === undefined ? {} : { resource_name: input.resourceName }),
  }
}

/**
 * Where the metadata of `resource` lives (RFC 9728 section 3.1): the well-known path inserted
 * between the host and the resource's path, with a terminating slash of that path removed.
 * `https://mcp.example.com/mcp` → `https://mcp.example.com/.well-known/oauth-protected-resource/mcp`.
 */
export function resourceMetadataUrl(resource: string): string {
  const url = resourceUrl(resource)
  const path = url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '')
  return `${url.origin}/.well-known/oauth-protected-resource${path}${url.search}`
}

/** RFC 9728 section 1.2: an http(s) URL without a fragment. */
function resourceUrl(resource: string): URL {
  let url: URL | null = null
  try {
    url = new URL(resource)
  } catch {
    // Refused below, with the value named.
  }
  if (!url || !/^https?:$/.test(url.protocol) || url.hash !== '' || resource.includes('#')) {
    throw new TypeError(`resource: ${JSON.stringify(resource)} is not an http(s) URL without a fragment`)
  }
  return url
}

export interface ChallengeOptions {
  /** resourceMetadataUrl(resource): tells a client (an MCP client, say) where to find the authorization server. */
  resourceMetadata?: string
  /** Scopes to name: for a 401 without a token, those a first request should ask for; for insufficient_scope, instead of the error's. */
  scope?: readonly string[]
}

/** RFC 7230's quoted-string, limited to what RFC 6750 allows in its parameters. */
function quoted(value: string): string {
  return `"${value.replace(/[^\x20\x21\x23-\x5B\x5D-\x7E]/g, ' ')}"`
}

/**
 * The `WWW-Authenticate` value for a refusal (RFC 6750 section 3): with no error (no token sent)
 * `Bearer resource_metadata="..."`; for invalid_token the error and its description; for
 * insufficient_scope the error and the scopes needed.
 */
export function challenge(error: AccessTokenError | null | undefined, options: ChallengeOptions = {}): string {
  const params: string[] = []
  const code = error?.error ?? null
  if (code) params.push(`error=${quoted(code)}`)
  if (code === 'invalid_token') params.push(`error_description=${quoted(error!.message)}`)
  const scope = options.scope ?? (code === 'insufficient_scope' ? error!.scope : [])
  if (scope.length > 0) params.push(`scope=${quoted(scope.join(' '))}`)
  if (options.resourceMetadata !== undefined) params.push(`resource_metadata=${quoted(options.resourceMetadata)}`)
  return params.length === 0 ? 'Bearer' : `Bearer ${params.join(', ')}`
}

export interface ChallengeResponse {
  status: 401 | 403 | 503
  headers: Record<string, string>
  /** JSON: `{"error": ..., "error_description": ...}`. */
  body: string
}

/**
 * The whole answer to what verifyAccessToken() threw, for a handler to send as it is:
 * `res.writeHead(status, headers).end(body)`. An AccessTokenError is a 401 or 403 with its
 * challenge, a KeySetUnavailableError a 503 (the token may well be good); anything else is a bug
 * of the caller's and is thrown again.
 */
export function challengeResponse(error: unknown, options: ChallengeOptions = {}): ChallengeResponse {
  const headers = { 'content-type': 'application/json', 'cache-control': 'no-store' }
  if (error instanceof KeySetUnavailableError) {
    return {
      status: 503,
      headers: { ...headers, 'retry-after': String(MIN_REFETCH_INTERVAL_MS / 1000) },
      body: JSON.stringify({ error: 'temporarily_unavailable', error_description: 'The access token cannot be checked right now' }),
    }
  }
  if (!(error instanceof AccessTokenError)) throw error
  return {
    status: error.status,
    headers: { ...headers, 'www-authenticate': challenge(error, options) },
    body: JSON.stringify({ error: error.error ?? 'unauthorized', error_description: error.message }),
  }
}

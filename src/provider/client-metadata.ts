import type { IncomingHttpHeaders } from 'node:http'
import { isIP } from 'node:net'
import { cleanLabel } from '../text.ts'
import { bareHost, refusedHost } from '../webhooks/addresses.ts'
import { Sender, systemResolve, TooLarge, Unreachable, type Resolve } from '../webhooks/sender.ts'

/**
 * Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document, as the MCP
 * authorization specification of 2025-11-25 uses it): a client whose `client_id` is an https URL
 * publishes its registration there, and the provider fetches and judges it instead of keeping one.
 * This module fetches and validates; storing a document (with `expiresAt`, so instances share it)
 * and handing the metadata to oidc-provider is the provider's client lookup's business.
 *
 * Anyone can make the server fetch such a URL (it arrives in an authorization request), so the
 * fetch is the webhooks' vetted connection (src/webhooks/sender.ts): in production no loopback,
 * private or link-local address, by name or by number, checked where the socket is opened.
 */

/** The hosts a loopback redirect URI (RFC 8252 section 7.3), or a development document URL, may name. */
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])
const GRANT_TYPES = new Set(['authorization_code', 'refresh_token'])
const SHARED_SECRET_METHODS = new Set(['client_secret_basic', 'client_secret_post', 'client_secret_jwt'])
const DISPLAY_URIS = ['logo_uri', 'client_uri', 'policy_uri', 'tos_uri'] as const
/** The same bound as an operator's client's name (src/provider/clients.ts). */
const NAME_MAX = 100

export const METADATA_TIMEOUT_MS = 5000
export const METADATA_MAX_BYTES = 5120
export const MIN_LIFETIME_MS = 5 * 60_000
export const MAX_LIFETIME_MS = 24 * 60 * 60_000

/**
 * A document's client as oidc-provider reads one (its `Client` model's metadata), plus
 * `loopbackOnly`, which is ours (the library strips metadata it does not recognise).
 */
export interface ClientMetadata {
  client_id: string
  client_name: string
  redirect_uris: string[]
  grant_types: ('authorization_code' | 'refresh_token')[]
  response_types: ['code']
  token_endpoint_auth_method: 'none'
  /** 'native' when every redirect URI is http on a loopback host (the library's rules for native clients then hold), else 'web'. */
  application_type: 'web' | 'native'
  logo_uri?: string
  client_uri?: string
  policy_uri?: string
  tos_uri?: string
  /**
   * Every redirect URI is on a loopback host, whatever its scheme: the code goes to whatever listens
   * on that port of the person's own machine, so the consent page warns.
   */
  loopbackOnly: boolean
}

export interface FetchedClientMetadata {
  metadata: ClientMetadata
  /** When the document must be fetched again (ms since the epoch): HTTP caching's say, within 5 minutes and 24 hours. */
  expiresAt: number
}

/**
 * Every refusal: OAuth's `invalid_client`, with the reason for `error_description`. In production a
 * failure to connect is described generically (as the webhooks' log does), so that the endpoint is
 * no probe of which internal names resolve or answer; `detail` keeps the cause for the server's log.
 */
export class ClientMetadataError extends Error {
  override readonly name = 'ClientMetadataError'
  readonly error = 'invalid_client'
  /** RFC 6749's `error_description`: printable ASCII without `"` and `\`. */
  readonly description: string

  constructor(reason: string, readonly detail: string = reason) {
    const description = `client metadata document: ${reason}`.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, '?')
    super(description)
    this.description = description
  }
}

export interface ClientMetadataDocumentsOptions {
  /** Production: https document URLs only, and special-use addresses are refused by name and by number. */
  production: boolean
  /** The hosts a document may come from (`OP_CLIENT_METADATA_HOSTS`), or null for any. */
  allowedHosts: readonly string[] | null
  /** Names to addresses; the system's resolver unless a test passes its own. */
  resolve?: Resolve
  /** Certificate authorities to trust besides the system's (a test's own https server). */
  ca?: string | Buffer
  timeoutMs?: number
  maxBytes?: number
  /** Milliseconds since the epoch. */
  clock?: () => number
}

/** A host whose name or address is loopback: `localhost`, `127.0.0.1` or `[::1]`, as a URL's `hostname` spells them. */
function isLoopbackHost(hostname: string): boolean {
  return LOOPBACK_HOSTS.has(hostname.toLowerCase())
}

/**
 * Whether a `client_id` names a client metadata document (the draft's section 3): an https URL with
 * a path other than `/`, without a fragment, credentials or `.`/`..` segments; a query is allowed.
 * In development an http URL on a loopback host qualifies too, so tests can serve documents.
 *
 * The checks read the string as written: the URL parser would silently drop an empty fragment or
 * `@`, and resolve dot segments (`%2e` included), so two spellings could name one document.
 */
export function isMetadataDocumentUrl(clientId: string, options: { production: boolean }): boolean {
  // A space, a control character or a backslash is repaired by the parser, never kept: not a URL as written.
  if (/[\x00-\x20\x7f\\]/.test(clientId)) return false
  const match = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)([^?#]*)/.exec(clientId)
  if (!match || clientId.includes('#')) return false
  const [, , authority, path] = match as unknown as [string, string, string, string]
  if (authority === '' || authority.includes('@')) return false
  if (path === '' || path === '/') return false
  if (path.split('/').some((segment) => ['.', '..'].includes(segment.replace(/%2e/gi, '.')))) return false
  const url = URL.parse(clientId)
  if (!url) return false
  if (url.protocol === 'https:') return true
  return !options.production && url.protocol === 'http:' && isLoopbackHost(url.hostname)
}

/**
 * Fetches and validates client metadata documents. Unknown fields are ignored; a known field that
 * is wrong refuses the whole document, with the reason.
 */
export class ClientMetadataDocuments {
  private readonly sender: Sender
  private readonly allowedHosts: Set<string> | null
  private readonly maxBytes: number
  private readonly clock: () => number

  constructor(private readonly options: ClientMetadataDocumentsOptions) {
    this.sender = new Sender({ production: options.production, resolve: options.resolve ?? systemResolve, timeoutMs: options.timeoutMs ?? METADATA_TIMEOUT_MS, ...(options.ca ? { ca: options.ca } : {}) })
    this.allowedHosts = options.allowedHosts === null ? null : new Set(options.allowedHosts.map(normalHost))
    this.maxBytes = options.maxBytes ?? METADATA_MAX_BYTES
    this.clock = options.clock ?? Date.now
  }

  /** The client the document at `clientId` describes, or a `ClientMetadataError` saying why not. */
  async fetch(clientId: string): Promise<FetchedClientMetadata> {
    if (!isMetadataDocumentUrl(clientId, { production: this.options.production })) {
      throw new ClientMetadataError(`client_id is not a document URL (${this.options.production ? 'https' : 'https, or http on a loopback host'}, with a path, without a fragment, credentials or dot segments)`)
    }
    const url = new URL(clientId)
    if (this.allowedHosts !== null && !this.allowedHosts.has(normalHost(url.hostname)) && !this.allowedHosts.has(normalHost(url.host))) {
      throw new ClientMetadataError(`the host ${url.host} is not among the hosts allowed to serve client metadata documents`)
    }
    // Said plainly: the URL itself names the address, so saying so tells the asker nothing new.
    if (this.options.production && refusedHost(url)) {
      const host = bareHost(url)
      throw new ClientMetadataError(`the URL names ${host}, ${isIP(host) !== 0 ? 'a special-use address' : 'a loopback name'}, which is not allowed`)
    }
    const response = await this.get(clientId)
    const fetchedAt = this.clock()
    const document = this.parse(response.status, response.headers, response.body)
    return { metadata: validate(clientId, url, document), expiresAt: fetchedAt + lifetimeMs(response.headers, fetchedAt) }
  }

  /** Closes the kept-alive sockets. */
  close(): void {
    this.sender.close()
  }

  private async get(clientId: string) {
    try {
      return await this.sender.get(clientId, { maxBytes: this.maxBytes, accept: 'application/json' })
    } catch (error) {
      if (error instanceof TooLarge) throw new ClientMetadataError(`the document is larger than ${this.maxBytes} bytes`)
      if (error instanceof Unreachable) throw new ClientMetadataError(`could not be fetched: ${error.message}`, `could not be fetched: ${error.detail}`)
      throw error
    }
  }

  private parse(status: number, headers: IncomingHttpHeaders, body: Buffer): Record<string, unknown> {
    // A redirect would send the server to a second URL the client chose, past the checks made on the first.
    if (status >= 300 && status < 400) throw new ClientMetadataError(`the URL answered with a redirect (${status}), which is not followed`)
    if (status !== 200) throw new ClientMetadataError(`the URL answered ${status}, not 200`)
    const type = (headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase()
    if (type !== 'application/json' && !/^application\/[a-z0-9!#$&^_.+-]+\+json$/.test(type)) {
      throw new ClientMetadataError(`the document is not JSON (content-type ${type === '' ? 'missing' : 'not application/json'})`)
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body))
    } catch {
      throw new ClientMetadataError('the document is not valid JSON')
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ClientMetadataError('the document is not a JSON object')
    return parsed as Record<string, unknown>
  }
}

/** A host as `OP_CLIENT_METADATA_HOSTS` lists it or a URL carries it: lower case, without a root label's dot. */
function normalHost(host: string): string {
  return host.trim().toLowerCase().replace(/\.$/, '')
}

/** Present, even as null: JSON has no undefined, and a field set to null still says something. */
function has(document: Record<string, unknown>, field: string): boolean {
  return Object.hasOwn(document, field)
}

/** The document's client, or the first rule it breaks. */
function validate(clientId: string, url: URL, document: Record<string, unknown>): ClientMetadata {
  // The draft: compared as strings, so a document cannot speak for a URL other than its own.
  if (document.client_id !== clientId) throw new ClientMetadataError('its client_id must equal the URL it was fetched from, exactly')
  // No secret can be agreed through a public document: anything shared-secret is refused (the
  // draft), and so is every other method (private_key_jwt, mTLS) since the contract allows only
  // `none`. An absent method reads as `none`: RFC 7591's default (client_secret_basic) is one the
  // draft forbids, so a public client is the only thing an omission can mean here.
  for (const field of ['client_secret', 'client_secret_expires_at']) {
    if (has(document, field)) throw new ClientMetadataError(`it must not contain ${field}`)
  }
  const method = document.token_endpoint_auth_method
  if (method !== undefined && method !== 'none') {
    throw new ClientMetadataError(typeof method === 'string' && SHARED_SECRET_METHODS.has(method)
      ? 'token_endpoint_auth_method must be none: a shared secret cannot be used with a client metadata document'
      : 'token_endpoint_auth_method must be none')
  }
  if (has(document, 'jwks') || has(document, 'jwks_uri')) throw new ClientMetadataError('jwks and jwks_uri are not allowed: the client must use token_endpoint_auth_method none')

  const redirectUris = redirectUrisOf(document.redirect_uris)
  const grantTypes = stringList(document, 'grant_types', ['authorization_code'])
  if (grantTypes.some((grant) => !GRANT_TYPES.has(grant))) throw new ClientMetadataError('grant_types may hold only authorization_code and refresh_token')
  if (!grantTypes.includes('authorization_code')) throw new ClientMetadataError('grant_types must include authorization_code')
  const responseTypes = stringList(document, 'response_types', ['code'])
  if (responseTypes.some((type) => type !== 'code')) throw new ClientMetadataError('response_types may hold only code')

  const parsedUris = redirectUris.map((uri) => new URL(uri))
  const metadata: ClientMetadata = {
    client_id: clientId,
    client_name: clientName(document, url),
    redirect_uris: redirectUris,
    grant_types: [...new Set(grantTypes)] as ClientMetadata['grant_types'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    application_type: parsedUris.every((uri) => uri.protocol === 'http:') ? 'native' : 'web',
    loopbackOnly: parsedUris.every((uri) => isLoopbackHost(uri.hostname)),
  }
  // Shown on the consent page: only what a browser fetches over TLS; anything else is left out, not fatal.
  for (const field of DISPLAY_URIS) {
    const value = document[field]
    if (typeof value === 'string' && URL.parse(value)?.protocol === 'https:') metadata[field] = value
  }
  return metadata
}

function clientName(document: Record<string, unknown>, url: URL): string {
  if (!has(document, 'client_name')) return url.hostname
  if (typeof document.client_name !== 'string') throw new ClientMetadataError('client_name must be a string')
  const { value, problem } = cleanLabel(document.client_name, NAME_MAX)
  if (problem) throw new ClientMetadataError(`client_name ${problem}`)
  return value
}

function stringList(document: Record<string, unknown>, field: string, absent: string[]): string[] {
  if (!has(document, field)) return absent
  const value = document[field]
  if (!Array.isArray(value) || value.length === 0 || !value.every((entry) => typeof entry === 'string')) {
    throw new ClientMetadataError(`${field} must be a non-empty array of strings`)
  }
  return value as string[]
}

/**
 * Exact redirect URIs: compared as strings at the authorization endpoint, so a pattern or an
 * ambiguous spelling is refused here rather than never matching there. https, or http on a loopback
 * host (a native app's RFC 8252 listener); a private-use scheme is refused, since the contract
 * allows only these two.
 */
function redirectUrisOf(value: unknown): string[] {
  if (value === undefined) throw new ClientMetadataError('redirect_uris is missing')
  if (!Array.isArray(value)) throw new ClientMetadataError('redirect_uris must be an array')
  if (value.length === 0) throw new ClientMetadataError('redirect_uris must not be empty')
  return value.map((uri: unknown, i) => {
    const label = `redirect_uris[${i}]`
    if (typeof uri !== 'string') throw new ClientMetadataError(`${label} must be a string`)
    const parsed = URL.parse(uri)
    if (!parsed || /[\x00-\x20\x7f\\]/.test(uri)) throw new ClientMetadataError(`${label} is not a URL`)
    if (!(parsed.protocol === 'https:' || (parsed.protocol === 'http:' && isLoopbackHost(parsed.hostname)))) {
      throw new ClientMetadataError(`${label} must be https, or http on a loopback host (127.0.0.1, [::1], localhost)`)
    }
    if (uri.includes('#')) throw new ClientMetadataError(`${label} must not have a fragment`)
    if (/^[a-z]+:\/\/[^/?]*@/i.test(uri)) throw new ClientMetadataError(`${label} must not contain credentials`)
    if (parsed.hostname.includes('*')) throw new ClientMetadataError(`${label} must be exact, not a pattern`)
    return uri
  })
}

/**
 * How long a fetched document is kept: RFC 9111's freshness (`s-maxage`, then `max-age`, then
 * `Expires` against `Date`, less `Age`), within [5 minutes, 24 hours]. `no-store` and `no-cache`
 * mean the least, and so does a document that says nothing: the next flow after five minutes sees
 * a change, and a burst of flows fetches once.
 */
export function lifetimeMs(headers: IncomingHttpHeaders, now: number): number {
  const clamp = (ms: number) => Math.min(MAX_LIFETIME_MS, Math.max(MIN_LIFETIME_MS, ms))
  const directives = new Map<string, string>()
  for (const part of (headers['cache-control'] ?? '').split(',')) {
    const [name, ...rest] = part.split('=')
    const key = name!.trim().toLowerCase()
    if (key !== '' && !directives.has(key)) directives.set(key, rest.join('=').trim().replace(/^"(.*)"$/, '$1'))
  }
  if (directives.has('no-store') || directives.has('no-cache')) return MIN_LIFETIME_MS
  const seconds = (value: string | undefined) => (value !== undefined && /^\d+$/.test(value) ? Number(value) : null)
  const age = seconds(headers.age) ?? 0
  const maxAge = seconds(directives.get('s-maxage')) ?? seconds(directives.get('max-age'))
  if (maxAge !== null) return clamp((maxAge - age) * 1000)
  if (headers.expires !== undefined) {
    // An Expires that is not a date means already expired (RFC 9111 section 5.3).
    const expires = Date.parse(headers.expires)
    if (Number.isNaN(expires)) return MIN_LIFETIME_MS
    const date = headers.date === undefined ? NaN : Date.parse(headers.date)
    return clamp(expires - (Number.isNaN(date) ? now : date) - age * 1000)
  }
  return MIN_LIFETIME_MS
}

import { accessClaimsOf, claimsOf, grants, PERMISSION_PATTERN } from './claims.ts'
import { PortcullisError } from './errors.ts'
import { pkcePair, verifierStore } from './pkce.ts'
import { memoryStorage, type TokenStorage } from './storage.ts'
import { Tabs } from './tabs.ts'
import { createCredential, getCredential } from './webauthn.ts'
import type {
  AccessClaims, Invitation, InvitationAcceptance, InvitationInput, InvitationRevocation, Member, MemberPage, MemberQuery, MemberRemoval, Organization, OrganizationDeletion, OrganizationMembership, UpdateOrganizationInput,
  AccountDeletion, AccountExport, CaptchaOptions, ChangeEmailInput, ChangePasswordInput, CreateWatchlistInput, FactorList, FactorRemoval, FactorRename, LoginInput, LoginResult, Me, MfaChallengeInfo, MfaRequired, UpdateMeInput,
  AppList, AppRevocation, IdentityList, IdentityRemoval, OidcLinkStart, OidcProviders, PasskeyCreation, PasskeyLogin, PasskeyRequest, RecoveryCodes, RefreshResult, RegisterInput, Registration, Session, SessionRevocation, StepUpInput, StepUpResult, TotpConfirmation, TotpEnrolment,
  UpdateWatchlistInput, Verification, VerifyMfaInput, Watchlist, WatchlistDeletion, WatchlistPage, WatchlistQuery,
} from './types.ts'

export { PortcullisError } from './errors.ts'
export { memoryStorage, type TokenStorage, type Tokens } from './storage.ts'
export type * from './types.ts'
// The resource server's side (docs/client.md, "Protecting your own API or MCP server"); tree-shaken
// away from a browser bundle that does not use it.
export {
  AccessTokenError, bearerToken, challenge, challengeResponse, KeySetUnavailableError, protectedResourceMetadata, resourceMetadataUrl, verifyAccessToken,
  type AccessTokenClaims, type AccessTokenRefusal, type BearerErrorCode, type ChallengeOptions, type ChallengeResponse, type ProtectedResourceMetadata,
  type ProtectedResourceMetadataInput, type VerifyAccessTokenOptions,
} from './resource-server.ts'

/**
 * `body`: tokens in the JSON bodies, kept in the TokenStorage (Node services, native apps).
 * `cookie`: browsers; the refresh token lives in an HttpOnly cookie that script never sees, and the
 * access token only in this object's memory.
 */
export type Transport = 'body' | 'cookie'

/** A request body with the bot check's token as the API names it, when one was given. */
function withCaptcha<Body extends object>(body: Body, options: CaptchaOptions): Body & { captcha_token?: string } {
  return options.captchaToken === undefined ? body : { ...body, captcha_token: options.captchaToken }
}

/**
 * A page or a worker: where a script injected into the application (XSS, a compromised
 * dependency) runs beside the client and could read any token the client holds.
 */
function inBrowser(): boolean {
  const scope = globalThis as { document?: unknown; WorkerGlobalScope?: unknown }
  return typeof scope.document === 'object' || typeof scope.WorkerGlobalScope === 'function'
}

/**
 * What fetch() resolves a relative URL against: the document's base URL (which a `<base>` element
 * changes), a worker's own address, nothing in Node.
 */
function fetchBase(): string | undefined {
  const scope = globalThis as { document?: { baseURI?: string }; location?: { href?: string } }
  return scope.document?.baseURI ?? scope.location?.href
}

/** The absolute form of a URL as fetch() would request it, or null when it has none. */
function absolute(url: string | URL): URL | null {
  try {
    return new URL(url, fetchBase())
  } catch {
    return null
  }
}

/** An entry of tokenOrigins: scheme, host and port only (`https://api.example.com`), no path. */
function tokenOrigin(entry: string): string {
  let url: URL | null = null
  try {
    url = new URL(entry)
  } catch {
    // Refused below, with the entry named.
  }
  if (!url || !/^https?:$/.test(url.protocol) || url.href !== `${url.origin}/`) {
    throw new TypeError(`tokenOrigins: "${entry}" is not an origin like https://api.example.com (scheme, host and port, no path)`)
  }
  return url.origin
}

/**
 * `revoked`: the server refused the access token as INVALID_TOKEN (logged out elsewhere, password
 * reset); `refresh_failed`: the refresh was refused; `ended_in_another_tab`: cookie transport.
 */
export type SessionEndReason = 'revoked' | 'refresh_failed' | 'ended_in_another_tab'

export interface PortcullisClientOptions {
  /** The API's base address, version segment included: `https://auth.example.com/v1`. */
  baseUrl: string
  /**
   * In a browser `cookie` by default: the refresh token never reaches script (docs/client.md, cookie mode). `body`
   * there only when asked for, with a console warning. Elsewhere (Node) `body` by default.
   */
  transport?: Transport
  /** Body transport only; memory by default. */
  storage?: TokenStorage
  /**
   * The origins besides the service's own (baseUrl's) that client.fetch() may send the access
   * token to: the application's own APIs, as `https://api.example.com`. A URL on any other origin
   * is refused by client.fetch() before anything is sent.
   */
  tokenOrigins?: string[]
  /** Called once when a live session ends without this client being asked to log out. */
  onSessionEnd?: (event: { reason: SessionEndReason; error?: PortcullisError }) => void
  /** Refresh this long before the access token's `exp` instead of waiting for TOKEN_EXPIRED (off: 0). */
  refreshAheadSeconds?: number
  /** The clock refreshAheadSeconds is judged by, in ms. */
  now?: () => number
  fetch?: typeof globalThis.fetch
  /** Cookie transport in a browser: share one refresh across tabs (default on; a string names the channel). */
  tabs?: boolean | string
}

interface Call {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  path: string
  body?: unknown
  query?: Record<string, string | number | undefined>
  /** Needs the access token; refreshed once and repeated once on TOKEN_EXPIRED. */
  bearer?: boolean
  /** Uses the refresh cookie: the opt-in header, and credentials for a cross-origin API. */
  cookie?: boolean
  /** Credentials for a cross-origin API without the cookie header (the answer sets another cookie). */
  credentials?: boolean
}

const JSON_TYPE = 'application/json'

/** Whether an answer is the service's "access token expired" (and not any other 401). */
async function isTokenExpired(response: Response): Promise<boolean> {
  if (response.status !== 401) return false
  try {
    const body = (await response.clone().json()) as { error?: { code?: unknown } }
    return body?.error?.code === 'TOKEN_EXPIRED'
  } catch {
    return false
  }
}

function expiryMs(jwt: string): number | null {
  const { exp } = claimsOf(jwt)
  return typeof exp === 'number' ? exp * 1000 : null
}

const orgPath = (id: string) => `/auth/organizations/${encodeURIComponent(id)}`
const memberPath = (organizationId: string, userId: string) => `${orgPath(organizationId)}/members/${encodeURIComponent(userId)}`

/**
 * A typed client for the Portcullis API: one method per operation, one error type, and the service's
 * client rules built in (on TOKEN_EXPIRED refresh once and repeat once; concurrent callers share
 * one refresh; a refused refresh ends the session and never loops).
 */
export class PortcullisClient {
  private readonly baseUrl: string
  private readonly transport: Transport
  private readonly storage: TokenStorage
  private readonly fetchImpl: typeof globalThis.fetch
  private readonly now: () => number
  private readonly refreshAheadMs: number
  private readonly onSessionEnd: PortcullisClientOptions['onSessionEnd']
  private readonly tabs: Tabs | null
  /** Where client.fetch() may send the access token: the service's origin and tokenOrigins. */
  private readonly tokenOrigins: ReadonlySet<string>
  /** Cookie transport: the access token, held in memory only. */
  private memoryAccessToken: string | null = null
  /**
   * Body transport: the access token as this client last loaded or saved it, so that can() and
   * claims() answer at once, without waiting on an asynchronous storage.
   */
  private storedAccessToken: string | null = null
  private refreshing: Promise<string> | null = null
  /** A switchOrganization() under way: a refresh asked for meanwhile waits for it. */
  private switching: Promise<string> | null = null
  private sessionLive = false

  constructor(options: PortcullisClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '')
    // In a browser, any script that runs on the page can read what the client holds: the 7-day
    // refresh token goes into an HttpOnly cookie instead, unless the application insists.
    const browser = inBrowser()
    this.transport = options.transport ?? (browser ? 'cookie' : 'body')
    if (browser && this.transport === 'body') {
      console.warn('PortcullisClient: the body transport in a browser keeps the 7-day refresh token where any script on the page can read it; leave transport unset for the cookie transport (docs/client.md)')
    }
    if (this.transport === 'cookie' && options.storage) {
      throw new TypeError(`storage is for the body transport; with cookies${options.transport ? '' : ' (the default in a browser)'} the access token stays in memory`)
    }
    const own = absolute(this.baseUrl)?.origin
    this.tokenOrigins = new Set([...(own && own !== 'null' ? [own] : []), ...(options.tokenOrigins ?? []).map(tokenOrigin)])
    this.storage = options.storage ?? memoryStorage()
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis)
    this.now = options.now ?? Date.now
    this.refreshAheadMs = (options.refreshAheadSeconds ?? 0) * 1000
    this.onSessionEnd = options.onSessionEnd
    // Tabs of one browser share a cookie, hence one refresh. Node 24 has BroadcastChannel and
    // navigator.locks too, but clients in one process are separate sessions, not tabs.
    const shareTabs = browser && this.transport === 'cookie' && options.tabs !== false && Tabs.available()
    this.tabs = shareTabs
      ? new Tabs(typeof options.tabs === 'string' ? options.tabs : 'portcullis', {
          token: (accessToken) => {
            this.memoryAccessToken = accessToken
            this.sessionLive = true
          },
          ended: () => void this.endSession('ended_in_another_tab', undefined, false),
        })
      : null
  }

  // Tokens ------------------------------------------------------------------------------------

  private async accessToken(): Promise<string | null> {
    if (this.transport === 'cookie') return this.memoryAccessToken
    this.storedAccessToken = (await this.storage.load())?.accessToken ?? null
    return this.storedAccessToken
  }

  /** The access token as this client holds it now, without a call or a storage read. */
  private heldAccessToken(): string | null {
    return this.transport === 'cookie' ? this.memoryAccessToken : this.storedAccessToken
  }

  private async refreshToken(): Promise<string | null> {
    return this.transport === 'cookie' ? null : ((await this.storage.load())?.refreshToken ?? null)
  }

  private async keepAccessToken(accessToken: string): Promise<void> {
    if (this.transport === 'cookie') {
      this.memoryAccessToken = accessToken
      return
    }
    const stored = await this.storage.load()
    if (stored) {
      await this.storage.save({ ...stored, accessToken })
      this.storedAccessToken = accessToken
    }
  }

  private async forgetTokens(): Promise<void> {
    this.memoryAccessToken = null
    this.storedAccessToken = null
    this.sessionLive = false
    await this.storage.clear()
  }

  /** Clears the tokens; if a session was live, tells the application once and the other tabs. */
  private async endSession(reason: SessionEndReason, error?: PortcullisError, share = true): Promise<void> {
    const wasLive = this.sessionLive
    await this.forgetTokens()
    if (!wasLive) return
    if (share) this.tabs?.shareEnded()
    this.onSessionEnd?.(error ? { reason, error } : { reason })
  }

  // HTTP ------------------------------------------------------------------------------------

  private url(path: string, query?: Call['query']): string {
    const params = new URLSearchParams()
    for (const [name, value] of Object.entries(query ?? {})) if (value !== undefined) params.set(name, String(value))
    const search = params.toString()
    return `${this.baseUrl}${path}${search ? `?${search}` : ''}`
  }

  private async send(call: Call, accessToken?: string | null): Promise<Response> {
    const headers: Record<string, string> = { accept: JSON_TYPE }
    if (call.body !== undefined) headers['content-type'] = JSON_TYPE
    if (accessToken) headers.authorization = `Bearer ${accessToken}`
    if (call.cookie) headers['x-token-transport'] = 'cookie'
    try {
      return await this.fetchImpl(this.url(call.path, call.query), {
        method: call.method,
        headers,
        ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
        // The refresh cookie crosses to an API on another origin only on the cookie routes.
        credentials: call.cookie || call.credentials ? 'include' : 'same-origin',
      })
    } catch (cause) {
      throw new PortcullisError({ code: 'NETWORK_ERROR', status: 0, message: `No answer from ${this.baseUrl}`, cause })
    }
  }

  private async read<T>(response: Response): Promise<T> {
    const requestId = response.headers.get('x-request-id') ?? undefined
    let body: { success?: unknown; data?: unknown; error?: { code?: string; message?: string; details?: { field: string; message: string }[]; mfa?: MfaChallengeInfo } }
    try {
      body = (await response.json()) as typeof body
    } catch (cause) {
      throw new PortcullisError({ code: 'INVALID_RESPONSE', status: response.status, message: 'The answer was not JSON', requestId, cause })
    }
    if (response.ok && body?.success === true) return body.data as T
    const error = body?.error
    if (!error?.code) throw new PortcullisError({ code: 'INVALID_RESPONSE', status: response.status, message: 'The answer was not in the envelope', requestId })
    throw new PortcullisError({ code: error.code as PortcullisError['code'], status: response.status, message: error.message ?? error.code, details: error.details, requestId, mfa: error.mfa })
  }

  private async request<T>(call: Call): Promise<T> {
    if (!call.bearer) return this.read<T>(await this.send(call))
    try {
      return await this.read<T>(await this.authorised((token) => this.send(call, token)))
    } catch (error) {
      // The session behind the token is gone; nothing is retried, and the application hears once.
      if (error instanceof PortcullisError && error.code === 'INVALID_TOKEN') await this.endSession('revoked', error)
      throw error
    }
  }

  // The refresh rules ---------------------------------------------------------------------------

  /** Sends with the access token; on TOKEN_EXPIRED, one refresh and one repeat, never more. */
  private async authorised(send: (accessToken: string | null) => Promise<Response>): Promise<Response> {
    const token = await this.usableAccessToken()
    const response = await send(token)
    if (token === null || !(await isTokenExpired(response))) return response
    return send(await this.refreshAfter(token))
  }

  private async usableAccessToken(): Promise<string | null> {
    const token = await this.accessToken()
    const expiry = token && this.refreshAheadMs > 0 ? expiryMs(token) : null
    if (token === null || expiry === null || expiry - this.refreshAheadMs > this.now()) return token
    try {
      return await this.refreshAfter(token)
    } catch (error) {
      // The old token is still good for a moment; a transient failure to refresh early is no reason to fail.
      if (error instanceof PortcullisError && (error.status === 0 || error.status >= 500)) return token
      throw error
    }
  }

  /**
   * A fresh access token for every caller whose `failed` token was refused: a caller whose token
   * was already replaced (by a refresh that finished while its request was out) gets the new one,
   * and callers that arrive while a refresh is running share it.
   */
  private async refreshAfter(failed: string | null): Promise<string> {
    // A switch of organisation brings a new token too; refused (not a member), the one held is
    // still the session's, and the caller refreshes as usual below.
    if (this.switching) await this.switching.catch(() => undefined)
    const current = await this.accessToken()
    if (current !== null && current !== failed) return current
    // The session ended (a refresh was refused) while this caller's request was out: no new attempt.
    if (current === null && failed !== null && this.refreshing === null) {
      throw new PortcullisError({ code: 'INVALID_REFRESH_TOKEN', status: 401, message: 'The session has ended; log in again.' })
    }
    this.refreshing ??= this.refreshAcrossTabs(failed).finally(() => {
      this.refreshing = null
    })
    return this.refreshing
  }

  private refreshAcrossTabs(failed: string | null): Promise<string> {
    const tabs = this.tabs
    if (!tabs) return this.refreshNow()
    return tabs.exclusive(async () => {
      // Another tab may have refreshed while this one waited for the lock.
      if (this.memoryAccessToken !== null && this.memoryAccessToken !== failed) return this.memoryAccessToken
      const token = await this.refreshNow()
      await tabs.shareToken(token)
      return token
    })
  }

  /**
   * One POST /auth/refresh; with `choice`, one that switches the session's active organisation. A
   * refusal ends the session; a network failure or outage does not, nor does FORBIDDEN (not a
   * member of the organisation asked for: the session is as it was).
   */
  private async refreshNow(choice?: { organization_id: string | null }): Promise<string> {
    try {
      const refreshToken = await this.refreshToken()
      if (this.transport === 'body' && refreshToken === null) {
        throw new PortcullisError({ code: 'INVALID_REFRESH_TOKEN', status: 401, message: 'No refresh token is held; log in first.' })
      }
      const data = await this.read<RefreshResult>(
        await this.send(this.transport === 'cookie'
          ? { method: 'POST', path: '/auth/refresh', cookie: true, ...(choice ? { body: choice } : {}) }
          : { method: 'POST', path: '/auth/refresh', body: { refresh_token: refreshToken, ...choice } }),
      )
      await this.keepAccessToken(data.access_token)
      this.sessionLive = true
      return data.access_token
    } catch (error) {
      if (error instanceof PortcullisError && (error.status === 401 || error.status === 403) && error.code !== 'FORBIDDEN') await this.endSession('refresh_failed', error)
      throw error
    }
  }

  // Session ---------------------------------------------------------------------------------

  /**
   * After a page load (cookie transport): gets an access token from the refresh cookie, or from a
   * tab that has one. False when there is no session. Body transport: whether tokens are stored.
   */
  async restore(): Promise<boolean> {
    if (this.transport === 'body') {
      this.sessionLive = (await this.accessToken()) !== null
      return this.sessionLive
    }
    try {
      await this.refreshAfter(null)
      return true
    } catch (error) {
      if (error instanceof PortcullisError && (error.status === 401 || error.status === 403)) return false
      throw error
    }
  }

  /** The current access token (refreshed first when refreshAheadSeconds says so), or null. */
  getAccessToken(): Promise<string | null> {
    return this.usableAccessToken()
  }

  // What the user may do ----------------------------------------------------------------------

  /**
   * What the current access token says the user may do: their global roles and permissions,
   * app_metadata, and the active organisation with their roles and permissions in it; null with
   * no token. Read from the token this client holds, without a call: a snapshot as of the token's
   * issue (docs/client.md, "What the user may do").
   */
  claims(): AccessClaims | null {
    const token = this.heldAccessToken()
    return token === null ? null : accessClaimsOf(token)
  }

  /**
   * Whether the current access token grants `permission` (`resource:action`): its `permissions`
   * do, or its `org_permissions` in the active organisation do (where `organization:*`, the
   * owner's, grants everything); `resource:*` grants every action of the resource. The service's
   * own rule, read from the token without a call. For showing and hiding what a person may use;
   * the service (or the application's API) still decides on each request.
   */
  can(permission: string): boolean {
    if (!PERMISSION_PATTERN.test(permission)) throw new TypeError(`can(): "${permission}" is not a permission like "watchlists:read" (resource:action)`)
    const claims = this.claims()
    if (claims === null) return false
    return grants(claims.permissions, permission, false) || (claims.org_id !== null && grants(claims.org_permissions, permission, true))
  }

  /**
   * fetch() for the application's own APIs: the access token attached, and the same single
   * refresh and repeat when the answer is 401 with the code TOKEN_EXPIRED. The body must be one
   * that can be sent twice (a string, Blob, FormData, URLSearchParams or buffer, not a stream).
   *
   * Only to the service's origin and tokenOrigins: a URL anywhere else (a link taken from a page or
   * a query string, a typo) would hand the bearer token to whoever runs that site, so it is refused
   * with TOKEN_ORIGIN_NOT_ALLOWED before anything is sent. The URL is resolved here, and that same
   * absolute URL is what is fetched, so a `<base>` element cannot make the two differ.
   */
  async fetch(input: string | URL, init: RequestInit = {}): Promise<Response> {
    const url = typeof input === 'string' || input instanceof URL ? absolute(input) : null
    if (url === null || !this.tokenOrigins.has(url.origin)) {
      throw new PortcullisError({
        code: 'TOKEN_ORIGIN_NOT_ALLOWED',
        status: 0,
        message: `client.fetch() sends the access token only to ${[...this.tokenOrigins].join(', ') || "the service's origin"}; ${url?.origin ?? String(input)} is not among them (list it in tokenOrigins, or use fetch() for other sites)`,
      })
    }
    return this.authorised(async (token) => {
      const headers = new Headers(init.headers)
      if (token) headers.set('authorization', `Bearer ${token}`)
      try {
        return await this.fetchImpl(url.href, { ...init, headers })
      } catch (cause) {
        throw new PortcullisError({ code: 'NETWORK_ERROR', status: 0, message: `No answer from ${url.href}`, cause })
      }
    })
  }

  // Operations (one per operationId of the API) -----------------------------------------------

  /** With bot protection on the service, `options.captchaToken` is the widget's token (a VALIDATION_ERROR on `captcha` without it). */
  register(input: RegisterInput, options: CaptchaOptions = {}): Promise<Registration> {
    return this.request({ method: 'POST', path: '/auth/register', body: withCaptcha(input, options) })
  }

  verifyEmail(token: string): Promise<Verification> {
    return this.request({ method: 'POST', path: '/auth/verify-email', body: { token } })
  }

  async resendVerification(email: string, options: CaptchaOptions = {}): Promise<void> {
    await this.request({ method: 'POST', path: '/auth/resend-verification', body: withCaptcha({ email }, options) })
  }

  /**
   * Signs in. For an account with a second factor the answer is an MfaRequired (no session yet),
   * not an error: pass its mfa_token with a code to verifyMfa().
   */
  login(input: LoginInput): Promise<LoginResult | MfaRequired> {
    return this.sessionOrSecondStep(this.request<LoginResult>({ method: 'POST', path: '/auth/login', body: input, cookie: this.transport === 'cookie' }))
  }

  /** The second step of a login: the session begins here (in cookie mode, with the cookie). */
  async verifyMfa(input: VerifyMfaInput): Promise<LoginResult> {
    return this.signedIn(await this.request<LoginResult>({ method: 'POST', path: '/auth/mfa/verify', body: input, cookie: this.transport === 'cookie' }))
  }

  private async signedIn(data: LoginResult): Promise<LoginResult> {
    if ('refresh_token' in data) {
      await this.storage.save({ accessToken: data.access_token, refreshToken: data.refresh_token })
      this.storedAccessToken = data.access_token
    } else {
      this.memoryAccessToken = data.access_token
    }
    this.sessionLive = true
    await this.tabs?.shareToken(data.access_token)
    return data
  }

  /**
   * Verifies a second factor in this session, which makes it recent for the sensitive actions
   * (PortcullisError.stepUpRequired says when one is needed); the new access token replaces the old.
   */
  async stepUp(input: StepUpInput): Promise<StepUpResult> {
    const result = await this.request<StepUpResult>({ method: 'POST', path: '/auth/mfa/step-up', body: input, bearer: true })
    await this.keepAccessToken(result.access_token)
    await this.tabs?.shareToken(result.access_token)
    return result
  }

  listFactors(): Promise<FactorList> {
    return this.request({ method: 'GET', path: '/auth/mfa', bearer: true })
  }

  /** Starts adding an authenticator app: show `qr_svg` (or `secret`), then confirmTotp() with a code from the app. */
  enrolTotp(name?: string): Promise<TotpEnrolment> {
    return this.request({ method: 'POST', path: '/auth/mfa/totp', body: name === undefined ? {} : { name }, bearer: true })
  }

  /** The first confirmed factor answers `recovery_codes`: show them once. */
  confirmTotp(factorId: string, code: string): Promise<TotpConfirmation> {
    return this.request({ method: 'POST', path: `/auth/mfa/totp/${encodeURIComponent(factorId)}/confirm`, body: { code }, bearer: true })
  }

  removeFactor(factorId: string): Promise<FactorRemoval> {
    return this.request({ method: 'DELETE', path: `/auth/mfa/factors/${encodeURIComponent(factorId)}`, bearer: true })
  }

  /** A new set of ten; the old set stops working. */
  regenerateRecoveryCodes(): Promise<RecoveryCodes> {
    return this.request({ method: 'POST', path: '/auth/mfa/recovery-codes', bearer: true })
  }

  /** A factor's new name ("work laptop"). */
  renameFactor(factorId: string, name: string): Promise<FactorRename> {
    return this.request({ method: 'PATCH', path: `/auth/mfa/factors/${encodeURIComponent(factorId)}`, body: { name }, bearer: true })
  }

  /**
   * Adds a passkey in this browser: the server's options, the browser's own dialog
   * (navigator.credentials.create), the credential back to the server. The account's first factor
   * answers `recovery_codes`: show them once. Needs a recent second factor when the account has one.
   */
  async registerPasskey(name?: string): Promise<TotpConfirmation> {
    const { options } = await this.passkeyRegistrationOptions()
    const credential = await createCredential(options)
    return this.request({ method: 'POST', path: '/auth/passkeys/register', body: name === undefined ? { credential } : { credential, name }, bearer: true })
  }

  /** Signs in with a passkey alone (discoverable: the browser offers the user's passkeys for this site). */
  async loginWithPasskey(): Promise<LoginResult> {
    const { challenge_id, options } = await this.passkeyLoginOptions()
    const credential = await getCredential(options)
    return this.signedIn(await this.request<LoginResult>({ method: 'POST', path: '/auth/passkeys/login', body: { challenge_id, credential }, cookie: this.transport === 'cookie' }))
  }

  /** The second step of a login with one of the account's passkeys (`methods` includes "passkey"). */
  async verifyMfaWithPasskey(mfaToken: string): Promise<LoginResult> {
    const { options } = await this.passkeyOptions(mfaToken)
    const credential = await getCredential(options)
    return this.verifyMfa({ mfa_token: mfaToken, method: 'passkey', credential } as VerifyMfaInput)
  }

  /** stepUp() with one of the account's passkeys. */
  async stepUpWithPasskey(): Promise<StepUpResult> {
    const { options } = await this.passkeyOptions()
    const credential = await getCredential(options)
    return this.stepUp({ method: 'passkey', credential } as StepUpInput)
  }

  // The ceremonies' first halves, for an application that calls WebAuthn itself (a native app, a
  // custom dialog); the methods above use them.

  /** Creation options for navigator.credentials.create(); then POST the credential with registerPasskey's route. */
  passkeyRegistrationOptions(): Promise<PasskeyCreation> {
    return this.request({ method: 'POST', path: '/auth/passkeys/register/options', bearer: true })
  }

  /** Request options for a passwordless login, and the challenge_id to send back with the credential. */
  passkeyLoginOptions(): Promise<PasskeyLogin> {
    return this.request({ method: 'POST', path: '/auth/passkeys/login/options' })
  }

  /** Request options for the account's passkeys: for the login's second step (with its mfa_token), or for step-up (without). */
  passkeyOptions(mfaToken?: string): Promise<PasskeyRequest> {
    return mfaToken === undefined
      ? this.request({ method: 'POST', path: '/auth/mfa/passkey/options', bearer: true })
      : this.request({ method: 'POST', path: '/auth/mfa/passkey/options', body: { mfa_token: mfaToken } })
  }

  /** The identity providers a login screen shows ("Continue with Google"), and whether each is up. */
  oidcProviders(): Promise<OidcProviders> {
    return this.request({ method: 'GET', path: '/auth/oidc/providers' })
  }

  /**
   * Where to send the browser to sign in with a provider (`location.assign(await client.startOidc(...))`).
   * It comes back to `redirectTo` (on one of OIDC_REDIRECT_ORIGINS) with `?code=`, to pass to
   * exchangeOidcCode() in the same tab, or with `?error=`. The URL carries a PKCE challenge whose
   * verifier stays in this tab's sessionStorage: only this tab can exchange the code it brings back.
   */
  async startOidc(name: string, redirectTo: string): Promise<string> {
    const { verifier, challenge } = await pkcePair()
    verifierStore(this.baseUrl).save(verifier)
    return this.url(`/auth/oidc/${encodeURIComponent(name)}/start`, { redirect_to: redirectTo, code_challenge: challenge, code_challenge_method: 'S256' })
  }

  /** The callback URL to register at the provider for `name` (the provider sends the browser there, not the app). */
  oidcCallback(name: string): string {
    return this.url(`/auth/oidc/${encodeURIComponent(name)}/callback`)
  }

  /**
   * The one-time code from the provider's return for a session (in cookie mode, with the cookie),
   * with the verifier startOidc() kept (used once). Without one (a flow this client did not start),
   * the proof is the flow's cookie, so the call carries credentials. An account with a second
   * factor answers MfaRequired, as login() does.
   */
  exchangeOidcCode(code: string): Promise<LoginResult | MfaRequired> {
    const verifier = verifierStore(this.baseUrl).take()
    const body = verifier === null ? { code } : { code, code_verifier: verifier }
    return this.sessionOrSecondStep(this.request<LoginResult>({ method: 'POST', path: '/auth/oidc/exchange', body, cookie: this.transport === 'cookie', credentials: verifier === null }))
  }

  /**
   * Mails a 6-digit code and a link for `email` (the answer is the same whether or not it has an
   * account). With `redirectTo`, the link sends this browser back there with `?code=` for
   * completeEmailLink(); the PKCE verifier is kept in localStorage (the link opens a new tab) for
   * the code's 10 minutes. The answer sets the cookie that binds the link to this browser.
   * `options.captchaToken`: the widget's token, for a service with bot protection.
   */
  async startEmailSignIn(email: string, redirectTo?: string, options: CaptchaOptions = {}): Promise<void> {
    const body: Record<string, string> = withCaptcha({ email }, options)
    if (redirectTo !== undefined) {
      const { verifier, challenge } = await pkcePair()
      verifierStore(this.baseUrl, 'email').save(verifier)
      Object.assign(body, { redirect_to: redirectTo, code_challenge: challenge, code_challenge_method: 'S256' })
    }
    await this.request({ method: 'POST', path: '/auth/email/start', body, credentials: true })
  }

  /** The 6-digit code from the mail: a session, or MfaRequired as login() answers. */
  verifyEmailCode(email: string, code: string): Promise<LoginResult | MfaRequired> {
    return this.sessionOrSecondStep(this.request<LoginResult>({ method: 'POST', path: '/auth/email/verify', body: { email, code }, cookie: this.transport === 'cookie' }))
  }

  /** The link's `?code=`, with the verifier startEmailSignIn() kept (used once): a session, or MfaRequired. */
  completeEmailLink(code: string): Promise<LoginResult | MfaRequired> {
    const verifier = verifierStore(this.baseUrl, 'email').take()
    const body = verifier === null ? { code } : { code, code_verifier: verifier }
    return this.sessionOrSecondStep(this.request<LoginResult>({ method: 'POST', path: '/auth/email/exchange', body, cookie: this.transport === 'cookie', credentials: verifier === null }))
  }

  /** A sign-in's answer: the session, or MfaRequired (a result, not a thrown error) when the account has a second factor. */
  private async sessionOrSecondStep(answer: Promise<LoginResult>): Promise<LoginResult | MfaRequired> {
    try {
      return await this.signedIn(await answer)
    } catch (error) {
      const mfa = error instanceof PortcullisError && error.code === 'MFA_REQUIRED' ? error.mfa : undefined
      if (mfa && 'mfa_token' in mfa) return { mfa_required: true, ...mfa }
      throw error
    }
  }

  /**
   * Links a provider to the signed-in account: send the browser to the answer's
   * `authorization_url`; it comes back to `redirectTo` with `?linked=` or `?error=`. The answer sets
   * the flow's cookie, so the call carries credentials.
   */
  linkOidc(name: string, redirectTo: string): Promise<OidcLinkStart> {
    return this.request({ method: 'POST', path: `/auth/oidc/${encodeURIComponent(name)}/link`, body: { redirect_to: redirectTo }, bearer: true, credentials: true })
  }

  listIdentities(): Promise<IdentityList> {
    return this.request({ method: 'GET', path: '/auth/me/identities', bearer: true })
  }

  /** LAST_SIGN_IN_METHOD when it is the account's only way in. */
  unlinkIdentity(id: string): Promise<IdentityRemoval> {
    return this.request({ method: 'DELETE', path: `/auth/me/identities/${encodeURIComponent(id)}`, bearer: true })
  }

  /** The apps the user let sign in with this account (Portcullis as an OpenID provider). */
  listApps(): Promise<AppList> {
    return this.request({ method: 'GET', path: '/auth/me/apps', bearer: true })
  }

  /** Ends an app's access at once: its grant, its refresh tokens, and (within a second) its access tokens here. */
  revokeApp(clientId: string): Promise<AppRevocation> {
    return this.request({ method: 'DELETE', path: `/auth/me/apps/${encodeURIComponent(clientId)}`, bearer: true })
  }

  /** A new access token now, without waiting for one to expire. */
  async refresh(): Promise<RefreshResult> {
    const access_token = await this.refreshAfter(await this.accessToken())
    const { exp, iat } = claimsOf(access_token)
    return { access_token, expires_in: typeof exp === 'number' && typeof iat === 'number' ? exp - iat : 0 }
  }

  /**
   * Makes `organizationId` the session's active organisation, or none with null: a refresh that
   * asks for it. The new access token, kept by this client (and handed to the other tabs in cookie
   * mode), carries `org_id`, `org_roles` and `org_permissions`, and the session remembers the
   * choice for its later refreshes. Not a member of it: FORBIDDEN, and the session stays as it was.
   */
  async switchOrganization(organizationId: string | null): Promise<RefreshResult> {
    // After any refresh or switch under way, so that this one is the last word: a refresh that
    // finished later would otherwise put a token of the previous organisation back.
    while (this.refreshing || this.switching) await (this.refreshing ?? this.switching)!.catch(() => undefined)
    const run = async () => {
      const token = await this.refreshNow({ organization_id: organizationId })
      await this.tabs?.shareToken(token)
      return token
    }
    const switching = this.tabs ? this.tabs.exclusive(run) : run()
    this.switching = switching
    try {
      const access_token = await switching
      const { exp, iat } = claimsOf(access_token)
      return { access_token, expires_in: typeof exp === 'number' && typeof iat === 'number' ? exp - iat : 0 }
    } finally {
      if (this.switching === switching) this.switching = null
    }
  }

  me(): Promise<Me> {
    return this.request({ method: 'GET', path: '/auth/me', bearer: true })
  }

  /** Changes the user's name or their user_metadata; answers what me() answers. */
  updateMe(input: UpdateMeInput): Promise<Me> {
    return this.request({ method: 'PATCH', path: '/auth/me', body: input, bearer: true })
  }

  /**
   * Asks to move the account to another address: a link goes to it, a notice to the current one,
   * and nothing changes until the link is used (then every other session ends). `password` when
   * the account has one. A sensitive action: it may need stepUp() first (stepUpRequired).
   */
  async changeEmail(input: ChangeEmailInput): Promise<void> {
    await this.request({ method: 'POST', path: '/auth/me/email', body: input, bearer: true })
  }

  /** Ends this session on the server and forgets it here (and in the other tabs). */
  async logout(): Promise<void> {
    try {
      if (this.transport === 'cookie') {
        await this.request({ method: 'POST', path: '/auth/logout', cookie: true })
      } else {
        const refreshToken = await this.refreshToken()
        if (refreshToken !== null) await this.request({ method: 'POST', path: '/auth/logout', body: { refresh_token: refreshToken } })
      }
    } finally {
      await this.forgetTokens()
      this.tabs?.shareEnded()
    }
  }

  /**
   * After a call that ended this client's own session on the server: forgotten here and in the
   * other tabs, and the cookie cleared. The application asked for it, so onSessionEnd stays quiet;
   * forgetting first also keeps a call still in flight, refused with INVALID_TOKEN, from reporting
   * the revocation to onSessionEnd as if it came from elsewhere.
   */
  private async endOwnSession(): Promise<void> {
    await this.forgetTokens()
    this.tabs?.shareEnded()
    // Cross-origin, the cookie routes are the only ones the cookie reaches, so only they can clear
    // it. The session is already dead: a failure here leaves a worthless cookie, not a live one.
    if (this.transport === 'cookie') await this.request({ method: 'POST', path: '/auth/logout', cookie: true }).catch(() => undefined)
  }

  /** Ends every session of the user; returns how many. */
  async logoutAll(): Promise<number> {
    const { revoked } = await this.request<{ revoked: number }>({ method: 'POST', path: '/auth/logout-all', bearer: true })
    await this.endOwnSession()
    return revoked
  }

  async listSessions(): Promise<Session[]> {
    return (await this.request<{ sessions: Session[] }>({ method: 'GET', path: '/auth/sessions', bearer: true })).sessions
  }

  /** Revokes one of the user's sessions; when it is this client's own, ends it here as logoutAll does. */
  async revokeSession(id: string): Promise<SessionRevocation> {
    // This client's session is the access token's `sid` claim (docs/tokens.md), read locally:
    // listSessions' `current` would add a round trip before every revocation (after it, that call
    // is refused) for an answer the token already carries.
    const { sid } = claimsOf((await this.accessToken()) ?? '')
    const revoked = await this.request<SessionRevocation>({ method: 'DELETE', path: `/auth/sessions/${encodeURIComponent(id)}`, bearer: true })
    // Session ids are UUIDs, which compare without regard to case.
    if (typeof sid === 'string' && sid.toLowerCase() === id.toLowerCase()) await this.endOwnSession()
    return revoked
  }

  async forgotPassword(email: string, options: CaptchaOptions = {}): Promise<void> {
    await this.request({ method: 'POST', path: '/auth/forgot-password', body: withCaptcha({ email }, options) })
  }

  async resetPassword(token: string, password: string): Promise<void> {
    await this.request({ method: 'POST', path: '/auth/reset-password', body: { token, password } })
  }

  /** Keeps this session, revokes every other one; returns how many. */
  async changePassword(input: ChangePasswordInput): Promise<number> {
    return (await this.request<{ revoked: number }>({ method: 'POST', path: '/auth/change-password', body: input, bearer: true })).revoked
  }

  /** A copy of everything the service stores about the user (GDPR article 15). */
  exportAccount(): Promise<AccountExport> {
    return this.request({ method: 'GET', path: '/auth/me/export', bearer: true })
  }

  /**
   * Deletes the account for good (needs the current password); every session ends, here and in
   * the other tabs, and the cookie is cleared.
   */
  async deleteAccount(password: string): Promise<AccountDeletion> {
    const deleted = await this.request<AccountDeletion>({ method: 'DELETE', path: '/auth/me', body: { password }, bearer: true })
    await this.endOwnSession()
    return deleted
  }

  listWatchlists(query: WatchlistQuery = {}): Promise<WatchlistPage> {
    return this.request({ method: 'GET', path: '/watchlists', query, bearer: true })
  }

  async createWatchlist(input: CreateWatchlistInput): Promise<Watchlist> {
    return (await this.request<{ watchlist: Watchlist }>({ method: 'POST', path: '/watchlists', body: input, bearer: true })).watchlist
  }

  async getWatchlist(id: string): Promise<Watchlist> {
    return (await this.request<{ watchlist: Watchlist }>({ method: 'GET', path: `/watchlists/${encodeURIComponent(id)}`, bearer: true })).watchlist
  }

  async updateWatchlist(id: string, input: UpdateWatchlistInput): Promise<Watchlist> {
    return (await this.request<{ watchlist: Watchlist }>({ method: 'PATCH', path: `/watchlists/${encodeURIComponent(id)}`, body: input, bearer: true })).watchlist
  }

  deleteWatchlist(id: string): Promise<WatchlistDeletion> {
    return this.request({ method: 'DELETE', path: `/watchlists/${encodeURIComponent(id)}`, bearer: true })
  }

  async addWatchlistSymbol(id: string, symbol: string): Promise<Watchlist> {
    return (await this.request<{ watchlist: Watchlist }>({ method: 'POST', path: `/watchlists/${encodeURIComponent(id)}/symbols`, body: { symbol }, bearer: true })).watchlist
  }

  async removeWatchlistSymbol(id: string, symbol: string): Promise<Watchlist> {
    const path = `/watchlists/${encodeURIComponent(id)}/symbols/${encodeURIComponent(symbol)}`
    return (await this.request<{ watchlist: Watchlist }>({ method: 'DELETE', path, bearer: true })).watchlist
  }

  // Organisations (docs/client.md, "Organisations") ---------------------------------------------

  /** A new organisation, the caller its `owner`. Needs a confirmed address. */
  async createOrganization(name: string): Promise<Organization> {
    return (await this.request<{ organization: Organization }>({ method: 'POST', path: '/auth/organizations', body: { name }, bearer: true })).organization
  }

  /** The organisations the user belongs to, with their roles in each. */
  async listOrganizations(): Promise<OrganizationMembership[]> {
    return (await this.request<{ organizations: OrganizationMembership[] }>({ method: 'GET', path: '/auth/organizations', bearer: true })).organizations
  }

  /** One of the user's organisations; one they do not belong to is NOT_FOUND. */
  async getOrganization(id: string): Promise<Organization> {
    return (await this.request<{ organization: Organization }>({ method: 'GET', path: orgPath(id), bearer: true })).organization
  }

  /** Renames an organisation (`organization:*`, the owner's permission). */
  async updateOrganization(id: string, input: UpdateOrganizationInput): Promise<Organization> {
    return (await this.request<{ organization: Organization }>({ method: 'PATCH', path: orgPath(id), body: input, bearer: true })).organization
  }

  /** Deletes an organisation with its memberships and invitations (`organization:*`). */
  deleteOrganization(id: string): Promise<OrganizationDeletion> {
    return this.request({ method: 'DELETE', path: orgPath(id), bearer: true })
  }

  /** A page of an organisation's members (any member may list them); pass `next_cursor` back as `cursor`. */
  listMembers(organizationId: string, query: MemberQuery = {}): Promise<MemberPage> {
    return this.request({ method: 'GET', path: `${orgPath(organizationId)}/members`, query, bearer: true })
  }

  /**
   * A member's roles in the organisation, all of them (`members:manage`; nobody grants a permission
   * they lack). The last owner cannot be demoted while others are members: LAST_OWNER.
   */
  async updateMember(organizationId: string, userId: string, roles: string[]): Promise<Member> {
    return (await this.request<{ member: Member }>({ method: 'PUT', path: memberPath(organizationId, userId), body: { roles }, bearer: true })).member
  }

  /** Removes a member (`members:manage`); the user's own id leaves, as leaveOrganization() does. */
  async removeMember(organizationId: string, userId: string): Promise<MemberRemoval> {
    const removed = await this.request<MemberRemoval>({ method: 'DELETE', path: memberPath(organizationId, userId), bearer: true })
    await this.afterLeaving(organizationId, userId)
    return removed
  }

  /**
   * Leaves an organisation. The last owner of one with other members cannot (LAST_OWNER). When it
   * was the active one, the client refreshes at once, so claims() and can() stop answering for it.
   */
  async leaveOrganization(organizationId: string): Promise<MemberRemoval> {
    const userId = claimsOf((await this.accessToken()) ?? '').sub
    if (typeof userId !== 'string') throw new PortcullisError({ code: 'AUTH_REQUIRED', status: 401, message: 'Not signed in: log in first.' })
    return this.removeMember(organizationId, userId)
  }

  /** The user left the active organisation: a token without it, rather than one the service refuses at the next call. */
  private async afterLeaving(organizationId: string, userId: string): Promise<void> {
    const token = await this.accessToken()
    if (token === null) return
    const { sub, org_id } = claimsOf(token)
    if (sub === userId && typeof org_id === 'string' && org_id.toLowerCase() === organizationId.toLowerCase()) await this.refreshAfter(token)
  }

  /**
   * Invites an address to the organisation with `roles` (`members:invite`): a single-use link is
   * mailed to it, good for 7 days. The invitation's token is never shown to the inviter.
   */
  async invite(organizationId: string, input: InvitationInput): Promise<Invitation> {
    return (await this.request<{ invitation: Invitation }>({ method: 'POST', path: `${orgPath(organizationId)}/invitations`, body: input, bearer: true })).invitation
  }

  /** The organisation's pending invitations (`members:invite`). */
  async listInvitations(organizationId: string): Promise<Invitation[]> {
    return (await this.request<{ invitations: Invitation[] }>({ method: 'GET', path: `${orgPath(organizationId)}/invitations`, bearer: true })).invitations
  }

  /** Withdraws a pending invitation (`members:invite`); its link stops working. */
  revokeInvitation(organizationId: string, invitationId: string): Promise<InvitationRevocation> {
    return this.request({ method: 'DELETE', path: `${orgPath(organizationId)}/invitations/${encodeURIComponent(invitationId)}`, bearer: true })
  }

  /**
   * Accepts an invitation with the token from its link (`?token=`), for the signed-in user, whose
   * confirmed address must be the invited one (else FORBIDDEN, and the invitation stays). The
   * membership takes effect at once; switchOrganization() makes it the active one.
   */
  acceptInvitation(token: string): Promise<InvitationAcceptance> {
    return this.request({ method: 'POST', path: '/auth/invitations/accept', body: { token }, bearer: true })
  }

  /** Stops listening to the other tabs. */
  close(): void {
    this.tabs?.close()
  }
}

import { createHmac, randomBytes, randomUUID } from 'node:crypto'
import { jwtVerify } from 'jose'
import type { AccountEvents } from '../webhooks/events.ts'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import { normaliseEmail } from '../auth/input.ts'
import type { KeySealer } from '../auth/key-encryption.ts'
import { NO_PASSWORD } from '../auth/passwords.ts'
import type { AuthService, Principal, SecondFactorSeam } from '../auth/service.ts'
import type { LoginBody, SessionOpener, SignIn } from '../auth/sessions.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { sessions, users, type UserRow } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { MailQueue } from '../mail/queue.ts'
import { identityLinkedMail, type MailBrand } from '../mail/templates.ts'
import { isUuid } from '../text.ts'
import { openidClient, type OidcProviders, type Provider } from './providers.ts'
import type { LoginCodes } from '../auth/login-codes.ts'
import { flows, identities, type FlowRow, type IdentityRow } from './store.ts'

/** A flow's life between start and callback. */
export const FLOW_TTL_MS = 10 * 60_000
/** A sign-in through a provider: the provider vouched, nothing more (docs/oidc.md). */
const FEDERATED: SignIn = { amr: ['fed'], acr: 'aal1' }

/** The `error` values a callback sends the browser back with (README.md, "Sign in with Google"). */
export type CallbackError =
  | 'access_denied'
  | 'invalid_request'
  | 'provider_error'
  | 'account_exists'
  | 'email_not_verified'
  | 'account_disabled'
  | 'provider_unavailable'
  | 'server_error'

/** Where a callback sends the browser: the flow's redirect_to with code, linked or error; or nowhere (no trusted flow). */
export type CallbackOutcome = { redirect: string } | { refused: 'unknown_flow' }

export interface IdentityView {
  id: string
  provider: string
  email: string | null
  created_at: string
  last_used_at: string | null
}

export interface OidcDeps {
  /** The webhooks' outbox (src/webhooks/): events written in the transaction of the change. */
  events: AccountEvents
  db: Db
  clock: Clock
  sealer: KeySealer
  /** HMAC key for states and browser cookies (sealed in the database like the others). */
  hmacKey: Buffer
  /** The one-time login code handed to the application (src/auth/login-codes.ts). */
  loginCodes: LoginCodes
  providers: OidcProviders
  auth: Pick<AuthService, 'registerFederated'>
  sessions: SessionOpener
  secondFactor: SecondFactorSeam
  /** Whether the account holds a passkey: one of the ways in LAST_SIGN_IN_METHOD counts (read in `trx` when given). */
  hasPasskey(userId: string, trx?: Db['kysely']): Promise<boolean>
  /** The durable mail queue: a new link tells the user, in the link's own transaction. */
  mailQueue: MailQueue
  brand: MailBrand
  logger: Logger
  /** PUBLIC_URL + BASE_PATH: the callback URL is `{this}/auth/oidc/{name}/callback`. */
  apiUrl: string
  /** OIDC_REDIRECT_ORIGINS. */
  redirectOrigins: string[]
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())

function view(row: IdentityRow): IdentityView {
  return { id: row.id, provider: row.provider, email: row.email, created_at: iso(row.created_at)!, last_used_at: iso(row.last_used_at) }
}

/** Verified means true, or the string "true" (Apple sends strings). */
function claimsVerified(value: unknown): boolean {
  return value === true || value === 'true'
}

/** What the application asked of the login code at start: an RFC 7636 S256 challenge, or nothing. */
export interface StartRequest {
  redirectTo: string
  codeChallenge?: string | undefined
  codeChallengeMethod?: string | undefined
}

/** What an exchange presents: the code, and the proof its start asked for. */
export interface ExchangeRequest {
  code: string
  codeVerifier?: string | undefined
  /** The `portcullis_oidc` cookie the request carried. */
  browser?: string | undefined
}

/** A refusal the callback turns into `?error=` on the flow's redirect_to. */
class CallbackRefused extends Error {
  constructor(readonly reason: CallbackError, readonly detail?: string) {
    super(reason)
  }
}

/**
 * Sign-in with an identity provider (docs/oidc.md): authorization code with PKCE, state
 * and nonce through openid-client, the ID token's signature checked again with jose against the
 * provider's keys, the flow bound to the browser that started it, a one-time login code instead of
 * tokens in URLs, and the linking rules that keep an address someone else typed from becoming a
 * way into the account. A completed sign-in goes through the second-factor seam and ends in the
 * SessionOpener, as every way in does.
 */
export class OidcService {
  constructor(private readonly deps: OidcDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  private mac(purpose: string, value: string): string {
    return createHmac('sha256', this.deps.hmacKey).update(`${purpose}\n${value}`).digest('base64url')
  }

  providers() {
    return { providers: this.deps.providers.list() }
  }

  private provider(name: string): Provider {
    const provider = this.deps.providers.get(name)
    if (!provider) throw new AppError('NOT_FOUND')
    return provider
  }

  callbackUrl(name: string): string {
    return `${this.deps.apiUrl}/auth/oidc/${name}/callback`
  }

  /** redirect_to: an absolute URL on an allowed origin, or VALIDATION_ERROR (never an open redirector). */
  private allowedRedirect(redirectTo: string): string {
    let url: URL | null = null
    try {
      url = new URL(redirectTo)
    } catch {
      // Not absolute.
    }
    if (!url || !this.deps.redirectOrigins.includes(url.origin) || url.username || url.password) {
      throw new AppError('VALIDATION_ERROR', { message: 'redirect_to must be an absolute URL on one of OIDC_REDIRECT_ORIGINS.', details: [{ field: 'redirect_to', message: 'not an allowed origin' }] })
    }
    return url.toString()
  }

  /** A provider name that exists (404 otherwise), for the routes that take one. */
  assertKnown(name: string): void {
    this.provider(name)
  }

  /**
   * A challenge and its method come together or not at all (docs/oidc.md, login CSRF): a method without a challenge,
   * or a challenge without S256, would leave the application believing its code is bound when it is not.
   */
  private challengeOf(request: StartRequest): string | null {
    const { codeChallenge, codeChallengeMethod } = request
    if (codeChallenge === undefined && codeChallengeMethod === undefined) return null
    if (codeChallenge === undefined || codeChallengeMethod !== 'S256' || !/^[A-Za-z0-9_-]{43}$/.test(codeChallenge)) {
      const field = codeChallenge === undefined ? 'code_challenge' : 'code_challenge_method'
      throw new AppError('VALIDATION_ERROR', { message: 'code_challenge (43 base64url characters) and code_challenge_method=S256 go together.', details: [{ field, message: codeChallenge === undefined ? 'is required with code_challenge_method' : 'must be S256' }] })
    }
    return codeChallenge
  }

  /**
   * Starts a flow: state, nonce and PKCE verifier kept here (10 minutes, single-use), bound to the
   * browser's `portcullis_oidc` cookie (`browser`, made if the browser has none). A sign-in keeps
   * the application's code_challenge for its login code; a link keeps the session that asked, and
   * needs a verified address (a stranger who registered someone else's address must not leave a
   * provider identity behind that survives the owner's password reset). Answers where to send the
   * browser: the provider, or back with `error=provider_unavailable`.
   */
  async start(name: string, request: StartRequest, browser: string | undefined, link?: Principal): Promise<{ location: string; browser: string }> {
    const provider = this.provider(name)
    const target = this.allowedRedirect(request.redirectTo)
    const challenge = link ? null : this.challengeOf(request)
    const linking = link ? await users.findById(this.db, link.userId) : null
    if (link) {
      if (!linking) throw new AppError('INVALID_TOKEN')
      if (linking.email_verified_at === null) throw new AppError('EMAIL_NOT_VERIFIED')
    }
    const cookie = browser && /^[A-Za-z0-9_-]{43}$/.test(browser) ? browser : randomBytes(32).toString('base64url')
    if (!provider.client) return { location: withParams(target, { error: 'provider_unavailable' }), browser: cookie }
    const oidc = await openidClient()
    const state = oidc.randomState()
    const nonce = oidc.randomNonce()
    const verifier = oidc.randomPKCECodeVerifier()
    const now = this.deps.clock.now()
    const stateHash = this.mac('oidc_state', state)
    await flows.insert(this.db, {
      state_hash: stateHash,
      provider: name,
      browser_hash: this.mac('oidc_browser', cookie),
      nonce,
      code_verifier: this.deps.sealer.seal(verifier, `oidc_flow:${stateHash}`),
      redirect_to: target,
      purpose: link ? 'link' : 'login',
      user_id: link?.userId ?? null,
      code_challenge: challenge,
      session_id: link?.sessionId ?? null,
      // A link flow is a pending proof of its session and epoch (src/auth/pending-proofs.ts).
      credential_epoch: linking?.credential_epoch ?? 0,
      created_at: now,
      expires_at: now + FLOW_TTL_MS,
      used_at: null,
    })
    const url = oidc.buildAuthorizationUrl(provider.client, {
      redirect_uri: this.callbackUrl(name),
      scope: provider.config.scopes,
      state,
      nonce,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    })
    return { location: url.toString(), browser: cookie }
  }

  /**
   * The provider sends the browser back here. Without a live flow of this provider started by this
   * browser there is no trusted redirect_to: the caller answers an HTML page and redirects nowhere.
   * Otherwise the browser goes back to redirect_to with `code` (a one-time login code), `linked`,
   * or `error`.
   */
  async callback(name: string, query: Record<string, string | undefined>, rawQuery: string, browser: string | undefined, context: RequestContext): Promise<CallbackOutcome> {
    const provider = this.provider(name)
    const state = query.state
    const flow = state && browser ? await flows.consume(this.db, this.mac('oidc_state', state), name, this.mac('oidc_browser', browser), this.deps.clock.now()) : null
    if (!flow) {
      await recordEvent(this.db, this.deps.clock, { type: 'oidc.refused', reason: `${name}: unknown_flow`, context })
      return { refused: 'unknown_flow' }
    }
    try {
      const claims = await this.exchangeCode(provider, flow, rawQuery, query)
      if (flow.purpose === 'link') {
        await this.link(provider, flow, claims, context)
        return { redirect: withParams(flow.redirect_to, { linked: name }) }
      }
      const user = await this.signInUser(provider, claims, context)
      // The epoch the account was chosen under: a reset, logout-all or disable after this moves it,
      // and the code can then open no session. Whoever started the flow, and only they, can
      // exchange it (login CSRF): by the application's verifier when it sent a challenge, else by
      // this browser's cookie.
      const code = await this.deps.loginCodes.issue(this.db, {
        userId: user.id,
        source: `oidc:${name}`,
        credentialEpoch: user.credential_epoch,
        binding: flow.code_challenge !== null ? { codeChallenge: flow.code_challenge } : { browserHash: flow.browser_hash },
      })
      return { redirect: withParams(flow.redirect_to, { code }) }
    } catch (error) {
      const refusal = error instanceof CallbackRefused ? error : new CallbackRefused('server_error')
      if (!(error instanceof CallbackRefused)) this.deps.logger.error({ err: { message: (error as Error).message }, provider: name }, 'identity provider callback failed')
      if (refusal.detail) this.deps.logger.warn({ provider: name, reason: refusal.reason, detail: refusal.detail }, 'identity provider sign-in refused')
      await recordEvent(this.db, this.deps.clock, { type: 'oidc.refused', userId: flow.user_id, reason: `${name}: ${refusal.reason}`, context })
      return { redirect: withParams(flow.redirect_to, { error: refusal.reason }) }
    }
  }

  /**
   * The authorization code for tokens (PKCE, state, nonce, ID token checks by openid-client), then
   * the ID token's signature once more against the provider's JWKS: openid-client skips it for an
   * ID token that comes straight from the token endpoint, and Portcullis does not.
   */
  private async exchangeCode(provider: Provider, flow: FlowRow, rawQuery: string, query: Record<string, string | undefined>) {
    if (query.error) throw new CallbackRefused(query.error === 'access_denied' ? 'access_denied' : 'provider_error', `the provider answered ${query.error.slice(0, 64)}`)
    if (!query.code) throw new CallbackRefused('invalid_request', 'no code in the callback')
    const client = provider.client
    if (!client || !provider.jwks) throw new CallbackRefused('provider_unavailable')
    const oidc = await openidClient()
    const verifier = this.deps.sealer.open(flow.code_verifier, `oidc_flow:${flow.state_hash}`)
    const current = new URL(`${this.callbackUrl(provider.config.name)}?${rawQuery}`)
    let idToken: string
    try {
      const tokens = await oidc.authorizationCodeGrant(client, current, { pkceCodeVerifier: verifier, expectedState: query.state!, expectedNonce: flow.nonce, idTokenExpected: true })
      idToken = tokens.id_token!
    } catch (error) {
      throw new CallbackRefused('provider_error', (error as Error).message.slice(0, 200))
    }
    const metadata = client.serverMetadata()
    const algorithms = (metadata.id_token_signing_alg_values_supported ?? ['RS256']).filter((alg) => alg !== 'none')
    try {
      const { payload } = await jwtVerify(idToken, provider.jwks, { issuer: metadata.issuer, audience: provider.config.clientId, algorithms })
      if (payload.nonce !== flow.nonce) throw new Error('the nonce does not match')
      if (typeof payload.sub !== 'string' || payload.sub.length === 0 || payload.sub.length > 255) throw new Error('no usable sub')
      return {
        sub: payload.sub,
        email: typeof payload.email === 'string' ? payload.email : null,
        emailVerified: claimsVerified(payload.email_verified) || (provider.config.trustEmail && typeof payload.email === 'string' && payload.email_verified === undefined),
        name: typeof payload.name === 'string' ? payload.name : '',
      }
    } catch (error) {
      throw new CallbackRefused('provider_error', `ID token: ${(error as Error).message.slice(0, 200)}`)
    }
  }

  /**
   * Which account a provider sign-in is (docs/oidc.md, "Which account"): a linked identity's; else one with the same
   * address, linked only when the provider and the account both say the address is verified; else
   * a new account. An address the provider does not vouch for never creates or links anything.
   */
  private async signInUser(provider: Provider, claims: { sub: string; email: string | null; emailVerified: boolean; name: string }, context: RequestContext): Promise<UserRow> {
    const name = provider.config.name
    const now = this.deps.clock.now()
    const linked = await identities.find(this.db, name, claims.sub)
    if (linked) {
      const user = await users.findById(this.db, linked.user_id)
      if (!user) throw new CallbackRefused('server_error')
      this.assertUsable(user)
      await identities.touch(this.db, linked.id, now)
      return user
    }
    if (!claims.email || !claims.emailVerified) throw new CallbackRefused('email_not_verified')
    // The form every address is stored and compared in: a provider's NFD or upper-case spelling of
    // an account's address finds that account, rather than passing it by.
    const existing = await users.findByEmail(this.db, normaliseEmail(claims.email))
    if (existing) {
      // Both sides verified, or nothing: an account someone registered with this address but never
      // verified must not become reachable through the provider (pre-account takeover).
      if (existing.email_verified_at === null) throw new CallbackRefused('account_exists')
      this.assertUsable(existing)
      await this.db.transaction().execute(async (trx) => {
        await identities.insert(trx, { id: randomUUID(), user_id: existing.id, provider: name, subject: claims.sub, email: claims.email, created_at: now, last_used_at: now })
        await this.linked(trx, existing, provider, context)
      })
      this.deps.mailQueue.kick()
      return existing
    }
    try {
      return await this.deps.auth.registerFederated({ email: claims.email, fullName: claims.name }, context, async (trx, user) => {
        await identities.insert(trx, { id: randomUUID(), user_id: user.id, provider: name, subject: claims.sub, email: claims.email, created_at: now, last_used_at: now })
        await recordEvent(trx, this.deps.clock, { type: 'oidc.linked', userId: user.id, reason: name, context })
        await this.deps.events.emit(trx, 'user.identity_linked', user, { provider: name })
      })
    } catch (error) {
      if (error instanceof AppError && error.code === 'EMAIL_EXISTS') throw new CallbackRefused('account_exists')
      if (error instanceof AppError && error.code === 'VALIDATION_ERROR') throw new CallbackRefused('email_not_verified', 'the provider\'s address is not one this service accepts')
      throw error
    }
  }

  private assertUsable(user: UserRow): void {
    try {
      this.deps.sessions.assertMayOpen(user)
    } catch (error) {
      throw new CallbackRefused((error as AppError).code === 'ACCOUNT_DISABLED' ? 'account_disabled' : 'email_not_verified')
    }
  }

  /**
   * A signed-in user links a provider identity; one linked to someone else is account_exists. The
   * link completes only while the session that asked for it is live and the account's sessions
   * have not ended since (a stolen session revoked mid-flow, a password change, logout-all), and
   * only for a verified address; each checked under the account's row lock, which every event that
   * ends the account's sessions also takes, so none can slip in between the check and the link.
   */
  private async link(provider: Provider, flow: FlowRow, claims: { sub: string; email: string | null }, context: RequestContext): Promise<void> {
    const name = provider.config.name
    const userId = flow.user_id!
    const now = this.deps.clock.now()
    const added = await this.db.transaction().execute(async (trx) => {
      if (!(await users.lockRow(trx, userId))) throw new CallbackRefused('access_denied', 'the account is gone')
      if (!(await flows.linkStands(trx, flow.state_hash, now))) throw new CallbackRefused('access_denied', 'the session that started the link has ended')
      const user = await users.findById(trx, userId)
      if (!user) throw new CallbackRefused('access_denied', 'the account is gone')
      if (user.email_verified_at === null) throw new CallbackRefused('email_not_verified')
      const linked = await identities.find(trx, name, claims.sub)
      if (linked) {
        if (linked.user_id !== userId) throw new CallbackRefused('account_exists')
        return false
      }
      await identities.insert(trx, { id: randomUUID(), user_id: userId, provider: name, subject: claims.sub, email: claims.email, created_at: now, last_used_at: null })
      await this.linked(trx, user, provider, context)
      return true
    })
    if (added) this.deps.mailQueue.kick()
  }

  /** A new link is never silent: the audit event, and a mail to the user naming the provider (docs/SECURITY.md: no link is silent). */
  private async linked(trx: Db['kysely'], user: UserRow, provider: Provider, context: RequestContext): Promise<void> {
    await recordEvent(trx, this.deps.clock, { type: 'oidc.linked', userId: user.id, reason: provider.config.name, context })
    await this.deps.events.emit(trx, 'user.identity_linked', user, { provider: provider.config.name })
    await this.deps.mailQueue.enqueue(trx, { userId: user.id, kind: 'security_notice', message: identityLinkedMail(this.deps.brand, user.email, provider.config.label) })
  }

  /**
   * The login code for a session: single-use, 60 seconds, and only with the proof its start asked
   * for (the verifier of its code_challenge, else the starting browser's cookie): a code someone
   * else's sign-in produced, planted in this browser, opens nothing (login CSRF). The code is spent
   * before the proof is judged, so a wrong proof kills it. The session opens only under the epoch
   * the callback chose the account at. An account with a second factor gets MFA_REQUIRED exactly
   * as after a password, the provider counting as the first step.
   */
  async exchange(request: ExchangeRequest, transport: 'body' | 'cookie', context: RequestContext): Promise<LoginBody> {
    const redeemed = await this.deps.loginCodes.redeem(this.db, {
      code: request.code,
      codeVerifier: request.codeVerifier,
      browserHash: request.browser === undefined ? null : this.mac('oidc_browser', request.browser),
    })
    if (!redeemed) throw new AppError('INVALID_CREDENTIALS')
    // Each exchange takes only the codes of its own sign-in: one from an e-mailed link opened here
    // would open a session that claims a provider (`amr: fed`) no provider vouched for.
    if (!('refused' in redeemed) && !redeemed.source.startsWith('oidc:')) throw new AppError('INVALID_CREDENTIALS')
    if ('refused' in redeemed) {
      await recordEvent(this.db, this.deps.clock, { type: 'oidc.refused', userId: redeemed.refused.user_id, reason: `${redeemed.refused.source.replace(/^oidc:/, '')}: login_code_proof`, context })
      throw new AppError('INVALID_CREDENTIALS')
    }
    const used = redeemed
    const user = await users.findById(this.db, used.user_id)
    // Its sessions ended after the callback (or while it ran): the code died with them.
    if (!user || user.credential_epoch !== used.credential_epoch) throw new AppError('INVALID_CREDENTIALS')
    this.deps.sessions.assertMayOpen(user)
    const subject = { id: user.id, credential_epoch: used.credential_epoch }
    const methods = await this.deps.secondFactor.requiredMethods(user.id)
    if (methods) throw await this.deps.secondFactor.challenge(subject, methods, FEDERATED, transport, context)
    return this.deps.sessions.open(subject, FEDERATED, context, { audit: { type: 'login.succeeded', reason: used.source } })
  }

  /** Removes every identity linked to an account, in the caller's transaction (the e-mailed sign-in's first proof of an address). */
  async unlinkAllFor(trx: Db['kysely'], userId: string): Promise<void> {
    await identities.deleteAllOf(trx, userId)
  }

  /** Whether the account has a linked identity, read in the caller's transaction (a way in, for LAST_SIGN_IN_METHOD). */
  async hasIdentity(trx: Db['kysely'], userId: string): Promise<boolean> {
    return identities.existsFor(trx, userId)
  }

  async list(userId: string) {
    return { identities: (await identities.listOf(this.db, userId)).map(view) }
  }

  /**
   * Unlinks, unless it would leave the account with no password, passkey or other identity. The
   * ways in are counted under the account's row lock (taken first, before any read), so two
   * unlinks at once, or an unlink and a passkey removal (which takes the same lock), are judged one
   * after the other and cannot each leave the other as the last way in and then remove it too.
   */
  async unlink(principal: Principal, id: string, context: RequestContext) {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
    const removed = await this.db.transaction().execute(async (trx) => {
      if (!(await users.lockRow(trx, principal.userId))) throw new AppError('INVALID_TOKEN')
      const user = await users.findById(trx, principal.userId)
      if (!user) throw new AppError('INVALID_TOKEN')
      const linked = await identities.listOf(trx, user.id)
      const own = linked.find((row) => row.id === id)
      if (!own) throw new AppError('NOT_FOUND')
      if (user.password_hash === NO_PASSWORD && linked.length === 1 && !(await this.deps.hasPasskey(user.id, trx))) throw new AppError('LAST_SIGN_IN_METHOD')
      if (!(await identities.delete(trx, user.id, own.id))) throw new AppError('NOT_FOUND')
      await recordEvent(trx, this.deps.clock, { type: 'oidc.unlinked', userId: user.id, reason: own.provider, context })
      await this.deps.events.emit(trx, 'user.identity_unlinked', user, { provider: own.provider })
      return own
    })
    return { id: removed.id, deleted: true as const }
  }
}

/** The URL with these query parameters added (replacing any of the same name). */
function withParams(url: string, params: Record<string, string>): string {
  const target = new URL(url)
  for (const [key, value] of Object.entries(params)) target.searchParams.set(key, value)
  return target.toString()
}

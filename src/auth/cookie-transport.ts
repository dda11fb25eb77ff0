import type { FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import Type from 'typebox'
import { AppError } from '../errors.ts'
import { REFRESH_TTL_SECONDS } from './tokens.ts'
import { cookieValues } from '../http/request.ts'

/**
 * Browser sessions (docs/SECURITY.md, "Browser sessions (cookie mode)"): with `X-Token-Transport: cookie` the refresh token
 * travels in an HttpOnly cookie that script cannot read, and never in a body.
 */
export const TOKEN_TRANSPORT_HEADER = 'x-token-transport'

/** The header as a request schema: documents it in OpenAPI, and any other value is a VALIDATION_ERROR. */
export const TransportHeaders = Type.Object({
  [TOKEN_TRANSPORT_HEADER]: Type.Optional(Type.Literal('cookie', { description: 'Browser session: the refresh token travels in an HttpOnly cookie' })),
})

export interface CookieTransportOptions {
  basePath: string
  /** Production, or a development server reached over https. */
  secure: boolean
  /** PUBLIC_URL's origin and CORS_ORIGINS. */
  allowedOrigins: string[]
  /** Whether a refresh token still names a live session (signed here, not revoked, not expired). */
  sessionIsLive: (refreshToken: string) => Promise<boolean>
}

export class CookieTransport {
  readonly name: string
  readonly path: string
  private readonly secure: boolean
  private readonly allowedOrigins: Set<string>
  private readonly sessionIsLive: (refreshToken: string) => Promise<boolean>

  constructor(options: CookieTransportOptions) {
    this.secure = options.secure
    // The __Secure- prefix makes a browser refuse the cookie unless it is Secure and came over https.
    this.name = options.secure ? '__Secure-portcullis_refresh' : 'portcullis_refresh'
    // Sent only to the auth routes, never to watchlists or an application's other paths.
    this.path = `${options.basePath}/auth`
    this.allowedOrigins = new Set(options.allowedOrigins)
    this.sessionIsLive = options.sessionIsLive
  }

  /** The exact paths that use the cookie: the only ones CORS answers with credentials. */
  routes(): string[] {
    return ['/login', '/refresh', '/logout', '/mfa/verify', '/passkeys/login', '/oidc/exchange'].map((route) => this.path + route)
  }

  /** A cookie without the header is ignored: only a request that opted in uses it. */
  requested(request: FastifyRequest): boolean {
    return request.headers[TOKEN_TRANSPORT_HEADER] === 'cookie'
  }

  /**
   * The header is the CSRF defence (a cross-site form cannot send it, and a cross-origin script
   * needs a preflight only CORS_ORIGINS pass); a browser's Origin is checked as well, so a page of
   * a foreign origin is refused even where CORS is misconfigured. Programs send no Origin.
   */
  assertOriginAllowed(request: FastifyRequest): void {
    const origin = request.headers.origin
    if (origin !== undefined && !this.allowedOrigins.has(origin)) throw new AppError('ORIGIN_NOT_ALLOWED')
  }

  /**
   * The refresh token in the request's cookie, or null. More than one cookie of the name is
   * refused: a sibling subdomain can plant its own (Domain=the parent, a longer Path, so browsers
   * send it first) to sign the browser into the planter's account or to shadow the real session
   * (cookie tossing). Which of the two is ours cannot be told from the header, so neither is used.
   */
  read(request: FastifyRequest): string | null {
    const values = this.values(request)
    if (values.length > 1) throw new AppError('INVALID_REFRESH_TOKEN')
    return values[0] || null
  }

  /** Every value the Cookie header carries under this transport's name, in the order sent. */
  private values(request: FastifyRequest): string[] {
    return cookieValues(request, this.name)
  }

  /**
   * A sign-in route's whole answer: the transport the request asks for (its origin checked first
   * for cookie mode, before any credential is), the sign-in run with it, and the login body
   * answered as that transport wants it.
   */
  async signIn<T extends { refresh_token: string }>(request: FastifyRequest, reply: FastifyReply, run: (transport: 'body' | 'cookie') => Promise<T>): Promise<T | Omit<T, 'refresh_token'>> {
    const cookieMode = this.requested(request)
    if (cookieMode) this.assertOriginAllowed(request)
    return this.answerLogin(request, reply, await run(cookieMode ? 'cookie' : 'body'), cookieMode)
  }

  /**
   * The login body, as every sign-in answers it: the usual body (README.md, Endpoints), or with the cookie transport the
   * same less the refresh token, which goes into the cookie (from an allowed origin only).
   */
  answerLogin<T extends { refresh_token: string }>(request: FastifyRequest, reply: FastifyReply, tokens: T, cookieMode: boolean): T | Omit<T, 'refresh_token'> {
    if (!cookieMode) return tokens
    this.assertOriginAllowed(request)
    const { refresh_token: refreshToken, ...rest } = tokens
    this.set(reply, refreshToken, REFRESH_TTL_SECONDS)
    return rest
  }

  set(reply: FastifyReply, refreshToken: string, maxAgeSeconds: number): void {
    reply.header('set-cookie', this.serialise(refreshToken, maxAgeSeconds))
  }

  clear(reply: FastifyReply): void {
    reply.header('set-cookie', this.serialise('', 0))
  }

  /**
   * For the routes that can revoke the caller's own session (logout-all, a session revoke, account
   * deletion, password reset and change): once the route has run, a refresh cookie whose session
   * is no longer live is cleared, so "log out everywhere" leaves no dead cookie behind (docs/SECURITY.md, cookie mode:
   * every revocation of that session clears the cookie). It needs no X-Token-Transport header:
   * the cookie is not used as a credential here, and removing a dead one is always safe. A cookie
   * whose session lives on (change-password keeps the caller's) is left alone.
   */
  readonly clearWhenDead: onSendHookHandler = async (request, reply, payload) => {
    // With a tossed cookie beside ours, clearing ours would leave the planted one alone to be used.
    const [token, ...more] = this.values(request)
    if (token && more.length === 0 && !(await this.sessionIsLive(token))) this.clear(reply)
    return payload
  }

  private serialise(value: string, maxAgeSeconds: number): string {
    const attributes = [`${this.name}=${value}`, `Max-Age=${maxAgeSeconds}`, `Path=${this.path}`, 'HttpOnly', 'SameSite=Strict']
    if (this.secure) attributes.push('Secure')
    return attributes.join('; ')
  }
}

/**
 * Cookie-mode routes may have no body at all (clients may send the JSON content type
 * with an empty one); the schema then sees an empty object, and the handler decides.
 */
export async function emptyBodyAsObject(request: FastifyRequest): Promise<void> {
  if (request.body === undefined) request.body = {}
}

/**
 * Where the refresh token of this request is: the cookie when the request opted in (from an
 * allowed origin, and then never the body), otherwise the body, where it is required.
 */
export function refreshTokenOf(request: FastifyRequest, body: { refresh_token?: string | undefined }, cookies: CookieTransport): string | null {
  if (cookies.requested(request)) {
    cookies.assertOriginAllowed(request)
    if (body.refresh_token !== undefined) {
      throw new AppError('VALIDATION_ERROR', { details: [{ field: 'refresh_token', message: 'must not be sent in the body with X-Token-Transport: cookie' }] })
    }
    return cookies.read(request)
  }
  const token = body.refresh_token
  if (token === undefined) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'refresh_token', message: 'is required' }] })
  return token
}

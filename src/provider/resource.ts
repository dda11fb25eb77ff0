import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { compactVerify } from 'jose'
import { SIGNING_ALG, type KeyStore } from '../auth/keys.ts'
import type { AccountState, SessionGate } from '../auth/revocation.ts'
import type { AuthService, Principal } from '../auth/service.ts'
import type { SessionOpener } from '../auth/sessions.ts'
import { CLIENT_ID, CLOCK_SKEW_SECONDS } from '../auth/tokens.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import { isUuid } from '../text.ts'
import { RESOURCE_SCOPES } from './configuration.ts'
import { records } from './store.ts'
import { setBounded } from '../bounded-map.ts'

const utf8 = new TextDecoder()
const MAX_TOKEN_LENGTH = 4096
const CACHE_SIZE = 10_000

/** What a verified OpenID provider access token says (RFC 9068). */
interface AccessClaims {
  sub: string
  clientId: string
  scopes: ReadonlySet<string>
  /** The grant's reference (its keyed hash): the token lives only as long as the grant. */
  gid: string
  exp: number
  kid: string
  /** The user's claims version its roles and permissions were current for (0 when it says none). */
  cv: number
  /** The user's global permissions, as the token claims them. */
  permissions?: readonly string[]
}

export interface ResourceDeps {
  db: Db
  keys: KeyStore
  gate: SessionGate
  clock: Clock
  sessions: Pick<SessionOpener, 'assertMayOpen'>
  /** The provider's issuer, and this API's identifier (its tokens' audience). */
  issuer: string
  resource: string
}

/** The claims of a JWT without checking anything: only to tell which verifier it is for. */
function peekClientId(token: string): string | null {
  const first = token.indexOf('.')
  const second = token.indexOf('.', first + 1)
  if (first < 0 || second < 0) return null
  try {
    const claims = JSON.parse(Buffer.from(token.slice(first + 1, second), 'base64url').toString('utf8')) as { client_id?: unknown }
    return typeof claims.client_id === 'string' ? claims.client_id : null
  } catch {
    return null
  }
}

/**
 * The watchlists API as an OAuth resource server (docs/provider.md): it accepts Portcullis's
 * own access tokens and the JWT access tokens (RFC 9068) the OpenID provider issues for this API,
 * which carry the scopes the person approved. Those are checked like the own tokens (signature
 * with the same key set, type, issuer, audience, expiry), then their grant and account through the
 * session gate, so a revoked grant, logout-all, a disable or a deletion stops them within the
 * revocation feed's bound. They never work anywhere else: /auth/* refuses any token whose
 * client_id is not Portcullis's own (src/auth/tokens.ts), /admin/* takes API keys only.
 */
export class ResourceTokens {
  private readonly verified = new Map<string, AccessClaims>()

  constructor(private readonly deps: ResourceDeps) {}

  /**
   * The caller from memory alone, without a promise, or undefined when anything must be read (the
   * bearer path of nearly every request, as AuthService.authenticateFromMemory is for the own
   * tokens). The two memories never share a token: TokenService refuses any other client_id, and
   * this one any token of Portcullis's own client, so no peek at the claims is needed here.
   */
  authenticateFromMemory(token: string, auth: Pick<AuthService, 'authenticateFromMemory'>): Principal | undefined {
    const own = auth.authenticateFromMemory(token)
    if (own) return own
    const claims = this.remembered(token)
    if (!claims) return undefined
    const state = this.deps.gate.knownGrant(claims.gid, claims.sub)
    return state === undefined ? undefined : this.principalOf(claims, state)
  }

  /** The caller of a resource route: a Portcullis token (every scope) or a provider token (its scopes). */
  authenticate(token: string, auth: Pick<AuthService, 'authenticate'>): Promise<Principal> {
    const clientId = peekClientId(token)
    if (clientId === null || clientId === CLIENT_ID) return auth.authenticate(token)
    return this.authenticateGranted(token)
  }

  private async authenticateGranted(token: string): Promise<Principal> {
    const claims = await this.verify(token)
    if (!claims) throw new AppError('INVALID_TOKEN')
    return this.principalOf(claims, await this.deps.gate.checkGrant(claims.gid, claims.sub, () => records.grantOwner(this.deps.db.kysely, claims.gid, this.deps.clock.now())))
  }

  /** A live provider token's caller, once its grant's and account's state is known (null: the grant ended). */
  private principalOf(claims: AccessClaims, state: AccountState | null): Principal {
    if (!state) throw new AppError('INVALID_TOKEN')
    this.deps.sessions.assertMayOpen(state)
    // The same rule as Portcullis's own tokens (src/auth/service.ts): claims made before the user's
    // roles, memberships or app_metadata last changed are out of date; the client refreshes.
    if (claims.cv < state.claims_version) throw new AppError('TOKEN_EXPIRED')
    const principal: Principal = { userId: claims.sub, sessionId: '', scopes: claims.scopes }
    if (claims.permissions) principal.permissions = claims.permissions
    return principal
  }

  /**
   * RFC 7662 for a JWT access token, which is never stored: what its signature, expiry, grant and
   * account say now; null when it is not active.
   */
  async introspect(token: string): Promise<{ clientId: string; sub: string; scope: string; exp: unknown; iat: unknown; jti: unknown; aud: unknown; acr?: unknown; auth_time?: unknown } | null> {
    const claims = await this.verify(token)
    if (!claims) return null
    // Read from the database, not the gate: a client asking is told of a revocation made a moment ago.
    if ((await records.grantOwner(this.deps.db.kysely, claims.gid, this.deps.clock.now())) !== claims.sub) return null
    const state = await users.findState(this.deps.db.kysely, claims.sub)
    if (!state || state.status !== 'active') return null
    const raw = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>
    return {
      clientId: claims.clientId,
      sub: claims.sub,
      scope: [...claims.scopes].join(' '),
      exp: raw.exp,
      iat: raw.iat,
      jti: raw.jti,
      aud: raw.aud,
      ...(raw.acr ? { acr: raw.acr } : {}),
      ...(raw.auth_time ? { auth_time: raw.auth_time } : {}),
    }
  }

  /** A token verified before and valid still (expiry and key checked against now), or null. */
  private remembered(token: string): AccessClaims | null {
    const hit = this.verified.get(token)
    if (!hit) return null
    if (this.deps.clock.now() / 1000 < hit.exp + CLOCK_SKEW_SECONDS && this.deps.keys.isLiveKid(hit.kid)) return hit
    this.verified.delete(token)
    return null
  }

  private async verify(token: string): Promise<AccessClaims | null> {
    const hit = this.remembered(token)
    if (hit) return hit
    const claims = await this.verifyFully(token, this.deps.clock.now() / 1000)
    if (claims) {
      setBounded(this.verified, token, claims, CACHE_SIZE)
    }
    return claims
  }

  private async verifyFully(token: string, now: number): Promise<AccessClaims | null> {
    if (token.length > MAX_TOKEN_LENGTH) return null
    let kid: string | undefined
    let payload: Record<string, unknown>
    try {
      const result = await compactVerify(
        token,
        async (header) => {
          kid = header.kid
          const key = typeof kid === 'string' && kid.length > 0 && kid.length <= 128 ? await this.deps.keys.verificationKey(kid) : null
          if (!key) throw new Error('unknown kid')
          return key
        },
        { algorithms: [SIGNING_ALG] },
      )
      if (result.protectedHeader.typ !== 'at+jwt') return null
      payload = JSON.parse(utf8.decode(result.payload)) as Record<string, unknown>
    } catch {
      return null
    }
    const { iss, aud, sub, client_id: clientId, scope, gid, exp, iat, cv = 0, permissions } = payload
    const ok =
      iss === this.deps.issuer &&
      (aud === this.deps.resource || (Array.isArray(aud) && aud.includes(this.deps.resource))) &&
      typeof sub === 'string' && isUuid(sub) &&
      typeof clientId === 'string' && clientId !== CLIENT_ID &&
      typeof gid === 'string' && gid.length > 0 &&
      typeof exp === 'number' && typeof iat === 'number' &&
      iat <= now + CLOCK_SKEW_SECONDS && now < exp + CLOCK_SKEW_SECONDS &&
      Number.isSafeInteger(cv) &&
      (permissions === undefined || (Array.isArray(permissions) && permissions.every((item) => typeof item === 'string')))
    if (!ok) return null
    const claims: AccessClaims = { sub, clientId, gid, exp, kid: kid!, cv: cv as number, scopes: new Set(typeof scope === 'string' ? scope.split(' ') : []) }
    if (permissions !== undefined) claims.permissions = permissions as string[]
    return claims
  }
}

/** The protected resource metadata's URL (RFC 9728 section 3.1: the resource's path after the well-known one). */
export function resourceMetadataUrl(publicUrl: string, basePath: string): string {
  return `${new URL(publicUrl).origin}/.well-known/oauth-protected-resource${basePath}`
}

/**
 * A route-level hook: a provider token must carry `scope` (RFC 6750's insufficient_scope), and a
 * Portcullis token always may. Runs after the bearer check.
 */
export function requireScope(scope: (typeof RESOURCE_SCOPES)[number], metadataUrl: string) {
  // A callback rather than a promise: it waits for nothing and runs on every resource request.
  return (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) => {
    const scopes = request.principal?.scopes
    if (scopes && !scopes.has(scope)) {
      throw new AppError('INSUFFICIENT_SCOPE', {
        headers: { 'www-authenticate': `Bearer realm="portcullis", error="insufficient_scope", scope="${scope}", resource_metadata="${metadataUrl}"` },
      })
    }
    done()
  }
}

/**
 * The API's 401s name its protected resource metadata (RFC 9728 section 5.1), so a client that
 * holds no token (an MCP client, say) finds the authorization server by itself.
 */
export function advertiseResourceMetadata(scope: FastifyInstance, metadataUrl: string): void {
  scope.addHook('onSend', (_request, reply, _payload, done) => {
    if (reply.statusCode === 401) {
      const challenge = reply.getHeader('www-authenticate')
      if (typeof challenge === 'string' && challenge.startsWith('Bearer') && !challenge.includes('resource_metadata=')) {
        reply.header('www-authenticate', `${challenge}, resource_metadata="${metadataUrl}"`)
      }
    }
    done()
  })
}

/** The metadata document itself (RFC 9728 section 2). */
export function resourceMetadata(resource: string, issuer: string) {
  return {
    resource,
    authorization_servers: [issuer],
    scopes_supported: [...RESOURCE_SCOPES],
    bearer_methods_supported: ['header'],
    resource_name: 'Portcullis API',
  }
}

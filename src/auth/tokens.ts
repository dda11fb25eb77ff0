import { randomUUID, sign as cryptoSign, type KeyObject } from 'node:crypto'
import { compactVerify, type JWSHeaderParameters } from 'jose'
import type { Clock } from '../clock.ts'
import type { TokenAuthz } from '../authz/claims.ts'
import { AppError } from '../errors.ts'
import { isUuid } from '../text.ts'
import { SIGNING_ALG, type KeyStore } from './keys.ts'
import { setBounded } from '../bounded-map.ts'

export const ACCESS_TTL_SECONDS = 900
export const REFRESH_TTL_SECONDS = 7 * 24 * 3600
export const CLOCK_SKEW_SECONDS = 30

/** Header `typ` values; each token type verifies only as itself. */
const TYP = { access: 'at+jwt', refresh: 'rt+jwt' } as const
export type TokenKind = keyof typeof TYP

/** The first-party client every token is issued to (RFC 9068 requires client_id). */
export const CLIENT_ID = 'portcullis'

const MAX_TOKEN_LENGTH = 4096
const utf8 = new TextDecoder()
const MAX_KID_LENGTH = 128

/**
 * How the session behind an access token was authenticated (docs/tokens.md): RFC 8176 `amr`,
 * `acr` (`aal1` or `aal2`) and when it was last verified (ms; the claim `auth_time` is seconds).
 * A resource server can demand `acr: "aal2"` with nothing but the JWKS.
 */
export interface Assurance {
  amr: string[]
  acr: 'aal1' | 'aal2'
  authTime: number
}

export interface TokenClaims {
  sub: string
  sid: string
  jti: string
  iat: number
  exp: number
  /** The user's claims version the token's authorisation claims were current for (0 before there were any). */
  cv: number
  /** The active organisation and the user's permissions in it, when the token has one. */
  org?: { id: string; permissions: readonly string[] }
  /** The user's global permissions (the union of their roles'). */
  permissions?: readonly string[]
}

export type VerifyResult =
  | { status: 'valid'; claims: TokenClaims }
  /** Genuine and well-formed, but past `exp` (plus skew). The caller still checks the session first. */
  | { status: 'expired'; claims: TokenClaims }
  | { status: 'invalid' }

export interface TokenServiceOptions {
  issuer: string
  audience: string
  clock: Clock
  /** How many verified tokens to remember (default 10,000, about 10 MB at most). */
  cacheSize?: number
}

interface CachedVerification {
  /** What the token was verified as: a hit for the other kind is no hit. */
  kind: TokenKind
  claims: TokenClaims
  kid: string
  /** The later of iat and nbf: a clock moved back must still see a token "from the future". */
  notBefore: number
}

/**
 * Tokens already verified, by the whole token string, so a token presented again skips the
 * signature check and claim parsing: an access token on every request, a refresh token at every
 * refresh (a client presents the same one every 15 minutes for a week). A hit is re-checked
 * against the clock and the key set (dropped at exp, or once its key is retired or removed) and
 * must be of the kind asked for; the session (gate or database) and the account state are
 * checked by the caller on every use, cached or not. Oldest entries go first when full.
 */
class VerifiedTokens {
  private readonly entries = new Map<string, CachedVerification>()

  constructor(private readonly max: number) {}

  get(token: string): CachedVerification | undefined {
    return this.entries.get(token)
  }

  set(token: string, entry: CachedVerification): void {
    setBounded(this.entries, token, entry, this.max)
  }

  delete(token: string): void {
    this.entries.delete(token)
  }

  get size(): number {
    return this.entries.size
  }
}

/**
 * A JWS in compact form (RFC 7515 section 7.1) signed with Ed25519 by node:crypto: header and
 * claims as base64url JSON, then the signature over "header.claims". jose's signing goes through
 * WebCrypto's asynchronous sign, about 140 us a token here against 50 us for this; verification
 * stays with jose (compactVerify), which pins the algorithm and checks every claim. The signature
 * is made on libuv's pool (node:crypto's callback form), off the event loop: it is the largest
 * single cost of a refresh, and there it overlaps with the next request instead of delaying it.
 */
function signCompact(header: object, claims: object, key: KeyObject): Promise<string> {
  const input = `${Buffer.from(JSON.stringify(header)).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
  return new Promise((resolve, reject) =>
    cryptoSign(null, Buffer.from(input), key, (error, signature) => (error ? reject(error) : resolve(`${input}.${signature.toString('base64url')}`))),
  )
}

export class TokenService {
  private readonly verified: VerifiedTokens

  constructor(
    private readonly keys: KeyStore,
    private readonly options: TokenServiceOptions,
  ) {
    this.verified = new VerifiedTokens(options.cacheSize ?? 10_000)
  }

  /** How many verified tokens are remembered (for tests and metrics). */
  cachedTokens(): number {
    return this.verified.size
  }

  private async sign(kind: TokenKind, subject: string, sessionId: string, ttl: number, extra: Record<string, unknown>) {
    const iat = Math.floor(this.options.clock.now() / 1000)
    const { kid, signer } = this.keys.signingKey()
    const header = { alg: SIGNING_ALG, kid, typ: TYP[kind] }
    const claims = { sid: sessionId, ...extra, iss: this.options.issuer, sub: subject, jti: randomUUID(), iat, exp: iat + ttl }
    const token = await signCompact(header, claims, signer)
    // The writes that grow the claims keep them within MAX_CLAIMS_BYTES; this is the last guard,
    // so that no token is ever handed out that its own verifier would refuse.
    if (token.length > MAX_TOKEN_LENGTH) throw new AppError('LIMIT_EXCEEDED', { message: 'The roles and app_metadata of this user are too large to fit in a token.' })
    return { token, expiresAt: (iat + ttl) * 1000 }
  }

  /** `authz`: what the user may do (src/authz/claims.ts), and the claims version it is current for (`cv`). */
  signAccess(userId: string, sessionId: string, assurance: Assurance, authz: TokenAuthz) {
    return this.sign('access', userId, sessionId, ACCESS_TTL_SECONDS, {
      aud: this.options.audience,
      client_id: CLIENT_ID,
      amr: assurance.amr,
      acr: assurance.acr,
      auth_time: Math.floor(assurance.authTime / 1000),
      ...authz.claims,
      cv: authz.version,
    })
  }

  /** The refresh token's audience is this service itself: it is never meant for a resource server. */
  signRefresh(userId: string, sessionId: string) {
    return this.sign('refresh', userId, sessionId, REFRESH_TTL_SECONDS, { aud: this.options.issuer })
  }

  /**
   * A token of this kind verified before and valid still (its expiry and key checked against now),
   * without a promise; null when only the full check can say.
   */
  remembered(token: string, kind: TokenKind): TokenClaims | null {
    const hit = this.verified.get(token)
    if (!hit || hit.kind !== kind) return null
    const now = this.options.clock.now() / 1000
    const fresh = now < hit.claims.exp + CLOCK_SKEW_SECONDS && hit.notBefore <= now + CLOCK_SKEW_SECONDS
    if (fresh && this.keys.isLiveKid(hit.kid)) return hit.claims
    // Expired, or its key left the key set: the full check gives the answer.
    this.verified.delete(token)
    return null
  }

  /**
   * Signature, algorithm, type, issuer, audience and claim shapes are all checked before `exp`,
   * so "expired" is only ever said of a token this service really issued.
   */
  async verify(token: string, kind: TokenKind): Promise<VerifyResult> {
    const claims = this.remembered(token, kind)
    if (claims) return { status: 'valid', claims }
    const result = await this.verifyFully(token, kind)
    if (result.status === 'valid') this.verified.set(token, result.cached)
    return result.status === 'valid' ? { status: 'valid', claims: result.claims } : result
  }

  private async verifyFully(token: string, kind: TokenKind): Promise<Exclude<VerifyResult, { status: 'valid' }> | { status: 'valid'; claims: TokenClaims; cached: CachedVerification }> {
    if (token.length > MAX_TOKEN_LENGTH || token.split('.').length !== 3) return { status: 'invalid' }
    let header: JWSHeaderParameters
    let payloadBytes: Uint8Array
    try {
      const result = await compactVerify(
        token,
        async (protectedHeader) => {
          const kid = protectedHeader.kid
          // The kid only ever indexes an in-memory map; it never reaches a path, query or shell.
          if (typeof kid !== 'string' || kid.length === 0 || kid.length > MAX_KID_LENGTH) throw new Error('bad kid')
          const key = await this.keys.verificationKey(kid)
          if (!key) throw new Error('unknown kid')
          return key
        },
        // Pinned: "none", HS256 with the public key as secret and every other algorithm are refused.
        { algorithms: [SIGNING_ALG] },
      )
      header = result.protectedHeader
      payloadBytes = result.payload
    } catch {
      return { status: 'invalid' }
    }
    if (header.typ !== TYP[kind]) return { status: 'invalid' }

    let payload: Record<string, unknown>
    try {
      const parsed: unknown = JSON.parse(utf8.decode(payloadBytes))
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { status: 'invalid' }
      payload = parsed as Record<string, unknown>
    } catch {
      return { status: 'invalid' }
    }

    const expectedAudience = kind === 'access' ? this.options.audience : this.options.issuer
    const { iss, aud, sub, sid, jti, iat, exp, nbf, client_id: clientId, cv = 0, org_id: orgId, org_permissions: orgPermissions, permissions } = payload
    const strings = (value: unknown) => value === undefined || (Array.isArray(value) && value.every((item) => typeof item === 'string'))
    const audienceOk = aud === expectedAudience || (Array.isArray(aud) && aud.includes(expectedAudience))
    const shapesOk =
      iss === this.options.issuer &&
      // An OpenID provider access token shares typ, iss and aud with these (src/provider/resource.ts):
      // only Portcullis's own client's tokens are Portcullis's tokens.
      (kind !== 'access' || clientId === CLIENT_ID) &&
      audienceOk &&
      typeof sub === 'string' && isUuid(sub) &&
      typeof sid === 'string' && isUuid(sid) &&
      typeof jti === 'string' && jti.length > 0 &&
      Number.isSafeInteger(iat) &&
      Number.isSafeInteger(exp) &&
      (nbf === undefined || Number.isSafeInteger(nbf)) &&
      Number.isSafeInteger(cv) &&
      (orgId === undefined || (typeof orgId === 'string' && isUuid(orgId))) &&
      strings(orgPermissions) &&
      strings(permissions)
    if (!shapesOk) return { status: 'invalid' }

    const now = this.options.clock.now() / 1000
    // A token from the future is not "not yet valid" here: it is forged or from a broken clock.
    if ((iat as number) > now + CLOCK_SKEW_SECONDS) return { status: 'invalid' }
    if (nbf !== undefined && (nbf as number) > now + CLOCK_SKEW_SECONDS) return { status: 'invalid' }
    if ((exp as number) <= (iat as number)) return { status: 'invalid' }

    const claims: TokenClaims = { sub: sub as string, sid: sid as string, jti: jti as string, iat: iat as number, exp: exp as number, cv: cv as number }
    if (typeof orgId === 'string') claims.org = { id: orgId, permissions: (orgPermissions as string[] | undefined) ?? [] }
    if (permissions !== undefined) claims.permissions = permissions as string[]
    if (now >= (exp as number) + CLOCK_SKEW_SECONDS) return { status: 'expired', claims }
    const notBefore = Math.max(iat as number, (nbf as number | undefined) ?? (iat as number))
    return { status: 'valid', claims, cached: { kind, claims, kid: header.kid!, notBefore } }
  }
}

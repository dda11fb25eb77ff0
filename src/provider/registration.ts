import { createHash, randomBytes } from 'node:crypto'
import type { RequestContext } from '../audit/events.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { AppError } from '../errors.ts'
import { cleanLabel } from '../text.ts'
import type { ClientRegistry } from './clients.ts'
import { DEFAULT_CLIENT_SCOPES, type RegisteredClient } from './schemas.ts'

export type RegistrationMode = 'off' | 'open' | 'token'

/** An OAuth error answer of the registration endpoint (RFC 7591 section 3.2.2). */
export class RegistrationError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    readonly description: string,
  ) {
    super(description)
  }
}

/** A dynamic client unused this long is removed (API.md). */
export const DYNAMIC_CLIENT_IDLE_MS = 30 * 24 * 3600_000
/** An initial access token's life unless the operator says otherwise. */
export const REGISTRATION_TOKEN_TTL_MS = 24 * 3600_000
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])
const MAX_REDIRECT_URIS = 10
const ALLOWED_GRANTS = new Set(['authorization_code', 'refresh_token'])

const hashToken = (token: string) => createHash('sha256').update(token).digest('base64url')

/** What a registration answers (RFC 7591 section 3.2.1): the client's metadata as registered, never a secret. */
export interface RegistrationResponse {
  client_id: string
  client_id_issued_at: number
  client_name: string
  redirect_uris: string[]
  grant_types: string[]
  response_types: ['code']
  token_endpoint_auth_method: 'none'
  scope: string
}

function invalidMetadata(description: string): RegistrationError {
  return new RegistrationError(400, 'invalid_client_metadata', description)
}

/**
 * Dynamic client registration (RFC 7591), for MCP clients too old for client ID metadata documents
 * (docs/provider.md, "Dynamic registration"). Off by default; `open` lets anyone register, `token`
 * asks for an initial access token an operator made (`portcullis clients registration-token`, each
 * good for one registration). Only public clients: no secret, PKCE, the code and refresh grants,
 * redirect URIs that are https or http on a loopback host. They are third-party (always asked for
 * consent), listed as `dynamic` in /admin/clients, and removed after 30 days unused. The route
 * limits registrations per IP (10 an hour by default).
 */
export class DynamicRegistration {
  private timer: NodeJS.Timeout | undefined

  constructor(private readonly deps: { db: Db; clock: Clock; clients: ClientRegistry; mode: RegistrationMode }) {}

  get enabled(): boolean {
    return this.deps.mode !== 'off'
  }

  async register(body: unknown, bearer: string | null, context: RequestContext): Promise<RegistrationResponse> {
    if (this.deps.mode === 'token') await this.spendToken(bearer)
    const request = this.check(body)
    let created: RegisteredClient
    try {
      created = (await this.deps.clients.create({ ...request, type: 'public', first_party: false, token_endpoint_auth_method: 'none', pkce_required: true }, context, { dynamic: true })).client
    } catch (error) {
      // The registry's own rules (src/provider/clients.ts) refuse what slipped through here.
      if (error instanceof AppError && error.code === 'VALIDATION_ERROR') {
        const details = (error.details ?? []).map((detail) => `${detail.field} ${detail.message}`).join('; ')
        throw new RegistrationError(400, details.startsWith('redirect_uris') ? 'invalid_redirect_uri' : 'invalid_client_metadata', details || error.message)
      }
      throw error
    }
    return {
      client_id: created.client_id,
      client_id_issued_at: Math.floor(Date.parse(created.created_at) / 1000),
      client_name: created.name,
      redirect_uris: created.redirect_uris,
      grant_types: created.grant_types,
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: created.scopes.join(' '),
    }
  }

  /** An initial access token for OP_REGISTRATION=token, shown once; only its hash is kept. */
  async createToken(ttlMs = REGISTRATION_TOKEN_TTL_MS): Promise<{ token: string; expiresAt: number }> {
    const token = `pcr_${randomBytes(24).toString('base64url')}`
    const now = this.deps.clock.now()
    await this.deps.db.kysely.insertInto('registration_tokens').values({ token_hash: hashToken(token), created_at: now, expires_at: now + ttlMs, used_at: null }).execute()
    return { token, expiresAt: now + ttlMs }
  }

  /** Uses the token up in one statement (two registrations racing with one token: one wins). */
  private async spendToken(bearer: string | null): Promise<void> {
    if (!bearer) throw new RegistrationError(401, 'invalid_token', 'an initial access token is required (Authorization: Bearer)')
    const now = this.deps.clock.now()
    const spent = await this.deps.db.kysely
      .updateTable('registration_tokens')
      .set({ used_at: now })
      .where('token_hash', '=', hashToken(bearer))
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .executeTakeFirst()
    if (spent.numUpdatedRows === 0n) throw new RegistrationError(401, 'invalid_token', 'the initial access token is unknown, used or expired')
  }

  /** The RFC 7591 request as a public client's registration; invalid_redirect_uri or invalid_client_metadata otherwise. */
  private check(body: unknown): { name: string; redirect_uris: string[]; grant_types: ('authorization_code' | 'refresh_token')[]; scopes: (typeof DEFAULT_CLIENT_SCOPES)[number][] } {
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw invalidMetadata('the body must be a JSON object')
    const input = body as Record<string, unknown>
    const method = input.token_endpoint_auth_method
    if (method !== undefined && method !== 'none') throw invalidMetadata('only public clients may register: token_endpoint_auth_method must be none')
    for (const field of ['jwks', 'jwks_uri', 'client_secret']) {
      if (input[field] !== undefined) throw invalidMetadata(`only public clients may register: ${field} is not accepted`)
    }
    const uris = input.redirect_uris
    if (!Array.isArray(uris) || uris.length === 0 || uris.length > MAX_REDIRECT_URIS || !uris.every((uri) => typeof uri === 'string')) {
      throw new RegistrationError(400, 'invalid_redirect_uri', `redirect_uris must list 1 to ${MAX_REDIRECT_URIS} URIs`)
    }
    for (const uri of uris as string[]) {
      const parsed = URL.parse(uri)
      const ok = parsed !== null && !uri.includes('#') && (parsed.protocol === 'https:' || (parsed.protocol === 'http:' && LOOPBACK_HOSTS.has(parsed.hostname)))
      if (!ok) throw new RegistrationError(400, 'invalid_redirect_uri', `${uri.slice(0, 200)} is neither https nor http on a loopback host (or has a fragment)`)
    }
    const grants = input.grant_types ?? ['authorization_code', 'refresh_token']
    if (!Array.isArray(grants) || !grants.every((grant) => typeof grant === 'string' && ALLOWED_GRANTS.has(grant)) || !grants.includes('authorization_code')) {
      throw invalidMetadata('grant_types may be authorization_code and refresh_token only, with authorization_code')
    }
    const responses = input.response_types
    if (responses !== undefined && (!Array.isArray(responses) || !responses.every((type) => type === 'code'))) throw invalidMetadata('response_types may be code only')
    let name = new URL((uris as string[])[0]!).host
    if (input.client_name !== undefined) {
      const label = typeof input.client_name === 'string' ? cleanLabel(input.client_name, 100) : { value: '', problem: 'must be a string' }
      if (label.problem) throw invalidMetadata(`client_name ${label.problem}`)
      name = label.value
    }
    // The scopes it may ask for: those asked that a third-party client may have, or all of them.
    const offered = new Set<string>(DEFAULT_CLIENT_SCOPES)
    const asked = typeof input.scope === 'string' ? input.scope.split(' ').filter((scope) => offered.has(scope)) : []
    const scopes = (asked.length > 0 ? [...new Set(asked)] : [...DEFAULT_CLIENT_SCOPES]) as (typeof DEFAULT_CLIENT_SCOPES)[number][]
    return { name, redirect_uris: [...new Set(uris as string[])], grant_types: [...new Set(grants as ('authorization_code' | 'refresh_token')[])], scopes }
  }

  /**
   * Removes dynamic clients unused for 30 days (never used: since their registration), each with
   * everything it holds, and the initial access tokens that expired; every instance does it hourly.
   */
  async removeUnused(): Promise<number> {
    const now = this.deps.clock.now()
    await this.deps.db.kysely.deleteFrom('registration_tokens').where('expires_at', '<', now).execute()
    return this.deps.clients.removeIdleDynamic(now - DYNAMIC_CLIENT_IDLE_MS)
  }

  start(onError: (error: Error) => void): void {
    this.timer = setInterval(() => this.removeUnused().catch(onError), 3600_000)
    this.timer.unref()
  }

  stop(): void {
    clearInterval(this.timer)
  }
}

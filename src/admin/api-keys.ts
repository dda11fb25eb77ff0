import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Background } from '../background.ts'
import { publishChanges, type Change, type ChangeFeed } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { CLI_CONTEXT, recordEvent, type RequestContext } from '../audit/events.ts'
import { OncePerWindow } from '../once-per-window.ts'
import { apiKeyStore, type ApiKeyRow } from './store.ts'

export const SCOPES = ['users:read', 'users:write', 'audit:read', 'clients:read', 'clients:write', 'webhooks:read', 'webhooks:write', 'roles:read', 'roles:write'] as const
export type Scope = (typeof SCOPES)[number]

export const KEY_PREFIX = 'pcl_'
// pcl_ + 16 hex (the id) + _ + 43 base64url characters (256 random bits).
const KEY_FORMAT = /^pcl_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/

/** last_used_at is written at most this often per key and instance, never once per request. */
const TOUCH_EVERY_MS = 60_000

export interface ApiKeyPrincipal {
  id: string
  name: string
  scopes: Scope[]
}

export interface ApiKeySummary {
  id: string
  name: string
  scopes: Scope[]
  created_at: number
  last_used_at: number | null
  expires_at: number | null
  revoked_at: number | null
}

export class ApiKeyError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ApiKeyError'
  }
}

/** Looks like an API key (so a user route can tell it is not a JWT without verifying anything). */
export function looksLikeApiKey(credential: string): boolean {
  return credential.startsWith(KEY_PREFIX)
}

function summarise(row: ApiKeyRow): ApiKeySummary {
  return {
    id: row.id,
    name: row.name,
    scopes: row.scopes.split(',') as Scope[],
    created_at: row.created_at,
    last_used_at: row.last_used_at,
    expires_at: row.expires_at,
    revoked_at: row.revoked_at,
  }
}

/**
 * Operators' API keys. A key is `pcl_<id>_<secret>`: the id finds the row, the secret (256 random
 * bits) is never stored, only its HMAC-SHA256 under a service secret that is itself stored
 * encrypted under KEY_ENCRYPTION_KEY. A fast keyed hash is right here (argon2 is for guessable
 * passwords; nobody guesses 256 random bits), and without the service secret a copy of the
 * database cannot even test a candidate key.
 *
 * Verified keys are kept in memory; a revocation reaches every instance through the change feed,
 * like a session's, and takes effect within the same bound. Memory is trusted only while the feed
 * vouches for it: after a gap longer than the feed's window the keys are forgotten, and until the
 * feed reads again every key is read from the database (ChangeFeed.generation). Without a feed (the
 * CLI) nothing would tell this store of a revocation, so nothing is kept.
 */
export class ApiKeyService {
  private readonly known = new Map<string, ApiKeyRow>()
  private readonly touched = new OncePerWindow(TOUCH_EVERY_MS)

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly hashKey: Buffer,
    private readonly background?: Background,
    private readonly feed?: ChangeFeed,
  ) {
    feed?.subscribe({ apply: (changes) => this.apply(changes), forget: () => this.known.clear() })
  }

  private apply(changes: Change[]): void {
    for (const change of changes) if (change.kind === 'api_key_revoked') this.known.delete(change.target_id)
  }

  private hash(secret: string): string {
    return createHmac('sha256', this.hashKey).update(secret).digest('base64url')
  }

  async create(input: { name: string; scopes: Scope[]; expiresAt: number | null }, context: RequestContext = CLI_CONTEXT): Promise<{ key: string; summary: ApiKeySummary }> {
    const name = input.name.trim()
    if (name.length < 1 || name.length > 100 || /[\u0000-\u001f\u007f]/.test(name)) throw new ApiKeyError('--name must be 1 to 100 characters without control characters')
    const scopes = [...new Set(input.scopes)]
    if (scopes.length === 0 || scopes.some((scope) => !SCOPES.includes(scope))) throw new ApiKeyError(`--scopes takes one or more of ${SCOPES.join(', ')}`)
    const now = this.clock.now()
    if (input.expiresAt !== null && input.expiresAt <= now) throw new ApiKeyError('--expires must lie in the future')
    const id = randomBytes(8).toString('hex')
    const secret = randomBytes(32).toString('base64url')
    const row: ApiKeyRow = { id, name, scopes: scopes.join(','), secret_hash: this.hash(secret), created_at: now, expires_at: input.expiresAt, revoked_at: null, last_used_at: null }
    await this.db.kysely.transaction().execute(async (trx) => {
      await apiKeyStore.insert(trx, row)
      await recordEvent(trx, this.clock, { type: 'api_key.created', reason: id, context })
    })
    return { key: `${KEY_PREFIX}${id}_${secret}`, summary: summarise(row) }
  }

  async list(): Promise<ApiKeySummary[]> {
    return (await apiKeyStore.list(this.db.kysely)).map(summarise)
  }

  /** Ends a key on every instance within the feed's bound; false when there is no live key with that id. */
  async revoke(id: string, context: RequestContext = CLI_CONTEXT): Promise<boolean> {
    const change: Change = { kind: 'api_key_revoked', target_id: id }
    const revoked = await this.db.kysely.transaction().execute(async (trx) => {
      if (!(await apiKeyStore.revoke(trx, id, this.clock.now()))) return false
      await publishChanges(trx, [change])
      await recordEvent(trx, this.clock, { type: 'api_key.revoked', reason: id, context })
      return true
    })
    if (revoked) this.apply([change])
    return revoked
  }

  /** The key's holder, or null for anything that is not a live key of this service. */
  async authenticate(presented: string): Promise<ApiKeyPrincipal | null> {
    const match = KEY_FORMAT.exec(presented)
    if (!match) return null
    const [, id, secret] = match as unknown as [string, string, string]
    const generation = this.feed?.generation() ?? null
    let row = generation === null ? undefined : this.known.get(id)
    if (!row) {
      const stored = await apiKeyStore.find(this.db.kysely, id)
      if (!stored) return null
      row = stored
      // Not kept if the feed emptied the store while this read ran: the row may predate a gap.
      if (generation !== null && this.feed?.generation() === generation) this.known.set(id, row)
    }
    const given = Buffer.from(this.hash(secret))
    const expected = Buffer.from(row.secret_hash)
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null
    const now = this.clock.now()
    if (row.revoked_at !== null || (row.expires_at !== null && row.expires_at <= now)) return null
    this.noteUse(id, now)
    return { id, name: row.name, scopes: row.scopes.split(',') as Scope[] }
  }

  private noteUse(id: string, now: number): void {
    if (!this.touched.first(id, now)) return
    const write = () => apiKeyStore.touch(this.db.kysely, id, now)
    if (this.background) this.background.run('api key last use', write)
    else void write().catch(() => {})
  }
}

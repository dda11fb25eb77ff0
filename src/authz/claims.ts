import type { Kysely } from 'kysely'
import { publishChanges, type Change, type ChangeFeed } from '../changes/feed.ts'
import type { Db } from '../db/index.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { unionOf, words } from './permissions.ts'
import { claimsStore } from './store.ts'
import { setBounded } from '../bounded-map.ts'

type Executor = Kysely<Database>

/** What an access token says about what its user may do (docs/authorization.md, "The claims"). */
export interface AuthzClaims {
  roles?: string[]
  permissions?: string[]
  app_metadata?: Record<string, unknown>
  org_id?: string
  org_roles?: string[]
  org_permissions?: string[]
}

/** The claims and the claims version they are current for (the token's `cv`). */
export interface TokenAuthz {
  claims: AuthzClaims
  version: number
}

/**
 * The most the claims may take, serialised: with the rest of an access token (about 500 bytes of
 * claims, the header and the signature) and base64url's third more, a token stays under the 4 KB
 * its verifier accepts. A change that would make anyone's claims larger is refused (LIMIT_EXCEEDED).
 */
export const MAX_CLAIMS_BYTES = 2400

/** The claims of one user, for their global roles and, given one they belong to, an organisation. */
async function readClaims(db: Executor, userId: string, organizationId: string | null): Promise<{ authz: TokenAuthz; organizationId: string | null } | null> {
  // The version first: the claims read after it are at least that current (a change committed in
  // between makes them newer than the token says, and the token is merely refreshed once more).
  const account = await claimsStore.account(db, userId)
  if (!account) return null
  const [global, orgRoles] = await Promise.all([
    claimsStore.globalRoles(db, userId),
    organizationId === null ? null : claimsStore.membershipRoles(db, organizationId, userId),
  ])
  const claims: AuthzClaims = {}
  if (global.length > 0) {
    const permissionsOf = new Map(global.map((role) => [role.name, words(role.permissions)]))
    claims.roles = global.map((role) => role.name)
    const permissions = unionOf(claims.roles, (role) => permissionsOf.get(role))
    if (permissions.length > 0) claims.permissions = permissions
  }
  if (account.app_metadata !== null) claims.app_metadata = JSON.parse(account.app_metadata) as Record<string, unknown>
  const member = orgRoles !== null && organizationId !== null
  if (member) {
    const roles = words(orgRoles)
    const catalogue = await claimsStore.permissionsOf(db, roles)
    claims.org_id = organizationId
    claims.org_roles = roles
    claims.org_permissions = unionOf(roles, (role) => (catalogue.has(role) ? words(catalogue.get(role)!) : undefined))
  }
  return { authz: { claims, version: account.claims_version }, organizationId: member ? organizationId : null }
}

/** The size the claims take in a token. */
export function claimsBytes(claims: AuthzClaims): number {
  return Buffer.byteLength(JSON.stringify(claims))
}

interface Cached {
  version: number
  authz: TokenAuthz
  organizationId: string | null
}

/**
 * The one seam every token issuer asks for a user's claims (Portcullis's sessions at login and
 * refresh, the OpenID provider's access tokens). A refresh knows the user's claims version from the
 * session read it already makes, so claims current for that version are answered from memory: a
 * user's claims change only with their version, which every change moves (claimsChanged below),
 * so an entry can never be stale, only unused. The cache is emptied when the change feed may have
 * missed changes (a gap), like the session gate.
 */
export class ClaimsSource {
  private readonly cache = new Map<string, Cached>()

  constructor(
    private readonly db: Db,
    feed: ChangeFeed,
    private readonly maxEntries = 100_000,
  ) {
    feed.subscribe({ apply: () => {}, forget: () => this.cache.clear() })
  }

  /**
   * The claims for a token of `userId`, in `organizationId` when the user is a member of it
   * (`organizationId` in the answer is null when not). `knownVersion`: the user's claims version as
   * the caller just read it, to answer from memory.
   */
  async forToken(userId: string, organizationId: string | null, knownVersion?: number): Promise<{ authz: TokenAuthz; organizationId: string | null }> {
    const key = `${userId} ${organizationId ?? ''}`
    const hit = this.cache.get(key)
    if (hit && knownVersion !== undefined && hit.version === knownVersion) return hit
    const read = await readClaims(this.db.kysely, userId, organizationId)
    if (!read) throw new AppError('INVALID_TOKEN')
    setBounded(this.cache, key, { version: read.authz.version, ...read }, this.maxEntries)
    return read
  }

  /** The claims as a transaction sees them (a change checks what it would make them, before it commits). */
  static read(db: Executor, userId: string, organizationId: string | null) {
    return readClaims(db, userId, organizationId)
  }
}

/**
 * What every change to a user's claims does in its own transaction: moves their claims versions
 * and tells every instance through the change feed (`user_changed`), so their older access tokens
 * answer TOKEN_EXPIRED within the revocation bound. Apply the returned changes locally after commit.
 */
export async function claimsChanged(trx: Executor, userIds: string[]): Promise<Change[]> {
  const unique = [...new Set(userIds)]
  await claimsStore.bump(trx, unique)
  const changes: Change[] = unique.map((id) => ({ kind: 'user_changed', user_id: id }))
  await publishChanges(trx, changes)
  return changes
}

/** A role's permissions changed (or it went): everyone holding it is out of date, on every instance. */
export async function roleChanged(trx: Executor, role: string): Promise<Change[]> {
  await claimsStore.bumpHolders(trx, role)
  const changes: Change[] = [{ kind: 'roles_changed', target_id: role }]
  await publishChanges(trx, changes)
  return changes
}

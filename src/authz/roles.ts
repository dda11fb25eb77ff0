import type { Kysely } from 'kysely'
import { recordEvent, type RequestContext } from '../audit/events.ts'
import type { Change } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users } from '../db/repositories.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { cleanLabel, isUuid } from '../text.ts'
import type { AccountEvents } from '../webhooks/events.ts'
import { claimsBytes, claimsChanged, ClaimsSource, MAX_CLAIMS_BYTES, roleChanged } from './claims.ts'
import { organizationStore } from './org-store.ts'
import { MAX_METADATA_BYTES, MAX_PERMISSIONS, MAX_USER_ROLES, PERMISSION_PATTERN, ROLE_NAME_PATTERN, unionOf, words } from './permissions.ts'
import { roleStore, type RoleHolders, type RoleRow } from './store.ts'

type Executor = Kysely<Database>

/** The roles of the catalogue and each one's permissions. */
export type RoleCatalogue = ReadonlyMap<string, readonly string[]>

/** A role's description: at most this many characters once trimmed. */
export const ROLE_DESCRIPTION_MAX = 200

export interface RoleView {
  name: string
  description: string | null
  permissions: string[]
  builtin: boolean
  created_at: string
  updated_at: string
}

const iso = (ms: number) => new Date(ms).toISOString()
const roleView = (row: RoleRow): RoleView => ({
  name: row.name,
  description: row.description,
  permissions: words(row.permissions),
  builtin: row.builtin === 1,
  created_at: iso(row.created_at),
  updated_at: iso(row.updated_at),
})

const noSuchRole = () => new AppError('NOT_FOUND', { message: 'No role has this name.' })
const invalid = (field: string, message: string) => new AppError('VALIDATION_ERROR', { details: [{ field, message }] })

/** Each permission well formed, each once, in order; at most MAX_PERMISSIONS. */
function cleanPermissions(list: readonly string[]): string[] {
  list.forEach((permission, index) => {
    if (!PERMISSION_PATTERN.test(permission)) throw invalid(`permissions.${index}`, `must match ${PERMISSION_PATTERN.source}`)
  })
  const folded = [...new Set(list)].sort()
  if (folded.length > MAX_PERMISSIONS) throw invalid('permissions', `must hold at most ${MAX_PERMISSIONS} distinct permissions`)
  return folded
}

/** Absent stays absent; null or blank clears it. */
function cleanDescription(raw: string | null | undefined): string | null | undefined {
  if (raw === undefined) return undefined
  if (raw === null || raw.trim() === '') return null
  const description = cleanLabel(raw, ROLE_DESCRIPTION_MAX)
  if (description.problem) throw invalid('description', description.problem)
  return description.value
}

function assertRoleName(name: string, field = 'name'): void {
  if (!ROLE_NAME_PATTERN.test(name)) throw invalid(field, `must match ${ROLE_NAME_PATTERN.source}`)
}

/**
 * app_metadata or user_metadata as stored: a JSON object (never an array or a scalar) of at most
 * MAX_METADATA_BYTES serialised, or null to clear it. The schemas check the shape already; this is
 * also the CLI's and every other caller's check.
 */
export function storedMetadata(value: unknown, field: string): string | null {
  if (value === null) return null
  if (typeof value !== 'object' || Array.isArray(value)) throw invalid(field, 'must be a JSON object, or null to clear it')
  const serialised = JSON.stringify(value)
  if (Buffer.byteLength(serialised) > MAX_METADATA_BYTES) throw invalid(field, `must be at most ${MAX_METADATA_BYTES} bytes serialised`)
  return serialised
}

/** A stored metadata object as the API shows it. */
export const metadataView = (stored: string | null): Record<string, unknown> | null => (stored === null ? null : (JSON.parse(stored) as Record<string, unknown>))

/**
 * The claims of one user, as the transaction now sees them, fit a token: at most MAX_PERMISSIONS
 * globally and in the organisation, and MAX_CLAIMS_BYTES in all. Checked after the write and
 * before the commit, so a refusal undoes the change.
 */
async function assertFits(trx: Executor, userId: string, organizationId: string | null): Promise<void> {
  const read = await ClaimsSource.read(trx, userId, organizationId)
  if (!read) return
  const { claims } = read.authz
  if ((claims.permissions?.length ?? 0) > MAX_PERMISSIONS || (claims.org_permissions?.length ?? 0) > MAX_PERMISSIONS) {
    throw new AppError('LIMIT_EXCEEDED', { message: `This change would give a user more than ${MAX_PERMISSIONS} distinct permissions.` })
  }
  if (claimsBytes(claims) > MAX_CLAIMS_BYTES) throw new AppError('LIMIT_EXCEEDED', { message: 'This change would make a user\'s access tokens too large.' })
}

/** A user's global claims changed: they must fit globally and in every organisation they belong to (those tokens carry them too). */
async function assertUserFits(trx: Executor, userId: string): Promise<void> {
  await assertFits(trx, userId, null)
  for (const organizationId of await roleStore.organizationsOf(trx, userId)) await assertFits(trx, userId, organizationId)
}

/**
 * Every (user, organisation) whose claims a change of the role's permissions changes: its global
 * holders globally and in each of their organisations, its members in the organisation holding it.
 * One claims read each: a few queries per pair, which an operator's change of a role affords; a
 * change that only takes permissions away skips it (nothing can grow).
 */
async function assertHoldersFit(trx: Executor, role: string): Promise<void> {
  const holders = await roleStore.holders(trx, role)
  const scopes = new Set<string>()
  for (const userId of holders.users) scopes.add(`${userId} `)
  for (const row of await roleStore.organizationsOfGlobalHolders(trx, role)) scopes.add(`${row.user_id} ${row.organization_id}`)
  for (const row of holders.memberships) scopes.add(`${row.user_id} ${row.organization_id}`)
  for (const scope of scopes) {
    const [userId, organizationId] = scope.split(' ') as [string, string]
    await assertFits(trx, userId, organizationId === '' ? null : organizationId)
  }
}

export interface RolesDeps {
  db: Db
  clock: Clock
  /** The webhooks' outbox: `user.roles_changed`, written in the transaction of the change. */
  events: AccountEvents
  /** Applies the changes of a committed transaction to this instance at once (the others read them from the feed). */
  applyLocally: (changes: Change[]) => void
}

/**
 * The roles catalogue, users' global roles and their app_metadata (docs/authorization.md). Every
 * change runs in one transaction that writes it, moves the claims version of every user whose
 * tokens it changes (claimsChanged, roleChanged), checks that their claims still fit a token
 * (LIMIT_EXCEEDED undoes it), and writes its audit record and webhook events; the changes are
 * applied to this instance right after commit, so older access tokens answer TOKEN_EXPIRED here at
 * once and on the other instances within the revocation bound.
 */
export class RolesService {
  constructor(private readonly deps: RolesDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  private get engine() {
    return this.deps.db.engine
  }

  private async change<T>(work: (trx: Executor, changes: Change[]) => Promise<T>): Promise<T> {
    const changes: Change[] = []
    const result = await this.db.transaction().execute((trx) => work(trx, changes))
    if (changes.length > 0) this.deps.applyLocally(changes)
    return result
  }

  async list(): Promise<RoleView[]> {
    return (await roleStore.list(this.db)).map(roleView)
  }

  /** An unknown name, or one that could never be a role's, is NOT_FOUND. */
  async get(name: string): Promise<RoleView> {
    const row = ROLE_NAME_PATTERN.test(name) ? await roleStore.find(this.db, name) : null
    if (!row) throw noSuchRole()
    return roleView(row)
  }

  /** A new role; a name already in the catalogue is VALIDATION_ERROR. Nobody holds it yet, so no claims move. */
  async create(input: { name: string; description?: string | null | undefined; permissions: readonly string[] }, context: RequestContext): Promise<RoleView> {
    assertRoleName(input.name)
    const permissions = cleanPermissions(input.permissions)
    const now = this.deps.clock.now()
    const row: RoleRow = { name: input.name, description: cleanDescription(input.description) ?? null, permissions: permissions.join(' '), builtin: 0, created_at: now, updated_at: now }
    return this.change(async (trx) => {
      if (!(await roleStore.insert(trx, row))) throw invalid('name', 'is the name of a role already')
      await recordEvent(trx, this.deps.clock, { type: 'role.created', reason: row.name, context })
      return roleView(row)
    })
  }

  /**
   * Changes a role's description or permissions (built-in roles too). New permissions make every
   * holder's tokens out of date, and are refused (LIMIT_EXCEEDED) when any holder would then hold
   * more than MAX_PERMISSIONS or claims larger than MAX_CLAIMS_BYTES.
   */
  async update(name: string, input: { description?: string | null | undefined; permissions?: readonly string[] | undefined }, context: RequestContext): Promise<RoleView> {
    const description = cleanDescription(input.description)
    const permissions = input.permissions === undefined ? undefined : cleanPermissions(input.permissions)
    if (!ROLE_NAME_PATTERN.test(name)) throw noSuchRole()
    return this.change(async (trx, changes) => {
      // Holders before the role: the order every change here takes its locks in (src/authz/store.ts).
      if (permissions !== undefined) await roleStore.holderAccounts(trx, this.engine, name, true)
      const before = await roleStore.lock(trx, this.engine, name)
      if (!before) throw noSuchRole()
      const held = words(before.permissions)
      const moved = permissions !== undefined && permissions.join(' ') !== held.join(' ')
      await roleStore.update(trx, name, { ...(description === undefined ? {} : { description }), ...(moved ? { permissions: permissions.join(' ') } : {}) }, this.deps.clock.now())
      const holders = moved ? await roleStore.holders(trx, name) : { users: [], memberships: [] }
      // A role nobody holds changes nobody's claims: no instance need forget what it knows.
      if (holders.users.length + holders.memberships.length > 0) {
        changes.push(...(await roleChanged(trx, name)))
        if (permissions!.some((permission) => !held.includes(permission))) await assertHoldersFit(trx, name)
        await this.tellHolders(trx, holders, name, 'role_updated')
      }
      await recordEvent(trx, this.deps.clock, { type: 'role.updated', reason: name, context })
      return roleView((await roleStore.find(trx, name))!)
    })
  }

  /**
   * Removes a role. Built-in roles are never removed (VALIDATION_ERROR: the request can never
   * succeed). A role someone holds, globally or in a membership, is refused (409 LIMIT_EXCEEDED)
   * unless `force`: then it leaves every user and membership first (a membership left with no role
   * stays, with none), and their tokens are out of date.
   */
  async remove(name: string, force: boolean, context: RequestContext): Promise<{ name: string; deleted: true; users: number; memberships: number }> {
    if (!ROLE_NAME_PATTERN.test(name)) throw noSuchRole()
    return this.change(async (trx, changes) => {
      const found = await roleStore.find(trx, name)
      if (!found) throw noSuchRole()
      if (found.builtin === 1) throw invalid('name', 'is a built-in role: it may be changed but not removed')
      // Organisations, then users, then the role: the order of every membership change (src/authz/organizations.ts).
      const organizations = [...new Set((await roleStore.holders(trx, name)).memberships.map((row) => row.organization_id))].sort()
      if (force) await organizationStore.lock(trx, this.engine, organizations)
      await roleStore.holderAccounts(trx, this.engine, name, true)
      if (!(await roleStore.lock(trx, this.engine, name))) throw noSuchRole()
      const holders = await roleStore.holders(trx, name)
      const inUse = holders.users.length + holders.memberships.length
      if (inUse > 0 && !force) {
        throw new AppError('LIMIT_EXCEEDED', {
          message: `The role is held by ${holders.users.length} user(s) and ${holders.memberships.length} membership(s): take it from them first, or remove it with ?force=true.`,
        })
      }
      // The holders' versions move while the rows still say who they are.
      if (inUse > 0) changes.push(...(await roleChanged(trx, name)))
      await this.tellHolders(trx, holders, name, 'role_removed')
      for (const membership of holders.memberships) {
        await roleStore.setMembershipRoles(trx, membership.organization_id, membership.user_id, words(membership.roles).filter((role) => role !== name).join(' '))
      }
      await roleStore.remove(trx, name)
      await recordEvent(trx, this.deps.clock, { type: 'role.removed', reason: name, context })
      return { name, deleted: true as const, users: holders.users.length, memberships: holders.memberships.length }
    })
  }

  /** Each holder of a role whose permissions changed, or which went, hears `user.roles_changed` (their global roles now). */
  private async tellHolders(trx: Executor, holders: RoleHolders, role: string, reason: 'role_updated' | 'role_removed'): Promise<void> {
    const holding = new Set([...holders.users, ...holders.memberships.map((row) => row.user_id)])
    if (holding.size === 0) return
    const rolesOf = await roleStore.globalRolesOfHolders(trx, role)
    for (const subject of await roleStore.holderAccounts(trx, this.engine, role, false)) {
      if (!holding.has(subject.id)) continue
      const roles = (rolesOf.get(subject.id) ?? []).filter((held) => reason === 'role_updated' || held !== role)
      await this.deps.events.emit(trx, 'user.roles_changed', subject, { roles, role, reason })
    }
  }

  /** A user's global roles (the admin API's view of one user). */
  async rolesOf(userId: string): Promise<string[]> {
    return roleStore.userRoles(this.db, userId)
  }

  /**
   * Sets a user's global roles, all of them (`roles`), or as `edit` makes them from the current
   * ones (the CLI's --add and --remove). At most MAX_USER_ROLES; a role not in the catalogue is
   * VALIDATION_ERROR naming it; claims that would not fit a token are LIMIT_EXCEEDED; nothing changes
   * then. The same roles again change nothing (no version moves).
   */
  async setUserRoles(userId: string, roles: readonly string[] | ((current: string[]) => string[]), context: RequestContext): Promise<string[]> {
    if (!isUuid(userId)) throw new AppError('NOT_FOUND')
    return this.change(async (trx, changes) => {
      // The user's row first, then the roles': the order of every change here (src/authz/store.ts).
      if (!(await users.lockRow(trx, userId))) throw new AppError('NOT_FOUND')
      const current = await roleStore.userRoles(trx, userId)
      const wanted = [...new Set(typeof roles === 'function' ? roles(current) : roles)].sort()
      wanted.forEach((role, index) => assertRoleName(role, `roles.${index}`))
      if (wanted.length > MAX_USER_ROLES) throw invalid('roles', `must hold at most ${MAX_USER_ROLES} roles`)
      const known = await roleStore.holdExisting(trx, this.engine, wanted)
      const unknown = wanted.filter((role) => !known.has(role))
      if (unknown.length > 0) throw invalid('roles', `names roles that do not exist: ${unknown.join(', ')}`)
      if (wanted.join(' ') === current.join(' ')) return current
      await roleStore.setUserRoles(trx, userId, wanted, this.deps.clock.now())
      changes.push(...(await claimsChanged(trx, [userId])))
      await assertUserFits(trx, userId)
      const subject = (await users.findById(trx, userId))!
      await this.deps.events.emit(trx, 'user.roles_changed', subject, { roles: wanted, previous_roles: current })
      await recordEvent(trx, this.deps.clock, { type: 'user.roles_changed', userId, context })
      return wanted
    })
  }

  /** For an import (src/imports/): each role of the catalogue with its permissions, read once a batch. */
  async catalogue(): Promise<RoleCatalogue> {
    return new Map((await roleStore.list(this.db)).map((role) => [role.name, words(role.permissions)]))
  }

  /**
   * Why a new account cannot hold these roles and this app_metadata (an import's line): a role not
   * in the catalogue, or claims that would not fit a token (the limits every change here keeps).
   * Null when it can. An imported account belongs to no organisation, so its global claims are all.
   */
  static importProblem(catalogue: RoleCatalogue, roles: readonly string[], appMetadata: string | null): { reason: 'unknown_role' | 'invalid'; message: string } | null {
    const unknown = roles.filter((role) => !catalogue.has(role))
    if (unknown.length > 0) return { reason: 'unknown_role', message: `roles not in the catalogue: ${unknown.join(', ')}` }
    if (roles.length > MAX_USER_ROLES) return { reason: 'invalid', message: `at most ${MAX_USER_ROLES} roles` }
    const permissions = unionOf(roles, (role) => catalogue.get(role))
    if (permissions.length > MAX_PERMISSIONS) return { reason: 'invalid', message: `the roles give more than ${MAX_PERMISSIONS} distinct permissions` }
    const claims = {
      ...(roles.length > 0 ? { roles: [...roles], ...(permissions.length > 0 ? { permissions } : {}) } : {}),
      ...(appMetadata !== null ? { app_metadata: JSON.parse(appMetadata) as Record<string, unknown> } : {}),
    }
    if (claimsBytes(claims) > MAX_CLAIMS_BYTES) return { reason: 'invalid', message: 'roles and app_metadata would make the access tokens too large' }
    return null
  }

  /**
   * Gives accounts an import has just made their roles, in the import's transaction. They hold no
   * token yet, so no claims version moves and no webhook says a role changed; importProblem has
   * checked every line against the catalogue read for the batch.
   */
  async assignImported(trx: Executor, grants: readonly { userId: string; roles: readonly string[] }[]): Promise<void> {
    const now = this.deps.clock.now()
    const rows = grants.flatMap(({ userId, roles }) => roles.map((role) => ({ user_id: userId, role, created_at: now })))
    for (let at = 0; at < rows.length; at += 1000) await roleStore.insertUserRoles(trx, rows.slice(at, at + 1000))
  }

  /** Sets (an object of at most 2 KB serialised) or clears (null) the operators' app_metadata; it is in every token of the user. */
  async setAppMetadata(userId: string, value: unknown, context: RequestContext): Promise<void> {
    const stored = storedMetadata(value, 'app_metadata')
    if (!isUuid(userId)) throw new AppError('NOT_FOUND')
    await this.change(async (trx, changes) => {
      if (!(await users.lockRow(trx, userId))) throw new AppError('NOT_FOUND')
      const before = (await users.findById(trx, userId))!
      if (before.app_metadata === stored) return
      await roleStore.setAppMetadata(trx, userId, stored, this.deps.clock.now())
      changes.push(...(await claimsChanged(trx, [userId])))
      await assertUserFits(trx, userId)
      await recordEvent(trx, this.deps.clock, { type: 'user.app_metadata_changed', userId, context })
    })
  }
}

import { handOverOrganizationLists } from '../watchlists/service.ts'
import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import { recordEvent, type AuditType, type RequestContext } from '../audit/events.ts'
import type { Principal } from '../auth/service.ts'
import type { Change } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import { keysetPage, type CursorCodec } from '../cursor.ts'
import type { Db, Engine } from '../db/index.ts'
import { users, type UserRow } from '../db/repositories.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { cleanLabel, isUuid } from '../text.ts'
import type { AccountEvents, EventSubject } from '../webhooks/events.ts'
import { claimsBytes, claimsChanged, ClaimsSource, MAX_CLAIMS_BYTES } from './claims.ts'
import { ORGANIZATION_NAME_MAX } from './org-schemas.ts'
import { invitationStore, membershipStore, organizationStore, type OrganizationRow } from './org-store.ts'
import { grants, MAX_PERMISSIONS, ORGANIZATION_ALL, unionOf, words } from './permissions.ts'
import { claimsStore } from './store.ts'

type Executor = Kysely<Database>

/** ORGANIZATIONS: on (anyone with a confirmed address creates them), admin (only operators do), off (no routes at all). */
export type OrganizationsMode = 'on' | 'off' | 'admin'

/** The role every organisation keeps one holder of while it has other members (LAST_OWNER). */
export const OWNER_ROLE = 'owner'
/** The role an operator's deletion of the last owner leaves the organisation to. */
export const ADMIN_ROLE = 'admin'
/** Organisations one user may belong to (created or joined): keeps the listing and the provider's claim bounded. */
export const MAX_MEMBERSHIPS = 100

export interface OrganizationView {
  id: string
  name: string
  created_at: string
}

const iso = (ms: number) => new Date(ms).toISOString()
export const organizationView = (row: Pick<OrganizationRow, 'id' | 'name' | 'created_at'>): OrganizationView => ({ id: row.id, name: row.name, created_at: iso(row.created_at) })

const memberView = (row: { user_id: string; email: string; full_name: string; roles: string; joined_at: number }) =>
  ({ user_id: row.user_id, email: row.email, full_name: row.full_name, roles: words(row.roles), joined_at: iso(row.joined_at) })

export interface OrganizationDeps {
  db: Db
  clock: Clock
  /** The webhooks' outbox: organization.* events, written in the transaction of the change. */
  events: AccountEvents
  cursors: CursorCodec
  /** Applies the changes of a committed transaction to this instance at once (the other instances read them from the feed). */
  applyLocally: (changes: Change[]) => void
  mode: OrganizationsMode
}

/** Who did it, for the audit trail: a member acting on another member is named (`user:<id>`), like the console's operators. */
function actingOn(context: RequestContext, actorId: string | null, subjectId: string): RequestContext {
  return actorId === null || actorId === subjectId || context.actor ? context : { ...context, actor: `user:${actorId}` }
}

/** The audit record of one organisation change: the user it is about, the organisation as its reason. */
export function auditOrganization(trx: Executor, clock: Clock, type: AuditType, organizationId: string, userId: string | null, context: RequestContext): Promise<void> {
  return recordEvent(trx, clock, { type, userId, reason: organizationId, context })
}

/** The permissions a set of roles holds in an organisation, from the catalogue as `trx` sees it. */
export async function permissionsOfRoles(trx: Executor, roles: string[]): Promise<string[]> {
  const catalogue = await claimsStore.permissionsOf(trx, roles)
  return unionOf(roles, (role) => (catalogue.has(role) ? words(catalogue.get(role)!) : undefined))
}

/**
 * The roles about to be granted exist, and `held` grants every permission they carry: nobody
 * grants a permission they lack (an admin cannot make an owner). Unknown roles are the request's
 * fault (VALIDATION_ERROR); roles beyond the granter's reach are FORBIDDEN.
 */
export async function assertGrantable(trx: Executor, held: readonly string[], roles: string[]): Promise<void> {
  const known = await membershipStore.knownRoles(trx, roles)
  const unknown = roles.filter((role) => !known.has(role))
  if (unknown.length > 0) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'roles', message: `names roles that do not exist: ${unknown.join(', ')}` }] })
  const lacking = (await permissionsOfRoles(trx, roles)).filter((permission) => !grants(held, permission, true))
  if (lacking.length > 0) throw new AppError('FORBIDDEN', { message: `You cannot grant permissions you do not hold yourself: ${lacking.join(', ')}.` })
}

/**
 * A membership's claims as the transaction now sees them fit a token: at most MAX_PERMISSIONS in the
 * organisation and MAX_CLAIMS_BYTES in all. Checked after the write, in its transaction, so a
 * refusal undoes it.
 */
export async function assertClaimsFit(trx: Executor, userId: string, organizationId: string): Promise<void> {
  const read = await ClaimsSource.read(trx, userId, organizationId)
  if (!read) return
  const { claims } = read.authz
  if ((claims.org_permissions?.length ?? 0) > MAX_PERMISSIONS) {
    throw new AppError('LIMIT_EXCEEDED', { message: `A member may hold at most ${MAX_PERMISSIONS} distinct permissions in one organisation.` })
  }
  if (claimsBytes(claims) > MAX_CLAIMS_BYTES) throw new AppError('LIMIT_EXCEEDED', { message: 'These roles would make the member\'s access tokens too large.' })
}

/** The member's roles in a locked organisation; null when not a member. */
async function rolesIn(trx: Executor, organizationId: string, userId: string): Promise<string[] | null> {
  const row = await membershipStore.find(trx, organizationId, userId)
  return row ? words(row.roles) : null
}

/** The subjects of the webhook events about these users (their addresses, as the transaction sees them). */
async function subjectsOf(trx: Executor, userIds: string[]): Promise<EventSubject[]> {
  if (userIds.length === 0) return []
  return trx.selectFrom('users').select(['id', 'email']).where('id', 'in', userIds).orderBy('id').execute()
}

/**
 * What an account's deletion does to its organisations, first in the deletion's transaction (so the
 * organisations are locked before anything of the account is, in the order every membership change
 * takes its locks; src/accounts/service.ts, remove): the last owner of an organisation with other
 * members cannot delete their own account (LAST_OWNER); an operator's deletion leaves such an
 * organisation to its admins (they become owners); an organisation left with no member goes; the
 * invitations to the account's address go. Its memberships go with the account (foreign key).
 */
export async function releaseMemberships(
  trx: Executor,
  deps: { engine: Engine; clock: Clock; events: AccountEvents },
  user: Pick<UserRow, 'id' | 'email'>,
  context: RequestContext,
): Promise<Change[]> {
  const bySelf = !context.actor
  const organizationIds = (await membershipStore.ofUser(trx, user.id)).map((row) => row.organization_id)
  await organizationStore.lock(trx, deps.engine, organizationIds)
  const promoted: string[] = []
  for (const organizationId of organizationIds) {
    const members = await membershipStore.count(trx, organizationId)
    if (members <= 1) {
      await deps.events.emit(trx, 'organization.deleted', user, { organization_id: organizationId, reason: 'last_member_deleted' })
      await auditOrganization(trx, deps.clock, 'organization.deleted', organizationId, user.id, context)
      await organizationStore.remove(trx, organizationId)
      continue
    }
    const owners = await membershipStore.holding(trx, organizationId, OWNER_ROLE)
    if (owners.length === 1 && owners[0]!.user_id === user.id) {
      if (bySelf) throw new AppError('LAST_OWNER', { message: 'You are the last owner of an organisation with other members: make another member an owner, or delete the organisation, first.' })
      for (const admin of await membershipStore.holding(trx, organizationId, ADMIN_ROLE)) {
        if (admin.user_id === user.id) continue
        const roles = [...words(admin.roles), OWNER_ROLE]
        await membershipStore.setRoles(trx, organizationId, admin.user_id, roles.join(' '))
        const [subject] = await subjectsOf(trx, [admin.user_id])
        await deps.events.emit(trx, 'organization.member_updated', subject!, { organization_id: organizationId, roles, reason: 'last_owner_deleted' })
        await auditOrganization(trx, deps.clock, 'organization.member_updated', organizationId, admin.user_id, context)
        promoted.push(admin.user_id)
      }
    }
    // The lists the member made stay the organisation's: the first owner left (else the longest member) keeps them.
    const heirs = [...(await membershipStore.holding(trx, organizationId, OWNER_ROLE)), ...(await membershipStore.membersByJoining(trx, organizationId))].filter((member) => member.user_id !== user.id)
    await handOverOrganizationLists(trx, organizationId, user.id, heirs[0]!.user_id)
    await deps.events.emit(trx, 'organization.member_removed', user, { organization_id: organizationId, reason: 'account_deleted' })
    await auditOrganization(trx, deps.clock, 'organization.member_removed', organizationId, user.id, context)
  }
  await invitationStore.removeTo(trx, user.email)
  return promoted.length > 0 ? claimsChanged(trx, promoted) : []
}

/**
 * Organisations and their members (docs/authorization.md, "Organisations"). Every change runs in one
 * transaction that first locks the organisation's row, so changes to one organisation's members are
 * serialised (the last-owner rule cannot be raced), moves the claims version of every user whose
 * claims it changes, writes its webhook events and audit records, and is applied to this instance
 * right after commit. An organisation the caller is not a member of is NOT_FOUND, whatever it is; a
 * member without the permission is FORBIDDEN. The permissions are read from the database in the
 * change's transaction, not from the caller's token, which may be a snapshot of older roles.
 */
export class OrganizationService {
  constructor(private readonly deps: OrganizationDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  get mode(): OrganizationsMode {
    return this.deps.mode
  }

  /** One transaction; its changes to claims are applied here after commit. */
  async change<T>(work: (trx: Executor, changes: Change[]) => Promise<T>): Promise<T> {
    const changes: Change[] = []
    const result = await this.db.transaction().execute((trx) => work(trx, changes))
    if (changes.length > 0) this.deps.applyLocally(changes)
    return result
  }

  /** Locks the organisation for the rest of the transaction; NOT_FOUND when it is gone (or never was). */
  async lock(trx: Executor, organizationId: string): Promise<OrganizationRow> {
    if (!isUuid(organizationId)) throw new AppError('NOT_FOUND')
    const [row] = await organizationStore.lock(trx, this.deps.db.engine, [organizationId])
    if (!row) throw new AppError('NOT_FOUND')
    return row
  }

  /**
   * The caller's permissions in the organisation, which must include `permission` (null: any member).
   * Not a member: NOT_FOUND, as for an organisation that does not exist.
   */
  async require(trx: Executor, organizationId: string, userId: string, permission: string | null): Promise<{ roles: string[]; permissions: string[] }> {
    if (!isUuid(organizationId)) throw new AppError('NOT_FOUND')
    const roles = await rolesIn(trx, organizationId, userId)
    if (roles === null) throw new AppError('NOT_FOUND')
    const permissions = await permissionsOfRoles(trx, roles)
    if (permission !== null && !grants(permissions, permission, true)) throw new AppError('FORBIDDEN', { message: `This needs the permission ${permission} in the organisation.` })
    return { roles, permissions }
  }

  /**
   * Adds a member in a transaction that holds the organisation's lock (an accepted invitation, a
   * new organisation's owner): the user's membership count, the claims limits, the claims version,
   * the webhook event and the audit record.
   */
  async addMember(trx: Executor, changes: Change[], organizationId: string, user: EventSubject, roles: string[], context: RequestContext): Promise<void> {
    if (!(await users.lockRow(trx, user.id))) throw new AppError('NOT_FOUND')
    const memberships = (await membershipStore.ofUser(trx, user.id)).length
    if (memberships >= MAX_MEMBERSHIPS) throw new AppError('LIMIT_EXCEEDED', { message: `An account may belong to at most ${MAX_MEMBERSHIPS} organisations.` })
    await membershipStore.insert(trx, { organization_id: organizationId, user_id: user.id, roles: roles.join(' '), joined_at: this.deps.clock.now() })
    changes.push(...(await claimsChanged(trx, [user.id])))
    await assertClaimsFit(trx, user.id, organizationId)
    await this.deps.events.emit(trx, 'organization.member_added', user, { organization_id: organizationId, roles })
    await auditOrganization(trx, this.deps.clock, 'organization.member_added', organizationId, user.id, context)
  }

  private cleanName(raw: string): string {
    const name = cleanLabel(raw, ORGANIZATION_NAME_MAX)
    if (name.problem) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'name', message: name.problem }] })
    return name.value
  }

  /** A user makes an organisation and becomes its owner (ORGANIZATIONS=on); the address must be confirmed. */
  async create(principal: Principal, rawName: string, context: RequestContext): Promise<OrganizationView> {
    if (this.deps.mode !== 'on') throw new AppError('FORBIDDEN', { message: 'Organisations are created by the operators of this service.' })
    const user = await users.findById(this.db, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    if (user.email_verified_at === null) throw new AppError('EMAIL_NOT_VERIFIED')
    return this.createFor(user, rawName, context)
  }

  /** An operator makes an organisation for an account (POST /admin/organizations): it must exist, be active and have a confirmed address. */
  async createByOperator(ownerUserId: string, rawName: string, context: RequestContext): Promise<OrganizationView> {
    const name = this.cleanName(rawName)
    const user = isUuid(ownerUserId) ? await users.findById(this.db, ownerUserId) : null
    if (!user) throw new AppError('NOT_FOUND', { message: 'No account has this id.' })
    if (user.email_verified_at === null || user.status !== 'active') {
      throw new AppError('VALIDATION_ERROR', { details: [{ field: 'owner_user_id', message: 'must be an active account with a confirmed address' }] })
    }
    return this.createFor(user, name, context)
  }

  private async createFor(user: Pick<UserRow, 'id' | 'email'>, rawName: string, context: RequestContext): Promise<OrganizationView> {
    const name = this.cleanName(rawName)
    const now = this.deps.clock.now()
    const row: OrganizationRow = { id: randomUUID(), name, created_at: now, updated_at: now }
    return this.change(async (trx, changes) => {
      await organizationStore.insert(trx, row)
      await this.deps.events.emit(trx, 'organization.created', user, { organization_id: row.id, name })
      await auditOrganization(trx, this.deps.clock, 'organization.created', row.id, user.id, context)
      await this.addMember(trx, changes, row.id, user, [OWNER_ROLE], context)
      return organizationView(row)
    })
  }

  /** The caller's memberships, with their roles, oldest first. */
  async list(principal: Principal) {
    return { organizations: await this.membershipsOf(principal.userId) }
  }

  /** The user's memberships (the listing, and the account's export). */
  async membershipsOf(userId: string): Promise<{ id: string; name: string; roles: string[]; joined_at: string }[]> {
    return (await membershipStore.ofUser(this.db, userId)).map((row) => ({ id: row.organization_id, name: row.name, roles: words(row.roles), joined_at: iso(row.joined_at) }))
  }

  async get(principal: Principal, organizationId: string): Promise<OrganizationView> {
    await this.require(this.db, organizationId, principal.userId, null)
    const row = await organizationStore.find(this.db, organizationId)
    if (!row) throw new AppError('NOT_FOUND')
    return organizationView(row)
  }

  /** Any member lists the members, a keyset page at a time (in user-id order, the primary key's). */
  async members(principal: Principal, organizationId: string, query: { limit?: number; cursor?: string }) {
    await this.require(this.db, organizationId, principal.userId, null)
    const { rows, next_cursor } = await keysetPage<{ user_id: string; email: string; full_name: string; roles: string; joined_at: number }, { u: string }>(
      this.deps.cursors, `organization-members:${organizationId}`, query,
      (after, limit) => membershipStore.page(this.db, organizationId, after?.u ?? null, limit),
      (row) => ({ u: row.user_id }),
      (value) => (value && typeof value.u === 'string' && isUuid(value.u) ? { u: value.u } : null),
    )
    return {
      members: rows.map(memberView),
      next_cursor,
    }
  }

  /**
   * Every organisation, oldest first, a keyset page at a time on (created_at, id), each with its
   * member count: the operators' console reads it (src/console/organizations.ts). Read-only;
   * operators make organisations through createByOperator.
   */
  async listAll(query: { limit?: number; cursor?: string }) {
    const { rows, next_cursor } = await keysetPage(
      this.deps.cursors, 'operator-organizations', query,
      (after, limit) => this.db.selectFrom('organizations').select(['id', 'name', 'created_at'])
        .where((eb) => eb(eb.refTuple('created_at', 'id'), '>', eb.tuple(after?.t ?? -1, after?.id ?? '')))
        .orderBy('created_at').orderBy('id').limit(limit).execute(),
      (row) => ({ t: Number(row.created_at), id: row.id }),
    )
    const counts = rows.length === 0
      ? []
      : await this.db.selectFrom('memberships').select(['organization_id', (eb) => eb.fn.countAll<number | string>().as('n')])
        .where('organization_id', 'in', rows.map((row) => row.id)).groupBy('organization_id').execute()
    const members = new Map(counts.map((row) => [row.organization_id, Number(row.n)]))
    return { organizations: rows.map((row) => ({ ...organizationView(row), members: members.get(row.id) ?? 0 })), next_cursor }
  }

  /** One organisation and a keyset page of its members (user-id order), whoever asks: the operators' console. NOT_FOUND when there is none. */
  async inspect(organizationId: string, query: { limit?: number; cursor?: string }) {
    const row = isUuid(organizationId) ? await organizationStore.find(this.db, organizationId) : null
    if (!row) throw new AppError('NOT_FOUND', { message: 'No organisation has this id.' })
    const { rows, next_cursor } = await keysetPage<{ user_id: string; email: string; full_name: string; roles: string; joined_at: number }, { u: string }>(
      this.deps.cursors, `operator-organization-members:${organizationId}`, query,
      (after, limit) => membershipStore.page(this.db, organizationId, after?.u ?? null, limit),
      (member) => ({ u: member.user_id }),
      (value) => (value && typeof value.u === 'string' && isUuid(value.u) ? { u: value.u } : null),
    )
    return { organization: organizationView(row), member_count: await membershipStore.count(this.db, organizationId), members: rows.map(memberView), next_cursor }
  }

  async rename(principal: Principal, organizationId: string, rawName: string, context: RequestContext): Promise<OrganizationView> {
    const name = this.cleanName(rawName)
    return this.change(async (trx) => {
      const row = await this.lock(trx, organizationId)
      await this.require(trx, organizationId, principal.userId, ORGANIZATION_ALL)
      const now = this.deps.clock.now()
      await organizationStore.rename(trx, organizationId, name, now)
      const [actor] = await subjectsOf(trx, [principal.userId])
      await this.deps.events.emit(trx, 'organization.updated', actor!, { organization_id: organizationId, name })
      await auditOrganization(trx, this.deps.clock, 'organization.updated', organizationId, principal.userId, context)
      return organizationView({ ...row, name })
    })
  }

  /** Deletes it with its memberships, invitations and watchlists; every member's claims move, and each hears of it. */
  async remove(principal: Principal, organizationId: string, context: RequestContext): Promise<{ id: string; deleted: true }> {
    return this.change(async (trx, changes) => {
      await this.lock(trx, organizationId)
      await this.require(trx, organizationId, principal.userId, ORGANIZATION_ALL)
      const members = await membershipStore.userIds(trx, organizationId)
      for (const subject of await subjectsOf(trx, members)) {
        await this.deps.events.emit(trx, 'organization.deleted', subject, { organization_id: organizationId, by: principal.userId })
      }
      await auditOrganization(trx, this.deps.clock, 'organization.deleted', organizationId, principal.userId, context)
      changes.push(...(await claimsChanged(trx, members)))
      await organizationStore.remove(trx, organizationId)
      return { id: organizationId, deleted: true as const }
    })
  }

  /**
   * The member at `userId` and their roles, for a change by `actorId`: the actor needs `permission`,
   * and, acting on someone else, must hold every permission the other member holds (an admin cannot
   * change or remove an owner). Not a member, or an id that is none: NOT_FOUND.
   */
  private async target(trx: Executor, organizationId: string, actorId: string, userId: string, permission: string | null) {
    const actor = await this.require(trx, organizationId, actorId, permission)
    if (userId === actorId) return { actor, roles: actor.roles }
    const roles = isUuid(userId) ? await rolesIn(trx, organizationId, userId) : null
    if (roles === null) throw new AppError('NOT_FOUND')
    const beyond = (await permissionsOfRoles(trx, roles)).filter((p) => !grants(actor.permissions, p, true))
    if (beyond.length > 0) throw new AppError('FORBIDDEN', { message: 'This member holds permissions you do not hold yourself.' })
    return { actor, roles }
  }

  /** Refuses what would leave an organisation that has other members without an owner. */
  private async assertNotLastOwner(trx: Executor, organizationId: string, userId: string, roles: string[]): Promise<void> {
    if (!roles.includes(OWNER_ROLE)) return
    const owners = await membershipStore.holding(trx, organizationId, OWNER_ROLE)
    if (owners.some((owner) => owner.user_id !== userId)) return
    if ((await membershipStore.count(trx, organizationId)) > 1) throw new AppError('LAST_OWNER')
  }

  /** Sets a member's roles, all of them (`members:manage`); nobody grants a permission they lack. */
  async setRoles(principal: Principal, organizationId: string, userId: string, roles: string[], context: RequestContext) {
    return this.change(async (trx, changes) => {
      await this.lock(trx, organizationId)
      const { actor, roles: before } = await this.target(trx, organizationId, principal.userId, userId, 'members:manage')
      await assertGrantable(trx, actor.permissions, roles)
      if (!roles.includes(OWNER_ROLE)) await this.assertNotLastOwner(trx, organizationId, userId, before)
      await membershipStore.setRoles(trx, organizationId, userId, roles.join(' '))
      changes.push(...(await claimsChanged(trx, [userId])))
      await assertClaimsFit(trx, userId, organizationId)
      const [subject] = await subjectsOf(trx, [userId])
      await this.deps.events.emit(trx, 'organization.member_updated', subject!, { organization_id: organizationId, roles, previous_roles: before })
      await auditOrganization(trx, this.deps.clock, 'organization.member_updated', organizationId, userId, actingOn(context, principal.userId, userId))
      const member = (await membershipStore.findWithUser(trx, organizationId, userId))!
      return { member: memberView(member) }
    })
  }

  /**
   * Removes a member (`members:manage`), or the caller leaves (their own id, no permission needed).
   * The last owner of an organisation with other members cannot leave (LAST_OWNER); the last member
   * leaving takes the organisation with them, since nobody could see or reach it any more.
   */
  async removeMember(principal: Principal, organizationId: string, userId: string, context: RequestContext) {
    return this.change(async (trx, changes) => {
      await this.lock(trx, organizationId)
      const leaving = userId === principal.userId
      const { roles } = await this.target(trx, organizationId, principal.userId, userId, leaving ? null : 'members:manage')
      await this.assertNotLastOwner(trx, organizationId, userId, roles)
      const alone = (await membershipStore.count(trx, organizationId)) === 1
      const [subject] = await subjectsOf(trx, [userId])
      await membershipStore.remove(trx, organizationId, userId)
      changes.push(...(await claimsChanged(trx, [userId])))
      await this.deps.events.emit(trx, 'organization.member_removed', subject!, { organization_id: organizationId, reason: leaving ? 'left' : 'removed' })
      await auditOrganization(trx, this.deps.clock, 'organization.member_removed', organizationId, userId, actingOn(context, principal.userId, userId))
      if (alone) {
        await this.deps.events.emit(trx, 'organization.deleted', subject!, { organization_id: organizationId, reason: 'last_member_left' })
        await auditOrganization(trx, this.deps.clock, 'organization.deleted', organizationId, userId, context)
        await organizationStore.remove(trx, organizationId)
      }
      return { organization_id: organizationId, user_id: userId, removed: true as const }
    })
  }
}

import type { Kysely, Selectable } from 'kysely'
import { proofStands } from '../auth/pending-proofs.ts'
import type { Engine } from '../db/index.ts'
import type { Database, InvitationsTable, MembershipsTable, OrganizationsTable } from '../db/schema.ts'
import { holdsRole } from './store.ts'

type Executor = Kysely<Database>
export type OrganizationRow = Selectable<OrganizationsTable>
export type MembershipRow = Selectable<MembershipsTable>
export type InvitationRow = Selectable<InvitationsTable>

const memberRows = (db: Executor, organizationId: string) =>
  db
    .selectFrom('memberships')
    .innerJoin('users', 'users.id', 'memberships.user_id')
    .select(['memberships.user_id', 'memberships.roles', 'memberships.joined_at', 'users.email', 'users.full_name'])
    .where('memberships.organization_id', '=', organizationId)

/** Organisations and their memberships (migration 0021). */
export const organizationStore = {
  async insert(db: Executor, row: OrganizationRow): Promise<void> {
    await db.insertInto('organizations').values(row).execute()
  },

  async find(db: Executor, id: string): Promise<OrganizationRow | null> {
    return (await db.selectFrom('organizations').selectAll().where('id', '=', id).executeTakeFirst()) ?? null
  },

  /**
   * Takes the organisation's row lock for the rest of the transaction, or finds it gone. Every
   * change to its memberships takes it first, so they are serialised per organisation (two owners
   * leaving at once cannot both see the other still there). PostgreSQL locks the row; SQLite has one
   * writer at a time, and its transactions here run one after another on the one connection.
   */
  async lock(db: Executor, engine: Engine, ids: string[]): Promise<OrganizationRow[]> {
    if (ids.length === 0) return []
    // In id order, so two transactions locking several never wait on each other crosswise.
    const query = db.selectFrom('organizations').selectAll().where('id', 'in', ids).orderBy('id')
    return engine === 'postgres' ? query.forUpdate().execute() : query.execute()
  },

  async rename(db: Executor, id: string, name: string, now: number): Promise<void> {
    await db.updateTable('organizations').set({ name, updated_at: now }).where('id', '=', id).execute()
  },

  /** Its memberships, invitations and watchlists go with it (foreign keys). */
  async remove(db: Executor, id: string): Promise<void> {
    await db.deleteFrom('organizations').where('id', '=', id).execute()
  },
}

export const membershipStore = {
  async find(db: Executor, organizationId: string, userId: string): Promise<MembershipRow | null> {
    return (await db.selectFrom('memberships').selectAll().where('organization_id', '=', organizationId).where('user_id', '=', userId).executeTakeFirst()) ?? null
  },

  async insert(db: Executor, row: MembershipRow): Promise<void> {
    await db.insertInto('memberships').values(row).execute()
  },

  async setRoles(db: Executor, organizationId: string, userId: string, roles: string): Promise<void> {
    await db.updateTable('memberships').set({ roles }).where('organization_id', '=', organizationId).where('user_id', '=', userId).execute()
  },

  async remove(db: Executor, organizationId: string, userId: string): Promise<void> {
    await db.deleteFrom('memberships').where('organization_id', '=', organizationId).where('user_id', '=', userId).execute()
  },

  /** Every member's id (an organisation's deletion moves all their claims). */
  async userIds(db: Executor, organizationId: string): Promise<string[]> {
    return (await db.selectFrom('memberships').select('user_id').where('organization_id', '=', organizationId).execute()).map((row) => row.user_id)
  },

  async count(db: Executor, organizationId: string): Promise<number> {
    const row = await db.selectFrom('memberships').select((eb) => eb.fn.countAll<number | string>().as('n')).where('organization_id', '=', organizationId).executeTakeFirstOrThrow()
    return Number(row.n)
  },

  /** Every member, the longest-standing first. */
  async membersByJoining(db: Executor, organizationId: string): Promise<MembershipRow[]> {
    return db.selectFrom('memberships').selectAll().where('organization_id', '=', organizationId).orderBy('joined_at').orderBy('user_id').execute()
  },

  /** The members holding `role` (the owners, the admins). */
  async holding(db: Executor, organizationId: string, role: string): Promise<MembershipRow[]> {
    return db.selectFrom('memberships').selectAll().where('organization_id', '=', organizationId).where(holdsRole('memberships.roles', role)).execute()
  },

  /** The user's memberships with their organisations' names, oldest first. */
  async ofUser(db: Executor, userId: string): Promise<(MembershipRow & { name: string; created_at: number })[]> {
    return db
      .selectFrom('memberships')
      .innerJoin('organizations', 'organizations.id', 'memberships.organization_id')
      .select(['memberships.organization_id', 'memberships.user_id', 'memberships.roles', 'memberships.joined_at', 'organizations.name', 'organizations.created_at'])
      .where('memberships.user_id', '=', userId)
      .orderBy('memberships.joined_at')
      .orderBy('memberships.organization_id')
      .execute()
  },

  /** One member with their name and address, as the member listing shows them. */
  async findWithUser(db: Executor, organizationId: string, userId: string) {
    return (await memberRows(db, organizationId).where('memberships.user_id', '=', userId).executeTakeFirst()) ?? null
  },

  /**
   * One keyset page of an organisation's members in user-id order: a range of the primary key
   * (organization_id, user_id), so a page costs the same in an organisation of any size.
   */
  async page(db: Executor, organizationId: string, afterUserId: string | null, limit: number) {
    return memberRows(db, organizationId)
      .where('memberships.user_id', '>', afterUserId ?? '')
      .orderBy('memberships.user_id')
      .limit(limit)
      .execute()
  },

  /** The roles of the catalogue among `roles`: a membership may only hold those. */
  async knownRoles(db: Executor, roles: string[]): Promise<Set<string>> {
    if (roles.length === 0) return new Set()
    return new Set((await db.selectFrom('roles').select('name').where('name', 'in', roles).execute()).map((row) => row.name))
  },
}

/** Invitations: mailed single-use links, kept as their SHA-256 (a pending proof, src/auth/pending-proofs.ts). */
export const invitationStore = {
  async insert(db: Executor, row: InvitationRow): Promise<void> {
    await db.insertInto('invitations').values(row).execute()
  },

  /** Still usable: unused, unexpired, and standing (the account it was made for has not ended all its sessions since). */
  pending(db: Executor, now: number) {
    return db.selectFrom('invitations').where('invitations.used_at', 'is', null).where('invitations.expires_at', '>', now).where(proofStands('invitations', now))
  },

  async findPending(db: Executor, tokenHash: string, now: number): Promise<InvitationRow | null> {
    return (await invitationStore.pending(db, now).selectAll().where('token_hash', '=', tokenHash).executeTakeFirst()) ?? null
  },

  /** An organisation's pending invitations, oldest first; `invited_by` is null once the inviter's account is gone. */
  async listPending(db: Executor, organizationId: string, now: number): Promise<InvitationRow[]> {
    return invitationStore
      .pending(db, now)
      .leftJoin('users', 'users.id', 'invitations.invited_by')
      .select([
        'invitations.id', 'invitations.organization_id', 'invitations.email', 'invitations.roles', 'invitations.token_hash', 'invitations.user_id',
        'invitations.credential_epoch', 'invitations.created_at', 'invitations.expires_at', 'invitations.used_at', 'users.id as invited_by',
      ])
      .where('invitations.organization_id', '=', organizationId)
      .orderBy('invitations.created_at')
      .orderBy('invitations.id')
      .execute()
  },

  async countPending(db: Executor, organizationId: string, now: number): Promise<number> {
    const row = await invitationStore.pending(db, now).select((eb) => eb.fn.countAll<number | string>().as('n')).where('organization_id', '=', organizationId).executeTakeFirstOrThrow()
    return Number(row.n)
  },

  /** When the invitations made for an organisation since `since` were made (used, withdrawn or not), oldest first, with their addresses: its mail budget. */
  async madeSince(db: Executor, organizationId: string, since: number): Promise<{ created_at: number; email: string }[]> {
    return db.selectFrom('invitations').select(['created_at', 'email']).where('organization_id', '=', organizationId).where('created_at', '>', since).orderBy('created_at').execute()
  },

  /**
   * Spends one, if it still is pending and standing: of two uses at once (an acceptance and a
   * withdrawal, or two acceptances), one wins. A withdrawn invitation is spent, not deleted, so it
   * still counts against the organisation's mail budget.
   */
  async spend(db: Executor, id: string, now: number): Promise<boolean> {
    const result = await db
      .updateTable('invitations')
      .set({ used_at: now })
      .where('id', '=', id)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .where(proofStands('invitations', now))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /** Retires the organisation's pending invitations to an address (a new one replaces them). */
  async retireTo(db: Executor, organizationId: string, email: string, now: number): Promise<void> {
    await db.updateTable('invitations').set({ used_at: now }).where('organization_id', '=', organizationId).where('email', '=', email).where('used_at', 'is', null).execute()
  },

  /**
   * An account is deleted: every invitation to its address goes, pending or spent (those made to the
   * account itself would go with it by foreign key; these are the ones made before it had the address).
   */
  async removeTo(db: Executor, email: string): Promise<void> {
    await db.deleteFrom('invitations').where('email', '=', email).execute()
  },

  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('invitations').select('id').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('invitations').where('id', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

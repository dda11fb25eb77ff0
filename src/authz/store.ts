import { sql, type Kysely, type Selectable } from 'kysely'
import type { Engine } from '../db/index.ts'
import type { Database, RolesTable } from '../db/schema.ts'
import { words } from './permissions.ts'

type Executor = Kysely<Database>

/** A role list stored space-separated holds `role` (the padding makes the match whole-word). */
export const holdsRole = (column: string, role: string) => sql<boolean>`(' ' || ${sql.ref(column)} || ' ') like ${`% ${role} %`}`

/** The reads behind a token's claims (src/authz/claims.ts), and the moves of a user's claims version. */
export const claimsStore = {
  /** The account's claims version and app_metadata, read first: claims read after it are never older than it says. */
  async account(db: Executor, userId: string): Promise<{ claims_version: number; app_metadata: string | null } | null> {
    return (await db.selectFrom('users').select(['claims_version', 'app_metadata']).where('id', '=', userId).executeTakeFirst()) ?? null
  },

  /** The user's global roles with their permissions (space-separated). */
  async globalRoles(db: Executor, userId: string): Promise<{ name: string; permissions: string }[]> {
    return db
      .selectFrom('user_roles')
      .innerJoin('roles', 'roles.name', 'user_roles.role')
      .select(['roles.name', 'roles.permissions'])
      .where('user_roles.user_id', '=', userId)
      .orderBy('roles.name')
      .execute()
  },

  /** The user's roles in one organisation (space-separated), or null when not a member. */
  async membershipRoles(db: Executor, organizationId: string, userId: string): Promise<string | null> {
    const row = await db.selectFrom('memberships').select('roles').where('organization_id', '=', organizationId).where('user_id', '=', userId).executeTakeFirst()
    return row?.roles ?? null
  },

  /** The permissions of these roles, by name. */
  async permissionsOf(db: Executor, roles: string[]): Promise<Map<string, string>> {
    if (roles.length === 0) return new Map()
    const rows = await db.selectFrom('roles').select(['name', 'permissions']).where('name', 'in', roles).execute()
    return new Map(rows.map((row) => [row.name, row.permissions]))
  },

  /** Moves these users' claims versions: their older access tokens are now out of date. */
  async bump(db: Executor, userIds: string[]): Promise<void> {
    if (userIds.length === 0) return
    await db.updateTable('users').set({ claims_version: sql`claims_version + 1` }).where('id', 'in', userIds).execute()
  },

  /** Moves the claims version of everyone holding `role`, globally or in any organisation. */
  async bumpHolders(db: Executor, role: string): Promise<void> {
    await db
      .updateTable('users')
      .set({ claims_version: sql`claims_version + 1` })
      .where((eb) =>
        eb.or([
          eb('id', 'in', eb.selectFrom('user_roles').select('user_id').where('role', '=', role)),
          eb('id', 'in', eb.selectFrom('memberships').select('user_id').where(holdsRole('memberships.roles', role))),
        ]),
      )
      .execute()
  },
}

export type RoleRow = Selectable<RolesTable>

/** Where a role is held: users holding it globally, and memberships holding it in an organisation. */
export interface RoleHolders {
  /** Users holding the role globally. */
  users: string[]
  /** Memberships holding it, with their roles (space-separated). */
  memberships: { organization_id: string; user_id: string; roles: string }[]
}

/**
 * The roles catalogue and users' global roles and metadata (src/authz/roles.ts). The lock helpers
 * take PostgreSQL row locks in one order, users before roles, which is also the organisations'
 * order (organisations, then users): changes of a user's roles, of their app_metadata and of the
 * catalogue then never wait on each other crosswise. SQLite runs one writing transaction at a time.
 */
export const roleStore = {
  async list(db: Executor): Promise<RoleRow[]> {
    return db.selectFrom('roles').selectAll().orderBy('name').execute()
  },

  async find(db: Executor, name: string): Promise<RoleRow | null> {
    return (await db.selectFrom('roles').selectAll().where('name', '=', name).executeTakeFirst()) ?? null
  },

  /** The role's row, locked for the rest of the transaction (PostgreSQL); null when there is none. */
  async lock(db: Executor, engine: Engine, name: string): Promise<RoleRow | null> {
    const query = db.selectFrom('roles').selectAll().where('name', '=', name)
    return (await (engine === 'postgres' ? query.forUpdate() : query).executeTakeFirst()) ?? null
  },

  /**
   * Which of these roles exist, holding them for the rest of the transaction (a shared lock on
   * PostgreSQL): a change of their permissions, or their removal, waits for the grant to commit,
   * and then sees the new holder.
   */
  async holdExisting(db: Executor, engine: Engine, names: string[]): Promise<Set<string>> {
    if (names.length === 0) return new Set()
    const query = db.selectFrom('roles').select('name').where('name', 'in', names).orderBy('name')
    const rows = await (engine === 'postgres' ? query.forShare() : query).execute()
    return new Set(rows.map((row) => row.name))
  },

  /** False when the name is taken. */
  async insert(db: Executor, row: RoleRow): Promise<boolean> {
    const result = await db.insertInto('roles').values(row).onConflict((oc) => oc.column('name').doNothing()).executeTakeFirst()
    return (result.numInsertedOrUpdatedRows ?? 0n) > 0n
  },

  async update(db: Executor, name: string, changes: { description?: string | null; permissions?: string }, now: number): Promise<void> {
    await db.updateTable('roles').set({ ...changes, updated_at: now }).where('name', '=', name).execute()
  },

  async remove(db: Executor, name: string): Promise<void> {
    await db.deleteFrom('user_roles').where('role', '=', name).execute()
    await db.deleteFrom('roles').where('name', '=', name).execute()
  },

  /** Where the role is held now: every user holding it globally, every membership holding it. */
  async holders(db: Executor, name: string): Promise<RoleHolders> {
    const [global, memberships] = await Promise.all([
      db.selectFrom('user_roles').select('user_id').where('role', '=', name).orderBy('user_id').execute(),
      db.selectFrom('memberships').select(['organization_id', 'user_id', 'roles']).where(holdsRole('memberships.roles', name)).orderBy('organization_id').orderBy('user_id').execute(),
    ])
    // The pattern's `_` matches any one character: the words themselves decide.
    return { users: global.map((row) => row.user_id), memberships: memberships.filter((row) => words(row.roles).includes(name)) }
  },

  /** The organisations of the users holding the role globally (their tokens there carry their global claims too). */
  async organizationsOfGlobalHolders(db: Executor, name: string): Promise<{ user_id: string; organization_id: string }[]> {
    return db
      .selectFrom('memberships')
      .select(['user_id', 'organization_id'])
      .where('user_id', 'in', (eb) => eb.selectFrom('user_roles').select('user_id').where('role', '=', name))
      .execute()
  },

  /** The organisations one user belongs to. */
  async organizationsOf(db: Executor, userId: string): Promise<string[]> {
    return (await db.selectFrom('memberships').select('organization_id').where('user_id', '=', userId).orderBy('organization_id').execute()).map((row) => row.organization_id)
  },

  /**
   * The accounts holding the role (a few more, where the pattern's `_` matches another name), with
   * their addresses; with `lock`, taking their row locks (PostgreSQL) in id order, so two such
   * transactions never wait on each other crosswise.
   */
  async holderAccounts(db: Executor, engine: Engine, name: string, lock: boolean): Promise<{ id: string; email: string }[]> {
    const query = db
      .selectFrom('users')
      .select(['id', 'email'])
      .where((eb) =>
        eb.or([
          eb('id', 'in', eb.selectFrom('user_roles').select('user_id').where('role', '=', name)),
          eb('id', 'in', eb.selectFrom('memberships').select('user_id').where(holdsRole('memberships.roles', name))),
        ]),
      )
      .orderBy('id')
    return lock && engine === 'postgres' ? query.forUpdate().execute() : query.execute()
  },

  /** The global roles of the users holding `name` anywhere, by user (what their `user.roles_changed` events say). */
  async globalRolesOfHolders(db: Executor, name: string): Promise<Map<string, string[]>> {
    const rows = await db
      .selectFrom('user_roles')
      .select(['user_id', 'role'])
      .where((eb) =>
        eb.or([
          eb('user_id', 'in', eb.selectFrom('user_roles as held').select('held.user_id').where('held.role', '=', name)),
          eb('user_id', 'in', eb.selectFrom('memberships').select('user_id').where(holdsRole('memberships.roles', name))),
        ]),
      )
      .orderBy('user_id')
      .orderBy('role')
      .execute()
    const byUser = new Map<string, string[]>()
    for (const row of rows) byUser.set(row.user_id, [...(byUser.get(row.user_id) ?? []), row.role])
    return byUser
  },

  async userRoles(db: Executor, userId: string): Promise<string[]> {
    return (await db.selectFrom('user_roles').select('role').where('user_id', '=', userId).orderBy('role').execute()).map((row) => row.role)
  },

  /** Replaces the user's global roles with these. */
  async setUserRoles(db: Executor, userId: string, roles: string[], now: number): Promise<void> {
    await db.deleteFrom('user_roles').where('user_id', '=', userId).execute()
    if (roles.length > 0) await db.insertInto('user_roles').values(roles.map((role) => ({ user_id: userId, role, created_at: now }))).execute()
  },

  async insertUserRoles(db: Executor, rows: { user_id: string; role: string; created_at: number }[]): Promise<void> {
    if (rows.length > 0) await db.insertInto('user_roles').values(rows).execute()
  },

  async setMembershipRoles(db: Executor, organizationId: string, userId: string, roles: string): Promise<void> {
    await db.updateTable('memberships').set({ roles }).where('organization_id', '=', organizationId).where('user_id', '=', userId).execute()
  },

  async setAppMetadata(db: Executor, userId: string, value: string | null, now: number): Promise<void> {
    await db.updateTable('users').set({ app_metadata: value, updated_at: now }).where('id', '=', userId).execute()
  },
}

import type { Kysely } from 'kysely'

/**
 * Who may do what (docs/authorization.md):
 * - `roles`: the catalogue, defined at run time. `permissions` is space-separated (a permission
 *   never holds a space). The built-in roles are seeded here and marked `builtin`: editable, never
 *   removed.
 * - `user_roles`: a user's global roles.
 * - `users.app_metadata` (operators) and `users.user_metadata` (the user): JSON objects, null when
 *   unset. `users.claims_version` moves with every change to what the user's tokens claim (roles,
 *   a role's permissions, app_metadata, memberships): an access token carrying an older one is
 *   TOKEN_EXPIRED (src/auth/service.ts, authenticate).
 * - `sessions.organization_id`: the session's active organisation, carried into its access tokens.
 * - `organizations`, `memberships` (a member's roles in one organisation, space-separated) and
 *   `invitations` (a mailed single-use link, stored as its SHA-256; a pending proof judged like the
 *   others, src/auth/pending-proofs.ts: `user_id` and `credential_epoch` are those of the account
 *   that had the address when it was invited, if any).
 */
export const BUILT_IN_ROLES: { name: string; description: string; permissions: string[] }[] = [
  { name: 'owner', description: 'Every permission of an organisation', permissions: ['organization:*'] },
  { name: 'admin', description: 'Invites and manages members; reads and changes watchlists', permissions: ['members:invite', 'members:manage', 'watchlists:read', 'watchlists:write'] },
  { name: 'member', description: 'Reads watchlists', permissions: ['watchlists:read'] },
  { name: 'operator', description: 'Uses the operators\' console, reading and changing', permissions: ['console:read', 'console:write'] },
  { name: 'viewer', description: 'Uses the operators\' console, reading only', permissions: ['console:read'] },
]

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('roles')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('description', 'text')
    .addColumn('permissions', 'text', (c) => c.notNull())
    .addColumn('builtin', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute()
  const now = Date.now()
  await db
    .insertInto('roles')
    .values(BUILT_IN_ROLES.map((role) => ({ name: role.name, description: role.description, permissions: role.permissions.join(' '), builtin: 1, created_at: now, updated_at: now })))
    .execute()

  await db.schema
    .createTable('user_roles')
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('role', 'text', (c) => c.notNull().references('roles.name').onDelete('cascade'))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('user_roles_pk', ['user_id', 'role'])
    .execute()
  await db.schema.createIndex('user_roles_role_idx').on('user_roles').column('role').execute()

  await db.schema.alterTable('users').addColumn('app_metadata', 'text').execute()
  await db.schema.alterTable('users').addColumn('user_metadata', 'text').execute()
  await db.schema.alterTable('users').addColumn('claims_version', 'integer', (c) => c.notNull().defaultTo(0)).execute()
  await db.schema.alterTable('sessions').addColumn('organization_id', 'text').execute()

  await db.schema
    .createTable('organizations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute()

  await db.schema
    .createTable('memberships')
    .addColumn('organization_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('roles', 'text', (c) => c.notNull())
    .addColumn('joined_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('memberships_pk', ['organization_id', 'user_id'])
    .execute()
  await db.schema.createIndex('memberships_user_idx').on('memberships').column('user_id').execute()

  await db.schema
    .createTable('invitations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('roles', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('invited_by', 'text')
    .addColumn('user_id', 'text', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('credential_epoch', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('used_at', 'bigint')
    .execute()
  await db.schema.createIndex('invitations_org_idx').on('invitations').columns(['organization_id', 'created_at']).execute()
  await db.schema.createIndex('invitations_email_idx').on('invitations').column('email').execute()
  // The account's deletion cascades here.
  await db.schema.createIndex('invitations_user_idx').on('invitations').column('user_id').execute()
  await db.schema.createIndex('invitations_expires_at_idx').on('invitations').column('expires_at').execute()
  // Organisation-owned watchlists (docs/authorization.md): owned by a user or by an organisation.
  await db.schema.alterTable('watchlists').addColumn('organization_id', 'text', (c) => c.references('organizations.id').onDelete('cascade')).execute()
  await db.schema.createIndex('watchlists_org_idx').on('watchlists').columns(['organization_id', 'created_at']).execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('watchlists_org_idx').execute()
  await db.schema.alterTable('watchlists').dropColumn('organization_id').execute()
  for (const table of ['invitations', 'memberships', 'organizations', 'user_roles', 'roles']) await db.schema.dropTable(table).execute()
  await db.schema.alterTable('sessions').dropColumn('organization_id').execute()
  for (const column of ['claims_version', 'user_metadata', 'app_metadata']) await db.schema.alterTable('users').dropColumn(column).execute()
}

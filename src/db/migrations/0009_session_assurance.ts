import type { Kysely } from 'kysely'

/**
 * How a session was authenticated (docs/tokens.md): `amr` (RFC 8176 values, space-separated),
 * `acr` (`aal1` or `aal2`) and `auth_time` (when it was last verified; null reads as its creation).
 * Every session before this release was opened by a password alone.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sessions').addColumn('amr', 'text', (c) => c.notNull().defaultTo('pwd')).execute()
  await db.schema.alterTable('sessions').addColumn('acr', 'text', (c) => c.notNull().defaultTo('aal1')).execute()
  await db.schema.alterTable('sessions').addColumn('auth_time', 'bigint').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const column of ['auth_time', 'acr', 'amr']) await db.schema.alterTable('sessions').dropColumn(column).execute()
}

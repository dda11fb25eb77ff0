import type { Kysely } from 'kysely'

/**
 * The APIs operators register as resources that accept the provider's access tokens besides
 * Portcullis's own (docs/provider.md, "Resources"): an access token asked for with `resource=` one of
 * them carries that URI as its audience and only that resource's scopes. `scopes` is a JSON array of
 * `{name, description}`.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('resources')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('uri', 'text', (c) => c.notNull().unique())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('resources').execute()
}

import type { Kysely } from 'kysely'

/**
 * The console's list of every organisation pages on (created_at, id), oldest first
 * (OrganizationService.listAll): without an index each page read and sorted the whole table.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('organizations_created_idx').on('organizations').columns(['created_at', 'id']).execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('organizations_created_idx').execute()
}

import type { Kysely } from 'kysely'

// Every audit row updated four indexes; `audit_events_at_id_idx` (at, id) serves everything
// `audit_events_at_idx` (at) did, so the narrower one goes: one B-tree fewer on every event write.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('audit_events_at_idx').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('audit_events_at_idx').on('audit_events').column('at').execute()
}

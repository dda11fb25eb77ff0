import type { Kysely } from 'kysely'

export async function up(db: Kysely<any>): Promise<void> {
  // The revocation feed: every instance polls the recent rows to keep its in-memory view of
  // revoked sessions and changed accounts current. Rows are short-lived (pruned after an hour).
  await db.schema
    .createTable('auth_changes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('auth_changes_created_at_idx').on('auth_changes').column('created_at').execute()

  // The audit trail. No foreign key: the record of what happened outlives the account.
  await db.schema
    .createTable('audit_events')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('at', 'bigint', (c) => c.notNull())
    .addColumn('user_id', 'text')
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('reason', 'text')
    .addColumn('ip', 'text')
    .addColumn('user_agent', 'text')
    .addColumn('request_id', 'text')
    .execute()
  await db.schema.createIndex('audit_events_at_idx').on('audit_events').column('at').execute()
  await db.schema.createIndex('audit_events_user_at_idx').on('audit_events').columns(['user_id', 'at']).execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('audit_events').execute()
  await db.schema.dropTable('auth_changes').execute()
}

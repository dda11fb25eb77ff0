import type { CreateTableBuilder, Kysely } from 'kysely'

/**
 * A durable queue's table (src/queue/table.ts) as a migration makes it: the id, the queue's own
 * payload columns (`payload`), then the lease, attempts and outcome columns every queue has, and the
 * two indexes its shared calls read (what is due; what was given up). Migrations 0004 and 0014 wrote
 * the same columns out by hand before this existed; they stay as they ran.
 */
export async function createQueueTable(db: Kysely<any>, table: string, payload: (builder: CreateTableBuilder<string, never>) => CreateTableBuilder<string, never>): Promise<void> {
  await payload(db.schema.createTable(table).addColumn('id', 'text', (c) => c.primaryKey()))
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('lease_owner', 'text')
    .addColumn('lease_until', 'bigint')
    .addColumn('sent_at', 'bigint')
    .addColumn('failed_at', 'bigint')
    .addColumn('last_error', 'text')
    .execute()
  await db.schema.createIndex(`${table}_due_idx`).on(table).columns(['sent_at', 'failed_at', 'next_attempt_at']).execute()
  await db.schema.createIndex(`${table}_failed_at_idx`).on(table).column('failed_at').execute()
}

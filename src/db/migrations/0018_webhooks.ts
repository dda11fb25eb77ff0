import type { Kysely } from 'kysely'
import { createQueueTable } from './queue-table.ts'

/**
 * Webhooks (docs/webhooks.md):
 * - `webhook_endpoints`: where events go, registered by operators. The signing secret is sealed
 *   under KEY_ENCRYPTION_KEY; after a rotation the previous one also signs until
 *   `previous_secret_until`. `failing_since` is the first failure after the last success: three
 *   days of it disable the endpoint.
 * - `webhook_deliveries`: the outbox and the durable queue in one (src/queue/durable.ts): one row per
 *   event and endpoint, written in the transaction of the change. `event_id` is the event's
 *   webhook-id, the same on every attempt; `sequence` orders one user's events. `payload` is
 *   emptied a week after the outcome; the row stays as the log.
 * - `webhook_sequences`: the last sequence number given to each user's events.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('webhook_endpoints')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('url', 'text', (c) => c.notNull())
    // Space-separated event types, or `*`.
    .addColumn('events', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('enabled', 'integer', (c) => c.notNull())
    .addColumn('secret', 'text', (c) => c.notNull())
    .addColumn('previous_secret', 'text')
    .addColumn('previous_secret_until', 'bigint')
    .addColumn('failing_since', 'bigint')
    .addColumn('disabled_reason', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute()

  await createQueueTable(db, 'webhook_deliveries', (table) =>
    table
      .addColumn('event_id', 'text', (c) => c.notNull())
      .addColumn('endpoint_id', 'text', (c) => c.notNull().references('webhook_endpoints.id').onDelete('cascade'))
      .addColumn('user_id', 'text', (c) => c.notNull())
      .addColumn('sequence', 'integer', (c) => c.notNull())
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('payload', 'text')
      .addColumn('last_status', 'integer'),
  )
  // What holds a user's later events back (the earlier ones still pending), and the log's pages.
  await db.schema.createIndex('webhook_deliveries_order_idx').on('webhook_deliveries').columns(['endpoint_id', 'user_id', 'sequence']).execute()
  await db.schema.createIndex('webhook_deliveries_log_idx').on('webhook_deliveries').columns(['endpoint_id', 'created_at', 'id']).execute()
  await db.schema.createIndex('webhook_deliveries_sent_at_idx').on('webhook_deliveries').column('sent_at').execute()

  await db.schema
    .createTable('webhook_sequences')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    .addColumn('last', 'integer', (c) => c.notNull())
    .execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['webhook_sequences', 'webhook_deliveries', 'webhook_endpoints']) await db.schema.dropTable(table).execute()
}

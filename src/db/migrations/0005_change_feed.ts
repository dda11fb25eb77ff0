import type { Kysely } from 'kysely'
import { databaseNowMs } from '../now.ts'

/**
 * The change feed replaces `auth_changes`: rows are numbered by the database and stamped by the
 * database's clock (a column default), never by an instance's, so instances whose clocks disagree
 * still read and prune one timeline. `auth_changes` stays for instances of the previous release
 * during a rolling upgrade; a later migration drops it.
 */
export function changeFeed(engine: 'sqlite' | 'postgres') {
  return {
    async up(db: Kysely<any>): Promise<void> {
      await db.schema
        .createTable('change_feed')
        .addColumn('seq', engine === 'postgres' ? 'bigint' : 'integer', (c) =>
          engine === 'postgres' ? c.generatedAlwaysAsIdentity().primaryKey() : c.primaryKey().autoIncrement(),
        )
        .addColumn('at', 'bigint', (c) => c.notNull().defaultTo(databaseNowMs(engine)))
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text')
        .addColumn('target_id', 'text')
        .execute()
      await db.schema.createIndex('change_feed_at_idx').on('change_feed').column('at').execute()
    },
    async down(db: Kysely<any>): Promise<void> {
      await db.schema.dropTable('change_feed').execute()
    },
  }
}

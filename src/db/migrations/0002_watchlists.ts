import type { Kysely } from 'kysely'

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('watchlists')
    .addColumn('id', 'text', (c) => c.primaryKey())
    // A deleted user's watchlists go with the user.
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    // Strictly increasing per user: the keyset for pagination, so new lists always sort last.
    .addColumn('position', 'bigint', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    // A JSON array of upper-case symbols, in the order the owner gave them.
    .addColumn('symbols', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('watchlists_user_position_key').on('watchlists').columns(['user_id', 'position']).unique().execute()

  // Service-wide random secrets (for example the key that signs pagination cursors), shared by instances.
  await db.schema
    .createTable('secrets')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('value', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('secrets').execute()
  await db.schema.dropTable('watchlists').execute()
}

import type { Kysely, Selectable } from 'kysely'
import type { ApiKeysTable, Database } from '../db/schema.ts'

export type ApiKeyRow = Selectable<ApiKeysTable>
type Executor = Kysely<Database>

/** Storage calls of the API keys. */
export const apiKeyStore = {
  async insert(db: Executor, row: ApiKeyRow): Promise<void> {
    await db.insertInto('api_keys').values(row).execute()
  },

  async find(db: Executor, id: string): Promise<ApiKeyRow | null> {
    return (await db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst()) ?? null
  },

  async list(db: Executor): Promise<ApiKeyRow[]> {
    return db.selectFrom('api_keys').selectAll().orderBy('created_at').orderBy('id').execute()
  },

  /** Revokes a live key; false when it does not exist or was already revoked. */
  async revoke(db: Executor, id: string, at: number): Promise<boolean> {
    const result = await db.updateTable('api_keys').set({ revoked_at: at }).where('id', '=', id).where('revoked_at', 'is', null).executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /** Moves last_used_at forward only (instances may report out of order). */
  async touch(db: Executor, id: string, at: number): Promise<void> {
    await db
      .updateTable('api_keys')
      .set({ last_used_at: at })
      .where('id', '=', id)
      .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', at)]))
      .execute()
  },
}

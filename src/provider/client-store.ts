import type { Kysely, Selectable } from 'kysely'
import { hotQuery } from '../db/hot-query.ts'
import type { Db } from '../db/index.ts'
import type { Database, OpClientsTable } from '../db/schema.ts'

/** The client registry's storage calls (table op_clients; op_records only to end a removed client's grants). */
type Executor = Kysely<Database>
export type ClientRow = Selectable<OpClientsTable>

const clientById = hotQuery<{ clientId: string }, ClientRow>((db, arg) => db.selectFrom('op_clients').selectAll().where('client_id', '=', arg('clientId')))

export const clientStore = {
  async insert(db: Executor, row: ClientRow): Promise<void> {
    await db.insertInto('op_clients').values(row).execute()
  },

  async find(db: Executor, clientId: string): Promise<ClientRow | null> {
    return (await clientById(db, { clientId }))[0] ?? null
  },

  /** find, outside any transaction, over committed rows (on SQLite at once, on its reader connection): every token request's. */
  async read(db: Db, clientId: string): Promise<ClientRow | null> {
    return (await clientById.committed(db, { clientId }))[0] ?? null
  },

  async list(db: Executor): Promise<ClientRow[]> {
    return db.selectFrom('op_clients').selectAll().orderBy('created_at').orderBy('client_id').execute()
  },

  /**
   * Takes the row's write lock for the rest of the transaction (an update, so it works alike on
   * both engines) and returns it: two PATCHes of one client merge one after the other instead of
   * the second overwriting the first with what it read before.
   */
  async lockForUpdate(db: Executor, clientId: string, at: number): Promise<ClientRow | null> {
    return (await db.updateTable('op_clients').set({ updated_at: at }).where('client_id', '=', clientId).returningAll().executeTakeFirst()) ?? null
  },

  async update(db: Executor, clientId: string, changes: { metadata?: string; secret?: string | null }): Promise<void> {
    await db.updateTable('op_clients').set(changes).where('client_id', '=', clientId).execute()
  },

  async delete(db: Executor, clientId: string): Promise<boolean> {
    return (await db.deleteFrom('op_clients').where('client_id', '=', clientId).executeTakeFirst()).numDeletedRows > 0n
  },

  /** Every grant, token, code and session record the provider library holds for the client. */
  async deleteRecordsOf(db: Executor, clientId: string): Promise<number> {
    return Number((await db.deleteFrom('op_records').where('client_id', '=', clientId).executeTakeFirst()).numDeletedRows)
  },

  /** A token was issued to the client: its last use, written at most once an hour (the caller throttles). */
  async touch(db: Executor, clientId: string, at: number): Promise<void> {
    await db.updateTable('op_clients').set({ last_used_at: at }).where('client_id', '=', clientId).execute()
  },

  /** Dynamic clients unused since `before` (never used: registered before it). */
  async idleDynamic(db: Executor, before: number, limit: number): Promise<string[]> {
    const rows = await db
      .selectFrom('op_clients')
      .select('client_id')
      .where('dynamic', '=', 1)
      .where((e) => e.or([e('last_used_at', '<', before), e.and([e('last_used_at', 'is', null), e('created_at', '<', before)])]))
      .limit(limit)
      .execute()
    return rows.map((row) => row.client_id)
  },

  async sealedSecrets(db: Executor): Promise<{ client_id: string; secret: string }[]> {
    return (await db.selectFrom('op_clients').select(['client_id', 'secret']).where('secret', 'is not', null).execute()) as { client_id: string; secret: string }[]
  },

  /** Swaps a sealed secret only if it is still the one read (a rewrap never undoes a rotation). */
  async replaceSecret(db: Executor, clientId: string, previous: string, next: string): Promise<void> {
    await db.updateTable('op_clients').set({ secret: next }).where('client_id', '=', clientId).where('secret', '=', previous).execute()
  },
}

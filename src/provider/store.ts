import type { Kysely, Selectable } from 'kysely'
import { hotQuery } from '../db/hot-query.ts'
import type { Db } from '../db/index.ts'
import type { Database, OpRecordsTable } from '../db/schema.ts'

/** The provider module's storage calls for what the library stores (table op_records, migration 0014). */
type Executor = Kysely<Database>
export type RecordRow = Selectable<OpRecordsTable>

// The token endpoint's statements, built and compiled once (src/db/hot-query.ts): a token request
// makes several, and Kysely's building and compiling of each was a measurable part of its cost.
const recordById = hotQuery<{ model: string; idHash: string; now: number }, RecordRow>((db, arg) =>
  db.selectFrom('op_records').selectAll().where('model', '=', arg('model')).where('id_hash', '=', arg('idHash')).where('expires_at', '>', arg('now')),
)
// Every column, checked by the compiler: a column added to op_records and left out here fails to build.
const UPSERTED = Object.keys({
  model: true, id_hash: true, grant_hash: true, uid_hash: true, user_code_hash: true, user_id: true, client_id: true, session_id: true,
  payload: true, successor: true, sids: true, created_at: true, last_used_at: true, expires_at: true, consumed_at: true,
} satisfies Record<keyof RecordRow, true>) as (keyof RecordRow)[]

const upsertRecord = hotQuery<RecordRow, never>((db, arg) => {
  const values = Object.fromEntries(UPSERTED.map((column) => [column, arg(column)])) as unknown as RecordRow
  const { model: _model, id_hash: _id, created_at: _created, ...changing } = values
  return db.insertInto('op_records').values(values).onConflict((oc) => oc.columns(['model', 'id_hash']).doUpdateSet(changing))
})
// A row is consumed by the one statement that finds it unconsumed; RETURNING tells that caller. A
// rotated refresh token's successor (sealed) is stored by the same statement; for anything else it is null.
const consumeRecord = hotQuery<{ model: string; idHash: string; now: number; successor: string | null }, { id_hash: string }>((db, arg) =>
  db
    .updateTable('op_records')
    .set({ consumed_at: arg('now'), successor: arg('successor') })
    .where('model', '=', arg('model'))
    .where('id_hash', '=', arg('idHash'))
    .where('consumed_at', 'is', null)
    .returning('id_hash'),
)
const touchGrantRecord = hotQuery<{ grantHash: string; at: number }, never>((db, arg) =>
  db.updateTable('op_records').set({ last_used_at: arg('at') }).where('model', '=', 'Grant').where('id_hash', '=', arg('grantHash')),
)

export const records = {
  /** Inserts or replaces the row of (model, id_hash): the library saves a model again after changing it. */
  async upsert(db: Executor, row: RecordRow): Promise<void> {
    await upsertRecord(db, row)
  },

  async find(db: Executor, model: string, idHash: string, now: number): Promise<RecordRow | null> {
    return (await recordById(db, { model, idHash, now }))[0] ?? null
  },

  /** find, outside any transaction, over committed rows (on SQLite at once, on its reader connection). */
  async read(db: Db, model: string, idHash: string, now: number): Promise<RecordRow | null> {
    return (await recordById.committed(db, { model, idHash, now }))[0] ?? null
  },

  async findBy(db: Executor, model: string, column: 'uid_hash' | 'user_code_hash', hash: string, now: number): Promise<RecordRow | null> {
    return (await db.selectFrom('op_records').selectAll().where('model', '=', model).where(column, '=', hash).where('expires_at', '>', now).executeTakeFirst()) ?? null
  },

  /** Marks a row consumed unless it already was: true for the one caller that did it. A rotated refresh token's successor goes with it. */
  async consume(db: Executor, model: string, idHash: string, now: number, successor: string | null = null): Promise<boolean> {
    return (await consumeRecord(db, { model, idHash, now, successor })).length > 0
  },

  /** Stores a rotated refresh token's successor (sealed) on its row, for the retry window. */
  async setSuccessor(db: Executor, model: string, idHash: string, successor: string): Promise<void> {
    await db.updateTable('op_records').set({ successor }).where('model', '=', model).where('id_hash', '=', idHash).execute()
  },

  async destroy(db: Executor, model: string, idHash: string): Promise<RecordRow | null> {
    const row = (await db.selectFrom('op_records').selectAll().where('model', '=', model).where('id_hash', '=', idHash).executeTakeFirst()) ?? null
    if (row) await db.deleteFrom('op_records').where('model', '=', model).where('id_hash', '=', idHash).execute()
    return row
  },

  /** Every row of a grant (the grant itself, its codes and tokens); returns the user they were for. */
  async destroyGrant(db: Executor, grantHash: string): Promise<string | null> {
    const owner = await db.selectFrom('op_records').select('user_id').where('grant_hash', '=', grantHash).where('user_id', 'is not', null).executeTakeFirst()
    await db.deleteFrom('op_records').where('grant_hash', '=', grantHash).execute()
    await db.deleteFrom('op_records').where('model', '=', 'Grant').where('id_hash', '=', grantHash).execute()
    return owner?.user_id ?? null
  },

  /** The grants of a user, newest first (the user's list of apps, the admin view, export). */
  async grantsOf(db: Executor, userId: string, now: number): Promise<RecordRow[]> {
    return db.selectFrom('op_records').selectAll().where('user_id', '=', userId).where('model', '=', 'Grant').where('expires_at', '>', now).orderBy('created_at', 'desc').execute()
  },

  /** Ends everything the provider holds for a user: grants, codes, tokens, its browser sessions. Returns the grants' hashes. */
  async destroyAllOf(db: Executor, userId: string): Promise<string[]> {
    const grants = await db.selectFrom('op_records').select('id_hash').where('user_id', '=', userId).where('model', '=', 'Grant').execute()
    await db.deleteFrom('op_records').where('user_id', '=', userId).execute()
    return grants.map((grant) => grant.id_hash)
  },

  async touchGrant(db: Executor, grantHash: string, at: number): Promise<void> {
    await touchGrantRecord(db, { grantHash, at })
  },

  /** Whether a grant is live: the check behind a JWT access token on Portcullis's own API. */
  async grantOwner(db: Executor, grantHash: string, now: number): Promise<string | null> {
    const row = await db.selectFrom('op_records').select('user_id').where('model', '=', 'Grant').where('id_hash', '=', grantHash).where('expires_at', '>', now).executeTakeFirst()
    return row?.user_id ?? null
  },

  async sessionsOfUser(db: Executor, userId: string): Promise<RecordRow[]> {
    return db.selectFrom('op_records').selectAll().where('user_id', '=', userId).where('model', '=', 'Session').execute()
  },

  // Only a provider session's row has a session_id (the adapter's upsert), so these two find them by
  // it alone: with `model = 'Session'` beside it both planners walked every provider session through
  // the primary key's (model) prefix instead of using op_records_session_idx.
  async destroySessionsOf(db: Executor, sessionIds: string[]): Promise<void> {
    if (sessionIds.length === 0) return
    await db.deleteFrom('op_records').where('session_id', 'in', sessionIds).execute()
  },

  /** Names the app a Portcullis session signed in to through the provider's pages. */
  async nameSession(db: Executor, sessionId: string, clientName: string): Promise<void> {
    await db.updateTable('sessions').set({ client_name: clientName.slice(0, 100) }).where('id', '=', sessionId).execute()
  },

  /** The provider sessions that are a Portcullis session (its end ends them). */
  async sessionsOf(db: Executor, sessionIds: string[]): Promise<RecordRow[]> {
    if (sessionIds.length === 0) return []
    return (await db.selectFrom('op_records').selectAll().where('session_id', 'in', sessionIds).execute()).filter((row) => row.model === 'Session')
  },

  /** Retention: up to `limit` rows that expired before `before` (each row's id_hash is unique: its model is in the hash). */
  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const rows = await db.selectFrom('op_records').select('id_hash').where('expires_at', '<', before).limit(limit).execute()
    if (rows.length === 0) return 0
    const result = await db.deleteFrom('op_records').where('id_hash', 'in', rows.map((row) => row.id_hash)).where('expires_at', '<', before).executeTakeFirst()
    return Number(result.numDeletedRows)
  },
}

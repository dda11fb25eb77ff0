import type { Kysely } from 'kysely'

/**
 * The provider's records (op_records) are mostly codes and tokens, which have no interaction uid,
 * device user code or Portcullis session: three of their indexes held a NULL entry for each of
 * them, written with every token the provider issues and never read (a lookup by uid, user code
 * or session asks for a value). They become partial indexes of the rows that have one. Both
 * planners still use them for `= ?` (test/integration/query-plans.test.ts runs those statements)
 * and for `in (...)` of several values (checked with EXPLAIN on both when this was written).
 */
const PARTIAL = [
  ['op_records_uid_idx', 'uid_hash'],
  ['op_records_user_code_idx', 'user_code_hash'],
  ['op_records_session_idx', 'session_id'],
] as const

export async function up(db: Kysely<any>): Promise<void> {
  for (const [name, column] of PARTIAL) {
    await db.schema.dropIndex(name).execute()
    await db.schema.createIndex(name).on('op_records').column(column).where(column, 'is not', null).execute()
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const [name, column] of PARTIAL) {
    await db.schema.dropIndex(name).execute()
    await db.schema.createIndex(name).on('op_records').column(column).execute()
  }
}

import type { Kysely, Selectable } from 'kysely'
import { proofStands } from '../auth/pending-proofs.ts'
import type { Database, EmailChangesTable } from '../db/schema.ts'

type Executor = Kysely<Database>
export type EmailChangeRow = Selectable<EmailChangesTable>

/** The pending changes of address (migration 0017). */
export const emailChanges = {
  /** A new change for the account; the one asked for before, if still live, ends (only the newest link works). */
  async replace(db: Executor, row: Omit<EmailChangeRow, 'used_at'>): Promise<void> {
    await emailChanges.retireAll(db, row.user_id, row.created_at)
    await db.insertInto('email_changes').values({ ...row, used_at: null }).execute()
  },

  /**
   * A change still pending: unused, unexpired, and standing as every pending proof must
   * (src/auth/pending-proofs.ts): the session that asked is live and the account's sessions have not
   * all ended since. `by` is the link's token hash, or the cancelling link's.
   */
  async findLive(db: Executor, by: { tokenHash: string } | { cancelHash: string }, now: number): Promise<EmailChangeRow | null> {
    const query = db.selectFrom('email_changes').selectAll().where('used_at', 'is', null).where('expires_at', '>', now).where(proofStands('email_changes', now))
    return (await ('tokenHash' in by ? query.where('token_hash', '=', by.tokenHash) : query.where('cancel_hash', '=', by.cancelHash)).executeTakeFirst()) ?? null
  },

  /** Uses the link up, if it still was live and standing: of two confirmations (or a confirmation and a cancel) at once, one wins. */
  async consume(db: Executor, tokenHash: string, now: number): Promise<boolean> {
    const result = await db
      .updateTable('email_changes')
      .set({ used_at: now })
      .where('token_hash', '=', tokenHash)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .where(proofStands('email_changes', now))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async retireAll(db: Executor, userId: string, now: number): Promise<void> {
    await db.updateTable('email_changes').set({ used_at: now }).where('user_id', '=', userId).where('used_at', 'is', null).execute()
  },

  /** What the account's own export shows: the address asked for and when, never the token's hash. */
  async pendingOf(db: Executor, userId: string, now: number): Promise<Pick<EmailChangeRow, 'new_email' | 'created_at' | 'expires_at'> | null> {
    return (
      (await db
        .selectFrom('email_changes')
        .select(['new_email', 'created_at', 'expires_at'])
        .where('user_id', '=', userId)
        .where('used_at', 'is', null)
        .where('expires_at', '>', now)
        .where(proofStands('email_changes', now))
        .executeTakeFirst()) ?? null
    )
  },

  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('email_changes').select('token_hash').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('email_changes').where('token_hash', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

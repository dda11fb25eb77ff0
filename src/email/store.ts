import type { Kysely, Selectable } from 'kysely'
import type { Database, EmailSignInsTable } from '../db/schema.ts'
import { proofStands } from '../auth/pending-proofs.ts'

/** The e-mailed sign-in module's storage calls (table email_sign_ins, migration 0016). */
type Executor = Kysely<Database>
export type EmailSignInRow = Selectable<EmailSignInsTable>

/** Wrong codes that end a sign-in (docs/email-sign-in.md). */
export const MAX_FAILURES = 5

export const signIns = {
  /** A new sign-in for the address; the previous one, if still live, ends (one live code per address). */
  async replace(db: Executor, row: Omit<EmailSignInRow, 'failures' | 'used_at'>): Promise<void> {
    await db.updateTable('email_sign_ins').set({ used_at: row.created_at }).where('email', '=', row.email).where('used_at', 'is', null).execute()
    await db.insertInto('email_sign_ins').values({ ...row, failures: 0, used_at: null }).execute()
  },

  /** The address's live sign-in, if any. */
  async liveFor(db: Executor, email: string, now: number): Promise<EmailSignInRow | null> {
    return (
      (await db
        .selectFrom('email_sign_ins')
        .selectAll()
        .where('email', '=', email)
        .where('used_at', 'is', null)
        .where('expires_at', '>', now)
        .where('failures', '<', MAX_FAILURES)
        .where(proofStands('email_sign_ins', now))
        .orderBy('created_at', 'desc')
        .limit(1)
        .executeTakeFirst()) ?? null
    )
  },

  async byToken(db: Executor, tokenHash: string, now: number): Promise<EmailSignInRow | null> {
    return (await db.selectFrom('email_sign_ins').selectAll().where('token_hash', '=', tokenHash).where('used_at', 'is', null).where('expires_at', '>', now).where('failures', '<', MAX_FAILURES).where(proofStands('email_sign_ins', now)).executeTakeFirst()) ?? null
  },

  /**
   * Counts an attempt before it is judged, in one conditional statement: of any number of attempts
   * at once, only the first MAX_FAILURES get through, and each counts whether right or wrong.
   */
  async countAttempt(db: Executor, id: string): Promise<boolean> {
    const counted = await db
      .updateTable('email_sign_ins')
      .set((eb) => ({ failures: eb('failures', '+', 1) }))
      .where('id', '=', id)
      .where('used_at', 'is', null)
      .where('failures', '<', MAX_FAILURES)
      .returning('id')
      .executeTakeFirst()
    return counted !== undefined
  },

  /** Spends the sign-in, if still live (the account's sessions not ended since it started): true for the one caller that did. */
  async use(db: Executor, id: string, now: number): Promise<boolean> {
    const result = await db.updateTable('email_sign_ins').set({ used_at: now }).where('id', '=', id).where('used_at', 'is', null).where(proofStands('email_sign_ins', now)).executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('email_sign_ins').select('id').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('email_sign_ins').where('id', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

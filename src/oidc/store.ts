import type { Kysely, Selectable } from 'kysely'
import { proofStands } from '../auth/pending-proofs.ts'
import type { Database, OidcFlowsTable, UserIdentitiesTable } from '../db/schema.ts'

/** The identity-provider module's storage calls (tables user_identities, oidc_flows). */
type Executor = Kysely<Database>
export type IdentityRow = Selectable<UserIdentitiesTable>
export type FlowRow = Selectable<OidcFlowsTable>

export const identities = {
  async find(db: Executor, provider: string, subject: string): Promise<IdentityRow | null> {
    return (await db.selectFrom('user_identities').selectAll().where('provider', '=', provider).where('subject', '=', subject).executeTakeFirst()) ?? null
  },

  /** Which of these (provider, subject) pairs are linked already, as `provider subject`: an import's check. */
  async linked(db: Executor, pairs: readonly { provider: string; subject: string }[]): Promise<Set<string>> {
    const found = new Set<string>()
    for (let at = 0; at < pairs.length; at += 500) {
      const chunk = pairs.slice(at, at + 500)
      const rows = await db.selectFrom('user_identities').select(['provider', 'subject']).where('subject', 'in', chunk.map((p) => p.subject)).execute()
      const wanted = new Set(chunk.map((p) => `${p.provider} ${p.subject}`))
      for (const row of rows) if (wanted.has(`${row.provider} ${row.subject}`)) found.add(`${row.provider} ${row.subject}`)
    }
    return found
  },

  async insertMany(db: Executor, rows: IdentityRow[]): Promise<void> {
    for (let at = 0; at < rows.length; at += 1000) await db.insertInto('user_identities').values(rows.slice(at, at + 1000)).execute()
  },

  async existsFor(db: Executor, userId: string): Promise<boolean> {
    return (await db.selectFrom('user_identities').select('id').where('user_id', '=', userId).limit(1).executeTakeFirst()) !== undefined
  },

  async listOf(db: Executor, userId: string): Promise<IdentityRow[]> {
    return db.selectFrom('user_identities').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute()
  },

  async insert(db: Executor, row: IdentityRow): Promise<void> {
    await db.insertInto('user_identities').values(row).execute()
  },

  async touch(db: Executor, id: string, at: number): Promise<void> {
    await db.updateTable('user_identities').set({ last_used_at: at }).where('id', '=', id).execute()
  },

  async deleteAllOf(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('user_identities').where('user_id', '=', userId).execute()
  },

  async delete(db: Executor, userId: string, id: string): Promise<boolean> {
    return (await db.deleteFrom('user_identities').where('user_id', '=', userId).where('id', '=', id).executeTakeFirst()).numDeletedRows > 0n
  },
}

export const flows = {
  async insert(db: Executor, row: FlowRow): Promise<void> {
    await db.insertInto('oidc_flows').values(row).execute()
  },

  /**
   * Uses a flow up, if it is live, of this provider and started by this browser: of two callbacks
   * with one state exactly one gets it. Returns the flow, or null.
   */
  async consume(db: Executor, stateHash: string, provider: string, browserHash: string, now: number): Promise<FlowRow | null> {
    const row = await db.selectFrom('oidc_flows').selectAll().where('state_hash', '=', stateHash).executeTakeFirst()
    if (!row || row.provider !== provider || row.browser_hash !== browserHash || row.used_at !== null || row.expires_at <= now) return null
    const used = await db
      .updateTable('oidc_flows')
      .set({ used_at: now })
      .where('state_hash', '=', stateHash)
      .where('used_at', 'is', null)
      .executeTakeFirst()
    return used.numUpdatedRows > 0n ? row : null
  },

  /**
   * Whether a link flow still stands, judged as every pending proof is (src/auth/pending-proofs.ts):
   * the session that started it is live and the account's sessions have not all ended since.
   */
  async linkStands(db: Executor, stateHash: string, now: number): Promise<boolean> {
    return (await db.selectFrom('oidc_flows').select('state_hash').where('state_hash', '=', stateHash).where('session_id', 'is not', null).where(proofStands('oidc_flows', now)).executeTakeFirst()) !== undefined
  },

  /** Retention: up to `limit` flows that expired before `before`. */
  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('oidc_flows').select('state_hash').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('oidc_flows').where('state_hash', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

import type { Kysely, Selectable } from 'kysely'
import { proofStands } from '../auth/pending-proofs.ts'
import type { CeremonyPurpose, Database, MfaChallengesTable, MfaFactorsTable, WebauthnChallengesTable } from '../db/schema.ts'

/** The second-factor module's storage calls (tables mfa_factors, mfa_recovery_codes, mfa_challenges, webauthn_challenges). */
type Executor = Kysely<Database>
export type FactorRow = Selectable<MfaFactorsTable>
export type ChallengeRow = Selectable<MfaChallengesTable>
export type CeremonyRow = Selectable<WebauthnChallengesTable>

/** Wrong codes an mfa_token survives; the fifth is still answered as a wrong code, then it is dead. */
export const MAX_CHALLENGE_FAILURES = 5

export const factors = {
  async insert(db: Executor, row: FactorRow): Promise<void> {
    await db.insertInto('mfa_factors').values(row).execute()
  },

  async insertMany(db: Executor, rows: FactorRow[]): Promise<void> {
    for (let at = 0; at < rows.length; at += 500) await db.insertInto('mfa_factors').values(rows.slice(at, at + 500)).execute()
  },

  async listConfirmed(db: Executor, userId: string): Promise<FactorRow[]> {
    return db.selectFrom('mfa_factors').selectAll().where('user_id', '=', userId).where('confirmed_at', 'is not', null).orderBy('created_at').orderBy('id').execute()
  },

  async findOwned(db: Executor, userId: string, id: string): Promise<FactorRow | null> {
    return (await db.selectFrom('mfa_factors').selectAll().where('user_id', '=', userId).where('id', '=', id).executeTakeFirst()) ?? null
  },

  /** An enrolment of the account still waiting for its code: one made before the account's sessions last ended, or in a session since ended, is dead. */
  async findPendingEnrolment(db: Executor, userId: string, id: string, at: number): Promise<FactorRow | null> {
    return (await db.selectFrom('mfa_factors').selectAll().where('user_id', '=', userId).where('id', '=', id).where('confirmed_at', 'is', null).where(proofStands('mfa_factors', at)).executeTakeFirst()) ?? null
  },

  /** Confirms a live enrolment once, remembering the step of the code that confirmed it (no replay at login). */
  async confirm(db: Executor, userId: string, id: string, step: number, at: number): Promise<boolean> {
    const result = await db
      .updateTable('mfa_factors')
      .set({ confirmed_at: at, last_step: step, last_used_at: at })
      .where('id', '=', id)
      .where('user_id', '=', userId)
      .where('confirmed_at', 'is', null)
      .where(proofStands('mfa_factors', at))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /**
   * The replay guard, in one statement: a TOTP step is accepted only if it is later than every step
   * this factor accepted before, so of two concurrent uses of one code exactly one succeeds, and a
   * code older than one already used is refused.
   */
  async acceptStep(db: Executor, id: string, step: number, at: number): Promise<boolean> {
    const result = await db
      .updateTable('mfa_factors')
      .set({ last_step: step, last_used_at: at })
      .where('id', '=', id)
      .where('confirmed_at', 'is not', null)
      .where((eb) => eb.or([eb('last_step', 'is', null), eb('last_step', '<', step)]))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /** A confirmed passkey by its credential id, whoever holds it. */
  async findPasskey(db: Executor, credentialId: string): Promise<FactorRow | null> {
    return (
      (await db
        .selectFrom('mfa_factors')
        .selectAll()
        .where('credential_id', '=', credentialId)
        .where('type', '=', 'passkey')
        .where('confirmed_at', 'is not', null)
        .executeTakeFirst()) ?? null
    )
  },

  /**
   * A passkey's counter moves from the value the assertion was checked against to the one it
   * carried, in one statement: of two concurrent uses of one signature exactly one gets here.
   */
  async advanceCounter(db: Executor, id: string, from: number, to: number, backedUp: boolean, at: number): Promise<boolean> {
    const result = await db
      .updateTable('mfa_factors')
      .set({ sign_count: to, backed_up: backedUp ? 1 : 0, last_used_at: at })
      .where('id', '=', id)
      .where('sign_count', '=', from)
      .where('confirmed_at', 'is not', null)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async rename(db: Executor, userId: string, id: string, name: string): Promise<boolean> {
    return (await db.updateTable('mfa_factors').set({ name }).where('id', '=', id).where('user_id', '=', userId).where('confirmed_at', 'is not', null).executeTakeFirst()).numUpdatedRows > 0n
  },

  async touch(db: Executor, id: string, at: number): Promise<void> {
    await db.updateTable('mfa_factors').set({ last_used_at: at }).where('id', '=', id).execute()
  },

  async delete(db: Executor, userId: string, id: string): Promise<boolean> {
    return (await db.deleteFrom('mfa_factors').where('user_id', '=', userId).where('id', '=', id).executeTakeFirst()).numDeletedRows > 0n
  },

  /** Enrolments never confirmed, older than `before`: a new enrolment clears the user's. */
  async deleteUnconfirmedBefore(db: Executor, userId: string, before: number): Promise<void> {
    await db.deleteFrom('mfa_factors').where('user_id', '=', userId).where('confirmed_at', 'is', null).where('created_at', '<', before).execute()
  },

  /** Every enrolment of the account not yet confirmed (TOTP secrets shown but never proven), but `keep`. */
  async deleteUnconfirmed(db: Executor, userId: string, keep: string | null = null): Promise<void> {
    let query = db.deleteFrom('mfa_factors').where('user_id', '=', userId).where('confirmed_at', 'is', null)
    if (keep !== null) query = query.where('id', '!=', keep)
    await query.execute()
  },

  async deleteAllOf(db: Executor, userId: string): Promise<number> {
    return Number((await db.deleteFrom('mfa_factors').where('user_id', '=', userId).executeTakeFirst()).numDeletedRows)
  },

  /** Every sealed TOTP secret, for `keys rewrap`. */
  async sealedSecrets(db: Executor): Promise<{ id: string; secret: string }[]> {
    return (await db.selectFrom('mfa_factors').select(['id', 'secret']).where('secret', 'is not', null).execute()) as { id: string; secret: string }[]
  },

  async replaceSecret(db: Executor, id: string, previous: string, next: string): Promise<boolean> {
    return (await db.updateTable('mfa_factors').set({ secret: next }).where('id', '=', id).where('secret', '=', previous).executeTakeFirst()).numUpdatedRows > 0n
  },
}

export const recoveryCodes = {
  /** The old set dies with the new one. */
  async replaceAll(db: Executor, userId: string, hashes: string[], at: number): Promise<void> {
    await db.deleteFrom('mfa_recovery_codes').where('user_id', '=', userId).execute()
    await db.insertInto('mfa_recovery_codes').values(hashes.map((code_hash) => ({ code_hash, user_id: userId, created_at: at, used_at: null }))).execute()
  },

  async isUnused(db: Executor, userId: string, hash: string): Promise<boolean> {
    const row = await db.selectFrom('mfa_recovery_codes').select('code_hash').where('code_hash', '=', hash).where('user_id', '=', userId).where('used_at', 'is', null).executeTakeFirst()
    return row !== undefined
  },

  /** Uses a code up in one statement: two concurrent uses of one code cannot both succeed. */
  async consume(db: Executor, userId: string, hash: string, at: number): Promise<boolean> {
    const result = await db
      .updateTable('mfa_recovery_codes')
      .set({ used_at: at })
      .where('code_hash', '=', hash)
      .where('user_id', '=', userId)
      .where('used_at', 'is', null)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async remaining(db: Executor, userId: string): Promise<number> {
    const row = await db
      .selectFrom('mfa_recovery_codes')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('user_id', '=', userId)
      .where('used_at', 'is', null)
      .executeTakeFirstOrThrow()
    return Number(row.n)
  },

  async deleteAllOf(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('mfa_recovery_codes').where('user_id', '=', userId).execute()
  },
}

export const challenges = {
  async insert(db: Executor, row: Omit<ChallengeRow, 'failures'>): Promise<void> {
    await db.insertInto('mfa_challenges').values(row).execute()
  },

  async findLive(db: Executor, hash: string, now: number): Promise<ChallengeRow | null> {
    return (
      (await db
        .selectFrom('mfa_challenges')
        .selectAll()
        .where('token_hash', '=', hash)
        .where('used_at', 'is', null)
        .where('expires_at', '>', now)
        .where('failures', '<', MAX_CHALLENGE_FAILURES)
        .where(proofStands('mfa_challenges', now))
        .executeTakeFirst()) ?? null
    )
  },

  /**
   * Counts one attempt on a live token before it is judged, in one conditional statement: of N
   * attempts sent at once at most MAX_CHALLENGE_FAILURES get through, whatever the engine. False
   * when the token is unknown, used, expired or out of attempts. (`failures` counts attempts; the
   * right one uses the token up, so every counted attempt but that one was a failure.)
   */
  async claimAttempt(db: Executor, hash: string, now: number): Promise<boolean> {
    const row = await db
      .updateTable('mfa_challenges')
      .set((eb) => ({ failures: eb('failures', '+', 1) }))
      .where('token_hash', '=', hash)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .where('failures', '<', MAX_CHALLENGE_FAILURES)
      .where(proofStands('mfa_challenges', now))
      .returning('token_hash')
      .executeTakeFirst()
    return row !== undefined
  },

  /**
   * Uses the token up, if it is still unused and unexpired: of two racing verifications exactly one
   * gets here first. Its attempt was counted by claimAttempt, which already let it through.
   */
  async consume(db: Executor, hash: string, now: number): Promise<boolean> {
    const result = await db
      .updateTable('mfa_challenges')
      .set({ used_at: now })
      .where('token_hash', '=', hash)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .where(proofStands('mfa_challenges', now))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async deleteAllOf(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('mfa_challenges').where('user_id', '=', userId).execute()
  },

  /** Retention: up to `limit` tokens that expired before `before`. */
  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('mfa_challenges').select('token_hash').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('mfa_challenges').where('token_hash', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

/** The WebAuthn ceremonies' challenges: stored as keyed hashes, single-use, bound to a purpose and an account or token. */
export const ceremonies = {
  async insert(db: Executor, row: CeremonyRow): Promise<void> {
    await db.insertInto('webauthn_challenges').values(row).execute()
  },

  async findLive(db: Executor, hash: string, purpose: CeremonyPurpose, now: number): Promise<CeremonyRow | null> {
    return (
      (await db
        .selectFrom('webauthn_challenges')
        .selectAll()
        .where('challenge_hash', '=', hash)
        .where('purpose', '=', purpose)
        .where('used_at', 'is', null)
        .where('expires_at', '>', now)
        .where(proofStands('webauthn_challenges', now))
        .executeTakeFirst()) ?? null
    )
  },

  /** Uses the challenge up, if it is still live: a signature over it is accepted once. */
  async consume(db: Executor, id: string, now: number): Promise<boolean> {
    const result = await db
      .updateTable('webauthn_challenges')
      .set({ used_at: now })
      .where('id', '=', id)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .where(proofStands('webauthn_challenges', now))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async deleteAllOf(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('webauthn_challenges').where('user_id', '=', userId).execute()
  },

  /** The account's passkey registrations under way. */
  async deleteRegistrations(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('webauthn_challenges').where('user_id', '=', userId).where('purpose', '=', 'register').execute()
  },

  /** Retention: up to `limit` challenges that expired before `before`. */
  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('webauthn_challenges').select('id').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('webauthn_challenges').where('id', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Kysely, Selectable } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database, LoginCodesTable } from '../db/schema.ts'
import { proofStands } from './pending-proofs.ts'

type Executor = Kysely<Database>
export type LoginCodeRow = Selectable<LoginCodesTable>
/** What a spent login code answers: the account and epoch it was made for, what issued it, and the proof its exchange owed. */
export type SpentLoginCode = Pick<LoginCodeRow, 'user_id' | 'source' | 'credential_epoch' | 'code_challenge' | 'browser_hash'>

/** A login code lives a minute: the browser is redirected with it and the application exchanges it at once. */
export const LOGIN_CODE_TTL_MS = 60_000
/** RFC 7636's verifier: 43 to 128 unreserved characters. */
const CODE_VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/

/** How a login code is bound to whoever started its sign-in (login CSRF): one of the two. */
export type LoginCodeBinding = { codeChallenge: string } | { browserHash: string }

/** What an exchange presents: the code and the proof of its binding. */
export interface LoginCodeProof {
  code: string
  codeVerifier?: string | undefined
  /** The hash of the starting browser's cookie, as the issuing module computed it at start (null without a cookie). */
  browserHash?: string | null | undefined
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

const store = {
  async insert(db: Executor, row: Omit<LoginCodeRow, 'used_at'>): Promise<void> {
    await db.insertInto('login_codes').values({ ...row, used_at: null }).execute()
  },

  /**
   * Uses a code up, if it is live, in one conditional statement: of two exchanges at once exactly
   * one gets it, and it is spent before its proof is judged, so a wrong proof leaves it dead. One
   * made before the account's sessions last ended is not live (src/auth/pending-proofs.ts).
   */
  async consume(db: Executor, hash: string, now: number): Promise<SpentLoginCode | null> {
    const used = await db
      .updateTable('login_codes')
      .set({ used_at: now })
      .where('code_hash', '=', hash)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .where(proofStands('login_codes', now))
      .returning(['user_id', 'source', 'credential_epoch', 'code_challenge', 'browser_hash'])
      .executeTakeFirst()
    return used ?? null
  },

  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('login_codes').select('code_hash').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('login_codes').where('code_hash', 'in', expired).executeTakeFirst()).numDeletedRows)
  },
}

/** Retention's part: codes that expired before `before`. */
export const deleteExpiredLoginCodes = store.deleteExpired

/**
 * The one-time login code a sign-in that ends in the browser (an identity provider's callback, an
 * e-mailed link) hands to the application instead of tokens: in the URL it is useless to anyone
 * else, since it lives a minute, is spent once, and is exchanged only with the proof its start
 * asked for (the verifier of the application's code_challenge, else the starting browser's cookie),
 * so a code produced by someone else's sign-in and planted in this browser opens nothing. It
 * remembers the account's credential epoch, so a reset or logout-all since makes it open nothing
 * either. Stored as a keyed hash.
 */
export class LoginCodes {
  constructor(
    private readonly clock: Clock,
    /** Keys the codes' hashes (a sealed service secret). */
    private readonly hmacKey: Buffer,
  ) {}

  private hash(code: string): string {
    return createHmac('sha256', this.hmacKey).update(`login_code:${code}`).digest('base64url')
  }

  /** Makes a code for `userId`, in the caller's transaction; returns it (the only time it exists in the clear). */
  async issue(db: Executor, input: { userId: string; source: string; credentialEpoch: number; binding: LoginCodeBinding }): Promise<string> {
    const code = randomBytes(32).toString('base64url')
    const now = this.clock.now()
    await store.insert(db, {
      code_hash: this.hash(code),
      user_id: input.userId,
      source: input.source,
      credential_epoch: input.credentialEpoch,
      code_challenge: 'codeChallenge' in input.binding ? input.binding.codeChallenge : null,
      browser_hash: 'browserHash' in input.binding ? input.binding.browserHash : null,
      created_at: now,
      expires_at: now + LOGIN_CODE_TTL_MS,
    })
    return code
  }

  /**
   * Spends the code, then judges its proof: the code, or `{refused}` (spent, proof wrong: the caller
   * records it), or null for a code unknown, used or expired.
   */
  async redeem(db: Executor, proof: LoginCodeProof): Promise<SpentLoginCode | { refused: SpentLoginCode } | null> {
    const spent = await store.consume(db, this.hash(proof.code), this.clock.now())
    if (!spent) return null
    return proves(spent, proof) ? spent : { refused: spent }
  }
}

/**
 * The proof the start asked for, and no other: a verifier whose S256 is the challenge, or, for a
 * start without one, the starting browser's cookie and no verifier.
 */
function proves(spent: SpentLoginCode, proof: LoginCodeProof): boolean {
  if (spent.code_challenge !== null) {
    const verifier = proof.codeVerifier
    return verifier !== undefined && CODE_VERIFIER.test(verifier) && same(createHash('sha256').update(verifier).digest('base64url'), spent.code_challenge)
  }
  return proof.codeVerifier === undefined && typeof proof.browserHash === 'string' && spent.browser_hash !== null && same(proof.browserHash, spent.browser_hash)
}

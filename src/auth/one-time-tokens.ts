import { createHash, randomBytes } from 'node:crypto'
import type { Kysely } from 'kysely'
import { oneTimeTokens } from '../db/repositories.ts'
import { credentialEpochOf } from './pending-proofs.ts'
import type { Database, OneTimeTokenPurpose } from '../db/schema.ts'

/** Mailed single-use tokens (e-mail verification, password reset). */
export const VERIFICATION_TTL_MS = 24 * 3600 * 1000
export const RESET_TTL_MS = 3600 * 1000

/** Only the SHA-256 is stored, so a database leak yields no usable link. */
export function hashOneTimeToken(token: string): string {
  return createHash('sha256').update(token).digest('hex')
}

/**
 * A fresh 256-bit token for `purpose`, stored hashed, replacing any unused one of the same purpose
 * (only the newest mail's link works). Run it in the caller's transaction; mail the returned token.
 */
export async function issueOneTimeToken(
  trx: Kysely<Database>,
  userId: string,
  purpose: OneTimeTokenPurpose,
  ttlMs: number,
  now: number,
): Promise<string> {
  const token = randomBytes(32).toString('base64url')
  await oneTimeTokens.retireAll(trx, userId, purpose, now)
  // Made under the account's epoch of now: it dies when the account's sessions next all end.
  await oneTimeTokens.insert(trx, { token_hash: hashOneTimeToken(token), user_id: userId, purpose, credential_epoch: await credentialEpochOf(trx, userId), created_at: now, expires_at: now + ttlMs })
  return token
}

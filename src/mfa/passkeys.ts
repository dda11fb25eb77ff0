import { randomUUID } from 'node:crypto'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { CeremonyPurpose } from '../db/schema.ts'
import { credentialEpochOf } from '../auth/pending-proofs.ts'
import type { SecretHasher } from './codes.ts'
import { ceremonies, type CeremonyRow, type FactorRow } from './store.ts'
import { CEREMONY_TTL_MS, challengeOf, newChallenge, type StoredPasskey } from './webauthn.ts'

/** Where a ceremony may be answered from: the account, and the mfa_token's hash or the session id. */
export interface CeremonyBinding {
  userId: string | null
  binding: string | null
}

/**
 * The server-made challenges of the WebAuthn ceremonies (docs/mfa.md, Passkeys): at least 128 random
 * bits, stored only as keyed hashes, five minutes, single-use (used up in the transaction that
 * accepts the credential), and bound to a purpose and to an account, an mfa_token or a session.
 */
export class PasskeyCeremonies {
  constructor(private readonly deps: { db: Db; clock: Clock; hasher: SecretHasher }) {}

  /** A new challenge for `purpose`; `options` turns it into the browser's options. */
  async begin<T>(purpose: CeremonyPurpose, bound: CeremonyBinding, options: (challenge: string) => Promise<T>): Promise<{ id: string; options: T }> {
    const challenge = newChallenge()
    const now = this.deps.clock.now()
    const id = randomUUID()
    const db = this.deps.db.kysely
    await ceremonies.insert(db, {
      id,
      challenge_hash: this.deps.hasher.hash('webauthn_challenge', challenge),
      purpose,
      user_id: bound.userId,
      binding: bound.binding,
      // Judged where the signature comes back (src/auth/pending-proofs.ts): registration and step-up are a session's.
      credential_epoch: bound.userId === null ? 0 : await credentialEpochOf(db, bound.userId),
      session_id: purpose === 'register' || purpose === 'step_up' ? bound.binding : null,
      created_at: now,
      expires_at: now + CEREMONY_TTL_MS,
      used_at: null,
    })
    return { id, options: await options(challenge) }
  }

  /**
   * The live ceremony of `purpose` whose challenge the credential signed, and that challenge; null
   * when there is none (unknown, used, expired, or made for another purpose) or when it is bound to
   * another account, token or session than `bound`.
   */
  async find(credential: { response: { clientDataJSON: string } }, purpose: CeremonyPurpose, bound?: CeremonyBinding): Promise<{ row: CeremonyRow; challenge: string } | null> {
    const challenge = challengeOf(credential)
    if (challenge === null) return null
    const row = await ceremonies.findLive(this.deps.db.kysely, this.deps.hasher.hash('webauthn_challenge', challenge), purpose, this.deps.clock.now())
    if (!row) return null
    if (bound && (row.user_id !== bound.userId || row.binding !== bound.binding)) return null
    return { row, challenge }
  }
}

/** A passkey factor row as the ceremonies need it. */
export function storedPasskey(row: FactorRow): StoredPasskey {
  return { credentialId: row.credential_id!, publicKey: row.public_key!, transports: row.transports ? row.transports.split(' ') : [] }
}

/** The WebAuthn user handle of an account: its id, as registration gave it to the authenticator. */
export function userHandleOf(userId: string): string {
  return Buffer.from(userId, 'utf8').toString('base64url')
}

import { recordEvent, type RequestContext } from '../audit/events.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users, type UserRow } from '../db/repositories.ts'
import { importedFormat, LEGACY_PASSWORD } from '../imports/formats.ts'
import type { PasswordHasher } from './passwords.ts'

/** Asks the system an account is moving from (src/imports/legacy.ts); LEGACY_UNAVAILABLE when it cannot. */
export interface LegacySeam {
  verify(email: string, password: string): Promise<boolean>
}

/**
 * Whether a password is the account's, whatever its stored credential is: Portcullis's own argon2id,
 * an imported hash (the hasher knows every format, src/imports/formats.ts), or none yet, kept by the
 * system the account came from (lazy migration: only such an account ever causes a call). Login and
 * every sensitive action's password (confirm-password.ts) ask here, so each rule holds for all of
 * them. A right password for anything but today's argon2id is hashed again with it at once, in
 * one transaction with the `password.rehashed` audit record: the imported hash is gone, and a
 * migrated account never asks the old system again.
 */
export class PasswordCheck {
  constructor(private readonly deps: { db: Db; clock: Clock; hasher: PasswordHasher; legacy: LegacySeam }) {}

  async matches(user: Pick<UserRow, 'id' | 'email' | 'password_hash'>, password: string, context: RequestContext): Promise<boolean> {
    const stored = user.password_hash
    const right = stored === LEGACY_PASSWORD ? await this.deps.legacy.verify(user.email, password) : await this.deps.hasher.verify(stored, password)
    if (right && (stored === LEGACY_PASSWORD || this.deps.hasher.needsRehash(stored))) await this.rehash(user.id, stored, password, context)
    return right
  }

  /**
   * Replaces the stored credential with today's argon2id, only if it is still the one judged (a
   * reset or change that committed meanwhile wins). A failure here fails the sign-in (503): an
   * imported hash is never left behind a success, and a legacy account never asks twice.
   */
  private async rehash(userId: string, previous: string, password: string, context: RequestContext): Promise<void> {
    const next = await this.deps.hasher.hash(password)
    const now = this.deps.clock.now()
    await this.deps.db.kysely.transaction().execute(async (trx) => {
      if (await users.replacePasswordHash(trx, userId, previous, next, now)) {
        await recordEvent(trx, this.deps.clock, { type: 'password.rehashed', userId, reason: importedFormat(previous) ?? 'argon2id', context })
      }
    })
  }
}

import type { Db } from '../db/index.ts'
import { users } from '../db/repositories.ts'
import type { Logger } from '../logger.ts'

/** How often an instance looks again (an import by the CLI or another instance is seen within this). */
const REFRESH_MS = 60_000

/**
 * The imported hash every failing password check also spends while any account is still on one
 * (docs/migrating.md, "Timing and enumeration"). Without it a wrong password for an imported
 * account (its old hash, then an argon2id check) would answer later than one for a native account or
 * an unknown address (one argon2id check each), and an attacker could tell which addresses have
 * accounts that moved in. With it every failing check is the same work: the account's own hash and
 * one check of the other kind (a success needs no disguise: it says the account exists anyway). This is one real hash of an account still waiting for its first sign-in
 * (users_imported_hash_idx, migration 0022), checked against a random password, so it costs what the
 * imported accounts cost; it is already in the database, and nothing here ever shows it. When the
 * last imported hash has been replaced, the extra check stops by itself.
 */
export class ImportedHashSample {
  private hash: string | null = null
  private timer: NodeJS.Timeout | undefined

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    await this.refresh()
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS)
    this.timer.unref()
  }

  stop(): void {
    clearInterval(this.timer)
  }

  /** The hash to spend a check on, or null when no account is left on an imported one. */
  current(): string | null {
    return this.hash
  }

  /** An import on this instance just wrote this hash: spent from now on, not after the next look. */
  offer(hash: string): void {
    this.hash ??= hash
  }

  /** Looks again now (the timer does it every minute). */
  async refresh(): Promise<void> {
    try {
      this.hash = await users.anImportedHash(this.db.kysely)
    } catch (error) {
      // The database away: keep the last one (a check spent for nothing costs less than a leak).
      this.logger.warn({ err: { message: (error as Error).message } }, 'could not look for imported password hashes')
    }
  }
}

import type { Kysely } from 'kysely'
import type { Db } from '../db/index.ts'
import { authChanges, sessions, users, type AuthChangeRow, type UserRow } from '../db/repositories.ts'
import type { AuthChangeKind, Database } from '../db/schema.ts'
import type { Logger } from '../logger.ts'

export interface AuthChange {
  kind: AuthChangeKind
  user_id: string
  session_id?: string | null
}

/**
 * Writes changes to the revocation feed, inside the caller's transaction. Stamped with the wall
 * clock (not an injected one): the feed window is about real propagation time across processes.
 */
export async function publishChanges(db: Kysely<Database>, changes: AuthChange[]): Promise<void> {
  await authChanges.publish(db, changes, Date.now())
}

export type AccountState = Pick<UserRow, 'status' | 'email_verified_at'>

interface SessionEntry {
  userId: string
  revoked: boolean
  seenAt: number
}

interface UserEntry {
  state: AccountState
  seenAt: number
}

export interface SessionGateOptions {
  /** How often the feed is read; the propagation bound is about one interval. */
  pollMs?: number
  /** How far back each read looks; rows are applied idempotently, so overlap is harmless. */
  windowMs?: number
  /** Entries unused for this long are dropped (longer than an access token can live). */
  idleMs?: number
  maxEntries?: number
}

/**
 * The per-instance view of which sessions are revoked and which accounts are usable, so the bearer
 * check needs no database query per request.
 *
 * A session (and its user's state) is read from the database once, the first time this instance
 * sees it; afterwards it is answered from memory. Every revocation and account change is written
 * to the `auth_changes` feed in the same transaction as the change itself. Each instance reads the
 * last `windowMs` of the feed every `pollMs` and applies it: a revoked session is marked, a changed
 * account is dropped and re-read on its next request. Because every read overlaps the last by far
 * more than a transaction can take to commit, a row that becomes visible late, or a first-sight
 * read that raced a change, is corrected by the next poll. The instance that made a change applies
 * it at once. Bound: a change is in force everywhere within one poll interval plus a query,
 * 250 ms by default.
 */
export class SessionGate {
  private readonly sessions = new Map<string, SessionEntry>()
  private readonly accounts = new Map<string, UserEntry>()
  private timer: NodeJS.Timeout | undefined
  private polling: Promise<void> | undefined
  private lastPrune = 0
  private readonly pollMs: number
  private readonly windowMs: number
  private readonly idleMs: number
  private readonly maxEntries: number

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
    options: SessionGateOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 250
    this.windowMs = options.windowMs ?? 30_000
    this.idleMs = options.idleMs ?? 20 * 60_000
    this.maxEntries = options.maxEntries ?? 200_000
  }

  /** Entries held in memory, for /metrics. */
  size(): { sessions: number; accounts: number } {
    return { sessions: this.sessions.size, accounts: this.accounts.size }
  }

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.pollMs)
    this.timer.unref()
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    await this.polling
  }

  /** Reads the recent feed once; overlapping calls share one read. */
  poll(): Promise<void> {
    this.polling ??= this.readFeed().finally(() => {
      this.polling = undefined
    })
    return this.polling
  }

  private async readFeed(): Promise<void> {
    const now = Date.now()
    try {
      this.apply(await authChanges.since(this.db.kysely, now - this.windowMs))
      if (now - this.lastPrune > 60_000) {
        this.lastPrune = now
        this.sweep(now)
        await authChanges.prune(this.db.kysely, now - 3600_000)
      }
    } catch (error) {
      // The database is away: nothing can be revoked while it is, and the next poll catches up.
      this.logger.warn({ err: { message: (error as Error).message } }, 'revocation feed poll failed')
    }
  }

  apply(changes: (AuthChange | AuthChangeRow)[]): void {
    for (const change of changes) {
      if (change.kind === 'session_revoked' && change.session_id) {
        const entry = this.sessions.get(change.session_id)
        if (entry) entry.revoked = true
      } else if (change.kind === 'user_changed') {
        this.accounts.delete(change.user_id)
      }
    }
  }

  private sweep(now: number): void {
    for (const [id, entry] of this.sessions) if (now - entry.seenAt > this.idleMs) this.sessions.delete(id)
    for (const [id, entry] of this.accounts) if (now - entry.seenAt > this.idleMs) this.accounts.delete(id)
  }

  private remember<K, V>(map: Map<K, V>, key: K, value: V): void {
    if (map.size >= this.maxEntries) {
      const oldest = map.keys().next()
      if (!oldest.done) map.delete(oldest.value)
    }
    map.set(key, value)
  }

  /**
   * The state of the account behind a live session, or null when the session does not exist, is
   * revoked, or belongs to someone else.
   */
  async check(sessionId: string, userId: string): Promise<AccountState | null> {
    const now = Date.now()
    let session = this.sessions.get(sessionId)
    if (!session) {
      const row = await sessions.findAuthState(this.db.kysely, sessionId)
      if (!row) return null
      session = { userId: row.user_id, revoked: row.revoked_at !== null, seenAt: now }
      this.remember(this.sessions, sessionId, session)
      if (!this.accounts.has(row.user_id)) {
        this.remember(this.accounts, row.user_id, { state: { status: row.status, email_verified_at: row.email_verified_at }, seenAt: now })
      }
    }
    session.seenAt = now
    if (session.revoked || session.userId !== userId) return null
    let account = this.accounts.get(userId)
    if (!account) {
      const state = await users.findState(this.db.kysely, userId)
      if (!state) return null
      account = { state, seenAt: now }
      this.remember(this.accounts, userId, account)
    }
    account.seenAt = now
    return account.state
  }
}

import { systemClock, type Clock } from '../clock.ts'
import type { Change, ChangeFeed } from '../changes/feed.ts'
import type { Db } from '../db/index.ts'
import { sessions, users, type UserRow } from '../db/repositories.ts'

/** What every bearer request checks of the account: its state, and the claims version its tokens must carry at least. */
export type AccountState = Pick<UserRow, 'status' | 'email_verified_at' | 'claims_version'>

interface SessionEntry {
  userId: string
  revoked: boolean
  seenAt: number
}

interface GrantEntry {
  userId: string
  revoked: boolean
  seenAt: number
}

interface UserEntry {
  state: AccountState
  seenAt: number
}

export interface SessionGateOptions {
  /** Entries unused for this long are dropped (longer than an access token can live). */
  idleMs?: number
  maxEntries?: number
  clock?: Clock
}

/**
 * The per-instance view of which sessions are revoked and which accounts are usable, so the bearer
 * check needs no database query per request.
 *
 * A session (and its user's state) is read from the database once, the first time this instance
 * sees it; afterwards it is answered from memory. Every revocation and account change reaches it
 * through the change feed (src/changes/feed.ts): a revoked session is marked, a changed account is
 * dropped and re-read on its next request (a deleted one is then not found). A first-sight read
 * that raced a change is corrected by the feed's next read, which overlaps the last. Bound: a
 * change is in force everywhere within one poll interval plus a query, 250 ms by default.
 *
 * Memory is trusted only while the feed is continuous: after a gap longer than its window (the
 * instance cut off from the database, or paused) it may have missed revocations that no later read
 * will bring, so the feed empties the gate, and until the feed reads again every check reads the
 * database and keeps nothing (ChangeFeed.generation).
 */
export class SessionGate {
  private readonly sessions = new Map<string, SessionEntry>()
  private readonly accounts = new Map<string, UserEntry>()
  /** OpenID provider grants behind JWT access tokens, by their reference (src/provider/resource.ts). */
  private readonly grants = new Map<string, GrantEntry>()
  private lastSweep: number
  private readonly idleMs: number
  private readonly maxEntries: number
  private readonly clock: Clock

  constructor(
    private readonly db: Db,
    private readonly feed: ChangeFeed,
    options: SessionGateOptions = {},
  ) {
    this.idleMs = options.idleMs ?? 20 * 60_000
    this.maxEntries = options.maxEntries ?? 200_000
    this.clock = options.clock ?? systemClock
    this.lastSweep = this.clock.now()
    feed.subscribe({ apply: (changes) => this.apply(changes), forget: () => this.forget() })
  }

  /** Entries held in memory, for /metrics. */
  size(): { sessions: number; accounts: number; grants: number } {
    return { sessions: this.sessions.size, accounts: this.accounts.size, grants: this.grants.size }
  }

  private apply(changes: Change[]): void {
    for (const change of changes) {
      if (change.kind === 'session_revoked') {
        const entry = this.sessions.get(change.target_id)
        if (entry) entry.revoked = true
      } else if (change.kind === 'user_changed') {
        this.accounts.delete(change.user_id)
      } else if (change.kind === 'grant_revoked') {
        const entry = this.grants.get(change.target_id)
        if (entry) entry.revoked = true
      } else if (change.kind === 'roles_changed') {
        // A role's permissions moved the claims version of everyone holding it: read them again.
        this.accounts.clear()
      }
    }
    const now = this.clock.now()
    if (Math.abs(now - this.lastSweep) > 60_000) {
      this.lastSweep = now
      this.sweep(now)
    }
  }

  private forget(): void {
    this.sessions.clear()
    this.accounts.clear()
    this.grants.clear()
  }

  private sweep(now: number): void {
    for (const [id, entry] of this.sessions) if (now - entry.seenAt > this.idleMs) this.sessions.delete(id)
    for (const [id, entry] of this.accounts) if (now - entry.seenAt > this.idleMs) this.accounts.delete(id)
    for (const [id, entry] of this.grants) if (now - entry.seenAt > this.idleMs) this.grants.delete(id)
  }

  /** Keeps what a read found, unless the caches were emptied while it ran (it may predate a gap). */
  private remember<K, V>(map: Map<K, V>, key: K, value: V, generation: number): void {
    if (this.feed.generation() !== generation) return
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
    const known = this.known(sessionId, userId)
    if (known !== undefined) return known
    const generation = this.feed.generation()
    if (generation === null) return this.readAfresh(sessionId, userId)
    const now = this.clock.now()
    let session = this.sessions.get(sessionId)
    if (!session) {
      const row = await sessions.findAuthState(this.db.kysely, sessionId)
      if (!row) return null
      session = { userId: row.user_id, revoked: row.revoked_at !== null, seenAt: now }
      this.remember(this.sessions, sessionId, session, generation)
      if (!this.accounts.has(row.user_id)) {
        this.remember(this.accounts, row.user_id, { state: { status: row.status, email_verified_at: row.email_verified_at, claims_version: row.claims_version }, seenAt: now }, generation)
      }
    }
    session.seenAt = now
    if (session.revoked || session.userId !== userId) return null
    let account = this.accounts.get(userId)
    if (!account) {
      const state = await users.findState(this.db.kysely, userId)
      if (!state) return null
      account = { state, seenAt: now }
      this.remember(this.accounts, userId, account, generation)
    }
    account.seenAt = now
    return account.state
  }

  /**
   * check()'s answer from memory alone, without a promise: undefined when memory cannot give it
   * (the session or the account not held, or the feed in a gap) and check() must read.
   */
  known(sessionId: string, userId: string): AccountState | null | undefined {
    return this.fromMemory(this.sessions, sessionId, userId)
  }

  /**
   * The state of the account behind a live OpenID provider grant, or null when the grant has ended
   * (revoked, expired, its user deleted) or belongs to someone else: the same memory and feed as
   * sessions, with the grant's owner read by `load` (the provider's storage) on first sight.
   */
  async checkGrant(grantRef: string, userId: string, load: () => Promise<string | null>): Promise<AccountState | null> {
    const known = this.knownGrant(grantRef, userId)
    if (known !== undefined) return known
    const generation = this.feed.generation()
    const now = this.clock.now()
    let grant = generation === null ? undefined : this.grants.get(grantRef)
    if (!grant) {
      const owner = await load()
      if (owner === null) return null
      grant = { userId: owner, revoked: false, seenAt: now }
      if (generation !== null) this.remember(this.grants, grantRef, grant, generation)
    }
    grant.seenAt = now
    if (grant.revoked || grant.userId !== userId) return null
    let account = generation === null ? undefined : this.accounts.get(userId)
    if (!account) {
      const state = await users.findState(this.db.kysely, userId)
      if (!state) return null
      account = { state, seenAt: now }
      if (generation !== null) this.remember(this.accounts, userId, account, generation)
    }
    account.seenAt = now
    return account.state
  }

  /** checkGrant()'s answer from memory alone, as known() is check()'s: undefined when it must read. */
  knownGrant(grantRef: string, userId: string): AccountState | null | undefined {
    return this.fromMemory(this.grants, grantRef, userId)
  }

  /** A session's or grant's entry and its account's, both held and the feed continuous; else undefined. */
  private fromMemory(map: Map<string, SessionEntry | GrantEntry>, key: string, userId: string): AccountState | null | undefined {
    if (this.feed.generation() === null) return undefined
    const entry = map.get(key)
    if (!entry) return undefined
    const now = this.clock.now()
    entry.seenAt = now
    if (entry.revoked || entry.userId !== userId) return null
    const account = this.accounts.get(userId)
    if (!account) return undefined
    account.seenAt = now
    return account.state
  }

  /** The same answer from the database alone, for while the feed is in a gap. */
  private async readAfresh(sessionId: string, userId: string): Promise<AccountState | null> {
    const row = await sessions.findAuthState(this.db.kysely, sessionId)
    if (!row || row.revoked_at !== null || row.user_id !== userId) return null
    return { status: row.status, email_verified_at: row.email_verified_at, claims_version: row.claims_version }
  }
}

import type { Kysely } from 'kysely'
import { systemClock, type Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { changeFeed, type ChangeRow } from '../db/repositories.ts'
import type { Database } from '../db/schema.ts'
import type { Logger } from '../logger.ts'

/**
 * What one instance tells the others: a session revoked, an account changed (state, password,
 * deletion), an API key revoked. `target_id` is the session or key the change is about.
 */
export type Change =
  | { kind: 'session_revoked'; user_id: string; target_id: string }
  | { kind: 'user_changed'; user_id: string }
  | { kind: 'api_key_revoked'; target_id: string }
  /** An OpenID provider grant ended (`target_id`: its keyed hash): its JWT access tokens stop working here. */
  | { kind: 'grant_revoked'; user_id: string; target_id: string }
  /**
   * The roles catalogue changed (`target_id`: the role): every instance reloads it, and forgets the
   * accounts it knows, whose claims versions the change moved (docs/authorization.md).
   */
  | { kind: 'roles_changed'; target_id: string }

/** One `session_revoked` change for each session id. */
export function sessionRevocations(userId: string, sessionIds: string[]): Change[] {
  return sessionIds.map((id) => ({ kind: 'session_revoked', user_id: userId, target_id: id }))
}

/**
 * A cache the feed keeps current (the session gate, the API-key store): it applies the changes the
 * feed reads, and forgets everything when the feed may have missed some (a gap, see ChangeFeed).
 */
export interface ChangeSubscriber {
  apply(changes: Change[]): void
  forget(): void
}

/** Writes changes to the feed inside the caller's transaction; the database numbers and stamps them. */
export async function publishChanges(db: Kysely<Database>, changes: Change[]): Promise<void> {
  await changeFeed.publish(db, changes)
}

function fromRow(row: ChangeRow): Change | null {
  switch (row.kind) {
    case 'session_revoked':
      return row.user_id && row.target_id ? { kind: row.kind, user_id: row.user_id, target_id: row.target_id } : null
    case 'user_changed':
      return row.user_id ? { kind: row.kind, user_id: row.user_id } : null
    case 'api_key_revoked':
      return row.target_id ? { kind: row.kind, target_id: row.target_id } : null
    case 'grant_revoked':
      return row.user_id && row.target_id ? { kind: row.kind, user_id: row.user_id, target_id: row.target_id } : null
    case 'roles_changed':
      return row.target_id ? { kind: row.kind, target_id: row.target_id } : null
    default:
      return null
  }
}

export interface ChangeFeedOptions {
  /** How often the feed is read; the propagation bound is about one interval. */
  pollMs?: number
  /** How far back each read looks, by the database's clock; overlap is harmless (changes are idempotent). */
  windowMs?: number
  /** Rows older than this (by the database's clock) are deleted. */
  retainMs?: number
  /**
   * This instance's clock, for its own pacing (when to prune next) and for how long ago the feed
   * was last read (a gap); never compared with rows.
   */
  clock?: Clock
  /** Told each time a gap makes this instance forget its caches (the metrics counter). */
  onGap?: () => void
}

/**
 * How much of the window a gap may not use up. A row is stamped when its change is written and
 * becomes visible when its transaction commits; a read sent just before the commit misses it, and
 * the next read must still reach back to the stamp. Between polls 250 ms apart the overlap is the
 * whole window; across a gap only what is left of it.
 */
const COMMIT_MARGIN_MS = 5_000

/**
 * The feed that carries revocations and account changes to every instance (table `change_feed`).
 * A change is written in the transaction that makes it; each instance reads the last `windowMs` of
 * the feed every `pollMs` and hands the rows to its listeners (the session gate, the API-key
 * store). Rows are stamped, read and pruned by the database's clock alone, so instances whose
 * clocks disagree still share one timeline: one running ahead neither misses rows nor prunes rows
 * the others have not read. Because each read overlaps the last by far more than a transaction
 * takes to commit, a row that becomes visible late is still picked up. The instance that made a
 * change applies it at once (`applyLocally`).
 *
 * A gap: when reads fail or stop for longer than the window (a database failover, a stalled
 * pool, a paused process), changes made meanwhile fall out of the window before this instance
 * reads them, and its caches would go on vouching for revoked sessions and keys for good. So the
 * caches are trusted only while the feed is continuous (`generation()`): once the last good read is
 * older than the window (less COMMIT_MARGIN_MS), every subscriber forgets everything, at the first
 * of the next request that asks or the next read that succeeds (which drops before it applies
 * anything, then resumes), and until a read succeeds again the subscribers read the database on
 * every use and keep nothing. Ages are measured on this instance's clock (intervals only).
 */
export class ChangeFeed {
  private readonly subscribers: ChangeSubscriber[] = []
  private timer: NodeJS.Timeout | undefined
  private polling: Promise<void> | undefined
  private lastPrune: number | undefined
  private readonly pollMs: number
  private readonly windowMs: number
  private readonly retainMs: number
  private readonly trustMs: number
  private readonly clock: Clock
  private readonly onGap: () => void
  /**
   * Every change made since this instant is either already applied or inside the next read's
   * window: when the last good read was sent, or when the caches were last emptied.
   */
  private coveredSince: number
  private lastRead: number
  /** Bumped whenever the caches are emptied, so a read begun before cannot refill them after. */
  private generationNo = 0
  /** The caches were emptied for the current gap and no read has succeeded since. */
  private lapsed = false

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
    options: ChangeFeedOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 250
    this.windowMs = options.windowMs ?? 30_000
    this.retainMs = options.retainMs ?? 3600_000
    this.trustMs = this.windowMs - Math.min(COMMIT_MARGIN_MS, this.windowMs / 2)
    this.clock = options.clock ?? systemClock
    this.onGap = options.onGap ?? (() => {})
    // Nothing is cached yet, so nothing before now can have been missed.
    this.coveredSince = this.lastRead = this.clock.now()
  }

  subscribe(subscriber: ChangeSubscriber): void {
    this.subscribers.push(subscriber)
  }

  /**
   * The generation the caches are in, or null while the feed is in a gap: then nothing cached may
   * be trusted and nothing read may be kept. A cache keeps what it read only if the generation is
   * the same before and after the read.
   */
  generation(): number | null {
    if (this.lapsed) return null
    const now = this.clock.now()
    if (this.covers(now)) return this.generationNo
    // A request that meets the gap before the next read does (a paused process that resumes).
    this.forgetAll(now, 'request')
    return null
  }

  /** Milliseconds since the feed was last read successfully (for /metrics). */
  readAgeMs(): number {
    return Math.max(0, this.clock.now() - this.lastRead)
  }

  private covers(now: number): boolean {
    // A clock set back must not stretch the trust: count from now instead.
    if (now < this.coveredSince) this.coveredSince = now
    return now - this.coveredSince <= this.trustMs
  }

  /** Empties every cache; a gap is logged and counted once, whether a request or a read meets it first. */
  private forgetAll(now: number, noticedBy: 'request' | 'poll'): void {
    this.generationNo++
    for (const subscriber of this.subscribers) subscriber.forget()
    if (this.lapsed) return
    this.lapsed = true
    this.onGap()
    this.logger.warn(
      { last_read_ms_ago: now - this.lastRead, window_ms: this.windowMs, noticed_by: noticedBy },
      'change feed gap: cached sessions, account states and API keys dropped, read afresh from the database',
    )
  }

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.pollMs)
    this.timer.unref()
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    await this.polling
  }

  /** Hands changes this instance has just committed to its own listeners, without waiting for a poll. */
  applyLocally(changes: Change[]): void {
    for (const subscriber of this.subscribers) subscriber.apply(changes)
  }

  /** Reads the recent feed once; overlapping calls share one read. */
  poll(): Promise<void> {
    this.polling ??= this.read().finally(() => {
      this.polling = undefined
    })
    return this.polling
  }

  private async read(): Promise<void> {
    try {
      const sentAt = this.clock.now()
      const rows = await changeFeed.recent(this.db.kysely, this.db.engine, this.windowMs)
      const now = this.clock.now()
      // The read ran somewhere between sentAt and now; it reaches back to what the last one saw
      // only if now is still within the trust of coveredSince. If not, drop first, then resume:
      // the emptied caches hold nothing older than now.
      if (!this.covers(now) || this.lapsed) {
        this.forgetAll(now, 'poll')
        this.coveredSince = now
      } else {
        this.coveredSince = sentAt
      }
      this.lapsed = false
      this.lastRead = now
      this.applyLocally(rows.map(fromRow).filter((change): change is Change => change !== null))
      if (this.lastPrune === undefined || Math.abs(now - this.lastPrune) > 60_000) {
        this.lastPrune = now
        await changeFeed.prune(this.db.kysely, this.db.engine, this.retainMs)
      }
    } catch (error) {
      // The database is away: nothing can be revoked while it is, and the next poll catches up.
      this.logger.warn({ err: { message: (error as Error).message } }, 'change feed poll failed')
    }
  }
}

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

/** One `session_revoked` change for each session id. */
export function sessionRevocations(userId: string, sessionIds: string[]): Change[] {
  return sessionIds.map((id) => ({ kind: 'session_revoked', user_id: userId, target_id: id }))
}

export type ChangeListener = (changes: Change[]) => void

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
  /** This instance's clock, only for its own pacing (when to prune next); never compared with rows. */
  clock?: Clock
}

/**
 * The feed that carries revocations and account changes to every instance (table `change_feed`).
 * A change is written in the transaction that makes it; each instance reads the last `windowMs` of
 * the feed every `pollMs` and hands the rows to its listeners (the session gate, the API-key
 * store). Rows are stamped, read and pruned by the database's clock alone, so instances whose
 * clocks disagree still share one timeline: one running ahead neither misses rows nor prunes rows
 * the others have not read. Because each read overlaps the last by far more than a transaction
 * takes to commit, a row that becomes visible late is still picked up. The instance that made a
 * change applies it at once (`applyLocally`).
 */
export class ChangeFeed {
  private readonly listeners: ChangeListener[] = []
  private timer: NodeJS.Timeout | undefined
  private polling: Promise<void> | undefined
  private lastPrune: number | undefined
  private readonly pollMs: number
  private readonly windowMs: number
  private readonly retainMs: number
  private readonly clock: Clock

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
    options: ChangeFeedOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 250
    this.windowMs = options.windowMs ?? 30_000
    this.retainMs = options.retainMs ?? 3600_000
    this.clock = options.clock ?? systemClock
  }

  subscribe(listener: ChangeListener): void {
    this.listeners.push(listener)
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
    for (const listener of this.listeners) listener(changes)
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
      const rows = await changeFeed.recent(this.db.kysely, this.db.engine, this.windowMs)
      this.applyLocally(rows.map(fromRow).filter((change): change is Change => change !== null))
      const now = this.clock.now()
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

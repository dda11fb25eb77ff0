import { randomUUID } from 'node:crypto'
import type { Kysely, Selectable } from 'kysely'
import { publishChanges } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { Database, OpLogoutDeliveriesTable } from '../db/schema.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'
import { DurableQueue, type DurableQueueNames, type DurableQueueOptions, type DurableStore } from '../queue/durable.ts'
import { records } from './store.ts'

type Executor = Kysely<Database>
export type LogoutRow = Selectable<OpLogoutDeliveriesTable>

/** What a client is told when a session it signed in through ends (Back-Channel Logout 1.0). */
export interface LogoutNotice {
  clientId: string
  subject: string
  sid: string
}

export const LOGOUT_QUEUE: DurableQueueOptions = {
  pollMs: 1000,
  leaseMs: 60_000,
  retryBaseMs: 5000,
  retryMaxMs: 10 * 60_000,
  // A client unreachable for a day has missed its chance; the session ended long ago anyway.
  maxAgeMs: 24 * 3600_000,
  batch: 20,
}

/** Published: operators alert on these names. */
const NAMES: DurableQueueNames<LogoutRow> = {
  sent: { name: 'portcullis_backchannel_logout_sent_total', help: 'Back-Channel Logout tokens a client accepted.' },
  retried: { name: 'portcullis_backchannel_logout_retried_total', help: 'Back-Channel Logout deliveries that failed and were rescheduled.' },
  failed: { name: 'portcullis_backchannel_logout_failed_total', help: 'Back-Channel Logout deliveries given up (older than a day).' },
  queued: { name: 'portcullis_backchannel_logout_queued', help: 'Back-Channel Logout deliveries waiting, on every instance.' },
  label: { name: 'client_id', of: (row) => row.client_id },
  log: {
    givenUp: 'back-channel logout given up',
    retrying: 'back-channel logout failed; will retry',
    passFailed: 'back-channel logout pass failed',
    fields: (row) => ({ logout: { id: row.id, client_id: row.client_id, attempts: row.attempts } }),
  },
}

const deliveries = {
  async insert(db: Executor, notices: LogoutNotice[], at: number): Promise<void> {
    if (notices.length === 0) return
    await db
      .insertInto('op_logout_deliveries')
      .values(notices.map((notice) => ({ id: randomUUID(), client_id: notice.clientId, subject: notice.subject, sid: notice.sid, created_at: at, next_attempt_at: at })))
      .execute()
  },

  /** The mail queue's claim (src/mail/outbox.ts) on this table. */
  async claim(db: Db, owner: string, now: number, leaseMs: number, limit: number): Promise<LogoutRow[]> {
    let due = db.kysely
      .selectFrom('op_logout_deliveries')
      .select('id')
      .where('delivered_at', 'is', null)
      .where('failed_at', 'is', null)
      .where('next_attempt_at', '<=', now)
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
      .orderBy('next_attempt_at')
      .limit(limit)
    if (db.engine === 'postgres') due = due.forUpdate().skipLocked()
    return db.kysely
      .updateTable('op_logout_deliveries')
      .set((eb) => ({ lease_owner: owner, lease_until: now + leaseMs, attempts: eb('attempts', '+', 1) }))
      .where('id', 'in', due)
      .returningAll()
      .execute()
  },

  async close(db: Executor, id: string, owner: string, outcome: { delivered_at: number; last_error: null } | { failed_at: number; last_error: string }): Promise<void> {
    await db.updateTable('op_logout_deliveries').set({ ...outcome, lease_until: null }).where('id', '=', id).where('lease_owner', '=', owner).execute()
  },

  async retryAt(db: Executor, id: string, owner: string, at: number, error: string): Promise<void> {
    await db.updateTable('op_logout_deliveries').set({ next_attempt_at: at, lease_until: null, last_error: error }).where('id', '=', id).where('lease_owner', '=', owner).execute()
  },

  async pending(db: Executor): Promise<number> {
    const row = await db
      .selectFrom('op_logout_deliveries')
      .select((eb) => eb.fn.countAll<string | number>().as('n'))
      .where('delivered_at', 'is', null)
      .where('failed_at', 'is', null)
      .executeTakeFirstOrThrow()
    return Number(row.n)
  },

  /** Retention: the records of deliveries closed before `before`; each condition a range of its own index. */
  async deleteClosed(db: Executor, before: number, limit: number): Promise<number> {
    const delivered = db.selectFrom('op_logout_deliveries').select('id').where('delivered_at', '<', before).limit(limit)
    const failed = db.selectFrom('op_logout_deliveries').select('id').where('failed_at', '<', before).limit(limit)
    const first = await db.deleteFrom('op_logout_deliveries').where('id', 'in', delivered).executeTakeFirst()
    const second = await db.deleteFrom('op_logout_deliveries').where('id', 'in', failed).executeTakeFirst()
    return Number(first.numDeletedRows) + Number(second.numDeletedRows)
  },
}

export const pruneLogoutDeliveries = deliveries.deleteClosed

function storeOn(db: Db): DurableStore<LogoutRow> {
  return {
    claim: (owner, now, leaseMs, limit) => deliveries.claim(db, owner, now, leaseMs, limit),
    delivered: (id, owner, at) => deliveries.close(db.kysely, id, owner, { delivered_at: at, last_error: null }),
    givenUp: (id, owner, at, error) => deliveries.close(db.kysely, id, owner, { failed_at: at, last_error: error }),
    retryAt: (id, owner, at, error) => deliveries.retryAt(db.kysely, id, owner, at, error),
    pending: () => deliveries.pending(db.kysely),
  }
}

/**
 * Back-Channel Logout through a durable queue (API.md, Logout): a notice is written in the
 * transaction that ends the session, and the shared queue machinery (src/queue/durable.ts) delivers
 * it with retries, whichever instance is up, however the session ended.
 */
export class BackchannelLogouts {
  private readonly queue: DurableQueue<LogoutRow>

  constructor(db: Db, clock: Clock, logger: Logger, metrics: Metrics, deliver: (row: LogoutRow) => Promise<void>, options: Partial<DurableQueueOptions> = {}) {
    this.queue = new DurableQueue({
      store: storeOn(db),
      deliver,
      // Every failure may pass (a receiver restarting, a 5xx); the age limit ends the tries.
      isPermanent: () => false,
      clock, logger, metrics,
      options: { ...LOGOUT_QUEUE, ...options },
      names: NAMES,
    })
  }

  start(): void {
    this.queue.start()
  }

  kick(): void {
    this.queue.kick()
  }

  flush(): Promise<void> {
    return this.queue.flush()
  }

  stop(): Promise<void> {
    return this.queue.stop()
  }
}

/** The notices for the provider sessions that are the given Portcullis sessions (all of the user's: 'all'). */
async function noticesFor(trx: Executor, userId: string, sessionIds: string[] | 'all'): Promise<LogoutNotice[]> {
  const rows = sessionIds === 'all' ? await records.sessionsOfUser(trx, userId) : await records.sessionsOf(trx, sessionIds)
  return rows.flatMap((row) => (JSON.parse(row.sids ?? '[]') as [string, string][]).map(([clientId, sid]) => ({ clientId, subject: userId, sid })))
}

/**
 * The provider's part of "every session of the account ends" (src/auth/sign-out.ts): logout-all, a
 * reset or change of the password, a disable, an operator's revocation, deletion. In the caller's
 * transaction: each client the account's provider sessions signed in to is told (queued), and every
 * grant ends with its codes, refresh tokens and those sessions; the change feed carries the grants'
 * end to every instance, so their JWT access tokens stop working on the API within the bound.
 */
export async function endProviderGrants(trx: Executor, userId: string, now: number): Promise<void> {
  await deliveries.insert(trx, await noticesFor(trx, userId, 'all'), now)
  const grants = await records.destroyAllOf(trx, userId)
  await publishChanges(trx, grants.map((grant) => ({ kind: 'grant_revoked' as const, user_id: userId, target_id: grant })))
}

/** One or some of a user's sessions ended (a logout, a revoked session): their provider sessions end, and their clients are told. */
export async function endProviderSessions(trx: Executor, userId: string, sessionIds: string[], now: number): Promise<void> {
  if (sessionIds.length === 0) return
  await deliveries.insert(trx, await noticesFor(trx, userId, sessionIds), now)
  await records.destroySessionsOf(trx, sessionIds)
}

/** Notices for a session the library itself ended (its end-session endpoint). */
export async function queueLogoutNotices(db: Executor, notices: LogoutNotice[], now: number): Promise<void> {
  await deliveries.insert(db, notices, now)
}

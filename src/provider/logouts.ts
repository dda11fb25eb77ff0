import { randomUUID } from 'node:crypto'
import type { Kysely, Selectable } from 'kysely'
import { publishChanges } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { Database, OpLogoutDeliveriesTable } from '../db/schema.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'
import { DurableQueue, type DurableQueueNames, type DurableQueueOptions } from '../queue/durable.ts'
import { queueTable } from '../queue/table.ts'
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
}

/** Leasing, closing, retrying, counting and retention: the durable queues' shared table calls. */
const logoutTable = queueTable<LogoutRow>('op_logout_deliveries')

export const pruneLogoutDeliveries = logoutTable.deleteClosed

/**
 * Back-Channel Logout through a durable queue (docs/provider.md): a notice is written in the
 * transaction that ends the session, and the shared queue machinery (src/queue/durable.ts) delivers
 * it with retries, whichever instance is up, however the session ended.
 */
export class BackchannelLogouts {
  private readonly queue: DurableQueue<LogoutRow>

  constructor(db: Db, clock: Clock, logger: Logger, metrics: Metrics, deliver: (row: LogoutRow) => Promise<void>, options: Partial<DurableQueueOptions> = {}) {
    this.queue = new DurableQueue({
      store: logoutTable.store(db),
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

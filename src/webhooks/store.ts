import { sql, type Kysely, type Selectable } from 'kysely'
import type { TimeId } from '../cursor.ts'
import type { Db, Engine } from '../db/index.ts'
import type { Database, WebhookDeliveriesTable, WebhookEndpointsTable } from '../db/schema.ts'
import { queueTable } from '../queue/table.ts'

type Executor = Kysely<Database>
export type EndpointRow = Selectable<WebhookEndpointsTable>
export type DeliveryRow = Selectable<WebhookDeliveriesTable>

/** The advisory lock that serialises registrations of endpoints on PostgreSQL ('whk' and 1). */
const ENDPOINTS_LOCK = 0x77686b01

/** Newest first by (created_at, id), strictly before the position: the deliveries log's pages. */
const LAST: TimeId = { t: Number.MAX_SAFE_INTEGER, id: '' }

export const endpoints = {
  async insert(db: Executor, row: EndpointRow): Promise<void> {
    await db.insertInto('webhook_endpoints').values(row).execute()
  },

  async find(db: Executor, id: string): Promise<EndpointRow | null> {
    return (await db.selectFrom('webhook_endpoints').selectAll().where('id', '=', id).executeTakeFirst()) ?? null
  },

  async list(db: Executor): Promise<EndpointRow[]> {
    return db.selectFrom('webhook_endpoints').selectAll().orderBy('created_at').orderBy('id').execute()
  },

  async count(db: Executor): Promise<number> {
    const row = await db.selectFrom('webhook_endpoints').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()
    return Number(row.n)
  },

  /**
   * Makes concurrent registrations of endpoints take turns until commit, so that the cap counted
   * inside each holds. PostgreSQL only: on SQLite the insert that precedes the count already holds
   * the database's one write lock.
   */
  async serialiseCreation(db: Executor, engine: Engine): Promise<void> {
    if (engine === 'postgres') await sql`select pg_advisory_xact_lock(${ENDPOINTS_LOCK})`.execute(db)
  },

  /**
   * The outbox's fan-out, read in the transaction that writes the event: the enabled endpoints that
   * take `type`. The table holds at most 20 rows (the cap in src/webhooks/service.ts), so this is
   * one read of a page or two; no index would beat it, and a deployment with no endpoint pays this
   * one cheap query per event and nothing more.
   *
   * On PostgreSQL the rows are also locked FOR KEY SHARE until the event's transaction ends, so the
   * delivery rows inserted next cannot meet a foreign-key violation: under READ COMMITTED an
   * endpoint read here could otherwise be deleted and committed before the insert (even inside one
   * INSERT ... SELECT, whose foreign-key check looks at the latest rows, not the statement's
   * snapshot), and the user's change would fail for an operator's tidying. KEY SHARE conflicts only
   * with a DELETE (a PATCH, a rotation or the queue's own updates change no key and pass freely);
   * SKIP LOCKED makes an endpoint being deleted right now count as deleted already, instead of
   * making the change wait on the removal (which may be deleting a long log of deliveries). A removal
   * that then rolls back has cost the events written meanwhile that endpoint: the price of never
   * waiting. On SQLite the event's transaction already holds the one write lock (it wrote the
   * change first), so no removal can commit between this read and the insert.
   */
  async subscribed(db: Executor, engine: Engine, type: string): Promise<{ id: string }[]> {
    const pattern = `% ${type.replace(/[\\%_]/g, (c) => `\\${c}`)} %`
    let query = db
      .selectFrom('webhook_endpoints')
      .select('id')
      .where('enabled', '=', 1)
      .where((eb) => eb.or([eb('events', '=', '*'), eb(sql<string>`' ' || events || ' '`, 'like', sql<string>`${pattern} escape '\\'`)]))
    if (engine === 'postgres') query = query.forKeyShare().skipLocked()
    return query.execute()
  },

  /** Takes the row's write lock for the rest of the transaction and returns it (two PATCHes merge one after the other). */
  async lockForUpdate(db: Executor, id: string, at: number): Promise<EndpointRow | null> {
    return (await db.updateTable('webhook_endpoints').set({ updated_at: at }).where('id', '=', id).returningAll().executeTakeFirst()) ?? null
  },

  async update(db: Executor, id: string, changes: Partial<Omit<EndpointRow, 'id' | 'created_at'>>): Promise<void> {
    await db.updateTable('webhook_endpoints').set(changes).where('id', '=', id).execute()
  },

  /** Removes the endpoint and, with it (the foreign key's cascade), its deliveries and their log. */
  async delete(db: Executor, id: string): Promise<boolean> {
    return (await db.deleteFrom('webhook_endpoints').where('id', '=', id).executeTakeFirst()).numDeletedRows > 0n
  },

  /** The first failure of a run; a success clears it. Only the first failure's time is kept. */
  async failing(db: Executor, id: string, since: number): Promise<void> {
    await db.updateTable('webhook_endpoints').set({ failing_since: since }).where('id', '=', id).where('failing_since', 'is', null).execute()
  },

  async succeeding(db: Executor, id: string): Promise<void> {
    await db.updateTable('webhook_endpoints').set({ failing_since: null }).where('id', '=', id).where('failing_since', 'is not', null).execute()
  },

  /** Disables an endpoint still failing since before `before`; false when another instance did it or it recovered. */
  async disableIfFailingSince(db: Executor, id: string, before: number, at: number): Promise<boolean> {
    const result = await db
      .updateTable('webhook_endpoints')
      .set({ enabled: 0, disabled_reason: 'failing', updated_at: at })
      .where('id', '=', id)
      .where('enabled', '=', 1)
      .where('failing_since', '<=', before)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async sealedSecrets(db: Executor): Promise<Pick<EndpointRow, 'id' | 'secret' | 'previous_secret'>[]> {
    return db.selectFrom('webhook_endpoints').select(['id', 'secret', 'previous_secret']).execute()
  },
}

/** The outbox and queue table's own calls; leasing, closing and retention are the shared ones (src/queue/table.ts). */
export const deliveries = {
  async insert(db: Executor, rows: Omit<DeliveryRow, 'attempts' | 'lease_owner' | 'lease_until' | 'sent_at' | 'failed_at' | 'last_error' | 'last_status'>[]): Promise<void> {
    if (rows.length === 0) return
    await db.insertInto('webhook_deliveries').values(rows.map((row) => ({ ...row, attempts: 0 }))).execute()
  },

  /**
   * Leases up to `limit` due rows to `owner`, counting the attempt, like every durable queue's claim,
   * with two more conditions. A user's event waits while an earlier one of theirs for the same
   * endpoint is still pending, unless that one is more than `holdMs` old (in order per user while
   * the endpoint answers; a poison event holds the rest back for its first minute only). And rows of
   * the `skipLanes` endpoints (their lane on this instance is full) stay for later.
   */
  async claim(db: Db, owner: string, now: number, leaseMs: number, limit: number, skipLanes: string[], holdMs: number): Promise<DeliveryRow[]> {
    let due = db.kysely
      .selectFrom('webhook_deliveries as d')
      .select('d.id')
      .where('d.sent_at', 'is', null)
      .where('d.failed_at', 'is', null)
      .where('d.next_attempt_at', '<=', now)
      .where((eb) => eb.or([eb('d.lease_until', 'is', null), eb('d.lease_until', '<', now)]))
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom('webhook_deliveries as e')
              .select('e.id')
              .whereRef('e.endpoint_id', '=', 'd.endpoint_id')
              .whereRef('e.user_id', '=', 'd.user_id')
              .whereRef('e.sequence', '<', 'd.sequence')
              .where('e.sent_at', 'is', null)
              .where('e.failed_at', 'is', null)
              .where('e.created_at', '>', now - holdMs),
          ),
        ),
      )
      .orderBy('d.next_attempt_at')
      .limit(limit)
    if (skipLanes.length > 0) due = due.where('d.endpoint_id', 'not in', skipLanes)
    if (db.engine === 'postgres') due = due.forUpdate().skipLocked()
    return db.kysely
      .updateTable('webhook_deliveries')
      .set((eb) => ({ lease_owner: owner, lease_until: now + leaseMs, attempts: eb('attempts', '+', 1) }))
      .where('id', 'in', due)
      .returningAll()
      .execute()
  },

  /**
   * The endpoint was disabled: its deliveries not yet sent are given up (a row in flight finishes
   * its attempt first; its outcome is then recorded as usual). An operator retries them by hand.
   */
  async giveUpOpen(db: Executor, endpointId: string, at: number, reason: string): Promise<number> {
    const result = await db
      .updateTable('webhook_deliveries')
      .set({ failed_at: at, last_error: reason })
      .where('endpoint_id', '=', endpointId)
      .where('sent_at', 'is', null)
      .where('failed_at', 'is', null)
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', at)]))
      .executeTakeFirst()
    return Number(result.numUpdatedRows)
  },

  /** Gives a claimed row back untried (its lane was full): no lease, and the claim's attempt taken back. */
  async release(db: Executor, id: string, owner: string): Promise<void> {
    await db
      .updateTable('webhook_deliveries')
      .set((eb) => ({ lease_owner: null, lease_until: null, attempts: eb('attempts', '-', 1) }))
      .where('id', '=', id)
      .where('lease_owner', '=', owner)
      .execute()
  },

  /** A delivery's outcome (sent, given up or rescheduled) with the status of its attempt; only by the lease holder. */
  async outcome(db: Executor, id: string, owner: string, changes: Partial<Pick<DeliveryRow, 'sent_at' | 'failed_at' | 'next_attempt_at' | 'last_error' | 'lease_until' | 'last_status'>>): Promise<void> {
    await db.updateTable('webhook_deliveries').set(changes).where('id', '=', id).where('lease_owner', '=', owner).execute()
  },

  /** The endpoint's deliveries, newest first, strictly before `before`. */
  async page(db: Executor, endpointId: string, before: TimeId | null, limit: number): Promise<DeliveryRow[]> {
    const from = before ?? LAST
    return db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('endpoint_id', '=', endpointId)
      .where((eb) => eb(eb.refTuple('created_at', 'id'), '<', eb.tuple(from.t, from.id)))
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute()
  },

  async find(db: Executor, endpointId: string, id: string): Promise<DeliveryRow | null> {
    return (await db.selectFrom('webhook_deliveries').selectAll().where('id', '=', id).where('endpoint_id', '=', endpointId).executeTakeFirst()) ?? null
  },

  /**
   * Makes a delivery due now again, given up, delivered or waiting (an operator's retry: the
   * receiver may have lost what it took), unless its payload is gone. One in flight is left to
   * finish. False when there is no payload to send.
   */
  async retryNow(db: Executor, endpointId: string, id: string, now: number): Promise<boolean> {
    const result = await db
      .updateTable('webhook_deliveries')
      .set({ next_attempt_at: now, failed_at: null, sent_at: null })
      .where('id', '=', id)
      .where('endpoint_id', '=', endpointId)
      .where('payload', 'is not', null)
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now), eb('sent_at', 'is not', null), eb('failed_at', 'is not', null)]))
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /** Retention: empties the payloads of rows closed before `before` (the log keeps the rest). */
  async erasePayloads(db: Executor, before: number, limit: number): Promise<number> {
    const sent = db.selectFrom('webhook_deliveries').select('id').where('sent_at', '<', before).where('payload', 'is not', null).limit(limit)
    const failed = db.selectFrom('webhook_deliveries').select('id').where('failed_at', '<', before).where('payload', 'is not', null).limit(limit)
    const first = await db.updateTable('webhook_deliveries').set({ payload: null }).where('id', 'in', sent).executeTakeFirst()
    const second = await db.updateTable('webhook_deliveries').set({ payload: null }).where('id', 'in', failed).executeTakeFirst()
    return Number(first.numUpdatedRows) + Number(second.numUpdatedRows)
  },
}

/** Leasing, closing, retrying, counting and retention: the durable queues' shared table calls. */
export const deliveryTable = queueTable<DeliveryRow>('webhook_deliveries')

/**
 * The next number of the user's events, in the caller's transaction: an upsert that takes the row's
 * lock, so two changes of one user at once get two numbers in commit order's sense on PostgreSQL
 * (the second waits for the first) and SQLite (one writer at a time).
 */
export async function nextSequence(db: Executor, userId: string): Promise<number> {
  const row = await db
    .insertInto('webhook_sequences')
    .values({ user_id: userId, last: 1 })
    .onConflict((oc) => oc.column('user_id').doUpdateSet((eb) => ({ last: eb('webhook_sequences.last', '+', 1) })))
    .returning('last')
    .executeTakeFirstOrThrow()
  return row.last
}

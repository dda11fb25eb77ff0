import type { Kysely } from 'kysely'
import type { Db } from '../db/index.ts'
import type { Database } from '../db/schema.ts'
import type { DurableRow, DurableStore } from './durable.ts'

/**
 * The tables of the durable queues: each has the columns below besides its own payload, and the
 * same two indexes (what is due: `(sent_at, failed_at, next_attempt_at)`; given up: `failed_at`).
 */
export type QueueTableName = 'mail_outbox' | 'op_logout_deliveries' | 'webhook_deliveries'

interface QueueColumns {
  id: string
  attempts: number
  created_at: number
  next_attempt_at: number
  lease_owner: string | null
  lease_until: number | null
  sent_at: number | null
  failed_at: number | null
  last_error: string | null
}

export type Outcome = { sent_at: number; last_error: null } | { failed_at: number; last_error: string }

/**
 * The storage calls every durable queue's table shares (src/queue/durable.ts): leasing what is due,
 * closing a row either way, rescheduling it, counting what waits, and retention's deletion of closed
 * records. Written once for any table with the queue's columns; Kysely cannot check a table chosen at
 * run time against one schema, so the calls are typed by the columns they use.
 */
export function queueTable<Row extends DurableRow>(table: QueueTableName, options: { erase?: Record<string, string> } = {}) {
  const on = (db: Kysely<Database>) => db as unknown as Kysely<Record<QueueTableName, QueueColumns>>
  return {
    /**
     * Leases up to `limit` due rows to `owner` and counts the attempt. A row is due when neither sent
     * nor given up, its next attempt has come, and no live lease holds it; so two instances never
     * deliver one row at once, and a row whose instance died is taken up again when its lease runs
     * out. PostgreSQL skips rows another claimer has locked; SQLite has one writer at a time anyway.
     */
    async claim(db: Db, owner: string, now: number, leaseMs: number, limit: number): Promise<Row[]> {
      let due = on(db.kysely)
        .selectFrom(table)
        .select('id')
        .where('sent_at', 'is', null)
        .where('failed_at', 'is', null)
        .where('next_attempt_at', '<=', now)
        .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
        .orderBy('next_attempt_at')
        .limit(limit)
      if (db.engine === 'postgres') due = due.forUpdate().skipLocked()
      return (await on(db.kysely)
        .updateTable(table)
        .set((eb) => ({ lease_owner: owner, lease_until: now + leaseMs, attempts: eb('attempts', '+', 1) }))
        .where('id', 'in', due)
        .returningAll()
        .execute()) as unknown as Row[]
    },

    /** Sent or given up: the row stays as the record (with `erase`'s columns emptied). Only the lease holder may close it. */
    async close(db: Kysely<Database>, id: string, owner: string, outcome: Outcome): Promise<void> {
      await on(db).updateTable(table).set({ ...outcome, lease_until: null, ...options.erase }).where('id', '=', id).where('lease_owner', '=', owner).execute()
    },

    async retryAt(db: Kysely<Database>, id: string, owner: string, at: number, error: string): Promise<void> {
      await on(db).updateTable(table).set({ next_attempt_at: at, lease_until: null, last_error: error }).where('id', '=', id).where('lease_owner', '=', owner).execute()
    },

    async pending(db: Kysely<Database>): Promise<number> {
      const row = await on(db)
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<string | number>().as('n'))
        .where('sent_at', 'is', null)
        .where('failed_at', 'is', null)
        .executeTakeFirstOrThrow()
      return Number(row.n)
    },

    /**
     * Retention: deletes up to `limit` records of rows sent, and as many given up, before `before`;
     * each condition is a range of its own index.
     */
    async deleteClosed(db: Kysely<Database>, before: number, limit: number): Promise<number> {
      const sent = on(db).selectFrom(table).select('id').where('sent_at', '<', before).limit(limit)
      const failed = on(db).selectFrom(table).select('id').where('failed_at', '<', before).limit(limit)
      const first = await on(db).deleteFrom(table).where('id', 'in', sent).executeTakeFirst()
      const second = await on(db).deleteFrom(table).where('id', 'in', failed).executeTakeFirst()
      return Number(first.numDeletedRows) + Number(second.numDeletedRows)
    },

    /** The queue's storage (DurableStore) on this table. */
    store(db: Db): DurableStore<Row> {
      return {
        // Lanes are a webhook matter; these tables' queues have none (their own claim if they did).
        claim: (owner, now, leaseMs, limit) => this.claim(db, owner, now, leaseMs, limit),
        delivered: (id, owner, at) => this.close(db.kysely, id, owner, { sent_at: at, last_error: null }),
        givenUp: (id, owner, at, error) => this.close(db.kysely, id, owner, { failed_at: at, last_error: error }),
        retryAt: (id, owner, at, error) => this.retryAt(db.kysely, id, owner, at, error),
        pending: () => this.pending(db.kysely),
      }
    },
  }
}

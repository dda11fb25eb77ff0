import { randomUUID } from 'node:crypto'
import type { Clock } from '../clock.ts'
import type { Metrics } from '../http/metrics.ts'
import type { Logger } from '../logger.ts'

/** What the queue itself reads from a claimed row; the rest of the row is the deliverer's. */
export interface DurableRow {
  id: string
  /** Counted by the claim, so the first delivery sees 1: the retry delay doubles from there. */
  attempts: number
  created_at: number
}

/**
 * A queue's storage: its own table, with the lease and the outcome on each row. Every call that
 * changes a claimed row is made by its lease holder (`owner`), and the store only changes the row
 * while that owner still holds it, so an instance whose lease ran out (and whose row another
 * instance took up) cannot overwrite the newer outcome.
 */
export interface DurableStore<Row extends DurableRow> {
  /**
   * Leases up to `limit` due rows to `owner` until `now + leaseMs` and counts the attempt. A row is
   * due when neither delivered nor given up, its next attempt has come, and no live lease holds it.
   */
  claim(owner: string, now: number, leaseMs: number, limit: number, skipLanes: string[]): Promise<Row[]>
  delivered(id: string, owner: string, at: number): Promise<void>
  givenUp(id: string, owner: string, at: number, error: string): Promise<void>
  /** Releases the lease and makes the row due again at `at`, keeping `error` as its last one. */
  retryAt(id: string, owner: string, at: number, error: string): Promise<void>
  /** Rows neither delivered nor given up, on every instance. */
  pending(): Promise<number>
  /**
   * Gives a claimed row back untried: the lease ends and the claim's attempt is taken back. Needed
   * with lanes only (a claim may bring more of a lane's rows than it has room for).
   */
  release?(id: string, owner: string): Promise<void>
}

export interface DurableQueueOptions {
  /** How often every instance looks for due rows (a kick after a commit also starts a pass at once). */
  pollMs: number
  /** How long a claimed row is this instance's; longer than any delivery can take. */
  leaseMs: number
  /** The first retry's delay; each further one doubles, up to retryMaxMs. */
  retryBaseMs: number
  retryMaxMs: number
  /** A row not delivered by this age (from created_at) is given up. */
  maxAgeMs: number
  /** Rows claimed at once; a pass keeps claiming while batches come back full. */
  batch: number
  /**
   * A random share of each retry delay added or taken off (0.2: up to 20% either way), so rows that
   * failed together (a receiver's outage) are not all retried in the same instant. 0 by default.
   */
  jitter?: number
}

/**
 * Rows in lanes (webhooks: one lane per endpoint): a lane's rows go one at a time, lanes side by
 * side, and a pass does not wait for them, so a slow receiver delays only its own rows. At most
 * `depth` rows of a lane are claimed and waiting on this instance; the store's claim leaves out the
 * lanes that are full, and the queue claims again as soon as a full lane has room.
 */
export interface DurableQueueLanes<Row> {
  of(row: Row): string
  depth: number
  /**
   * True for a failure that says the receiver cannot be reached at all (a refused connection, no
   * answer in time). The lane then rests on this instance, from retryBaseMs doubling up to
   * LANE_REST_MAX_MS while it stays unreachable, instead of trying each due row on its own schedule:
   * a dead receiver costs a few attempts a minute, not one per waiting row. An answer of any
   * status does not rest the lane (its rows keep their own retries).
   */
  unreachable?(error: unknown): boolean
}

/** The longest a lane whose receiver cannot be reached rests between attempts. */
export const LANE_REST_MAX_MS = 60_000

export interface DurableQueueMetric {
  name: string
  help: string
}

/**
 * What the queue is called in metrics and logs. Operators alert on the metric names and search
 * the log messages, so each queue keeps its own, and keeps them once published.
 */
export interface DurableQueueNames<Row> {
  sent: DurableQueueMetric
  retried: DurableQueueMetric
  failed: DurableQueueMetric
  /** A gauge of `pending()` as of the last pass, so a scrape costs no query. */
  queued: DurableQueueMetric
  /** The one label of the three counters, and its value for a row; keep its values few. */
  label: { name: string; of(row: Row): string }
  log: {
    givenUp: string
    retrying: string
    passFailed: string
    /**
     * The fields that name a row in its log lines, e.g. `{ mail: { id, kind, attempts } }`; never
     * the payload, which may carry a token.
     */
    fields(row: Row): object
  }
}

export interface DurableQueueParts<Row extends DurableRow> {
  store: DurableStore<Row>
  /** Hands one row over; resolving means delivered, throwing means not (retried or given up). */
  deliver(row: Row): Promise<void>
  /** True for a failure that no retry can cure (mail: an SMTP 5xx); the row is given up at once. */
  isPermanent(error: unknown): boolean
  clock: Clock
  logger: Logger
  metrics: Metrics
  options: DurableQueueOptions
  names: DurableQueueNames<Row>
  /** Without lanes a pass delivers its rows one after another (mail, logout notices). */
  lanes?: DurableQueueLanes<Row>
}

/**
 * The machinery of a durable queue, shared by every queue the service has (mail first). A row is
 * written by the caller in the same transaction as the change it reports, so it exists exactly
 * when that change does and survives a crash or an outage of the receiver. Every instance runs a
 * sender that claims due rows with a lease, so a row is delivered by one instance at a time, once
 * in the normal case and at least once after a crash. Failures are retried with a doubling delay;
 * a permanent failure or a row older than the horizon is given up and recorded.
 *
 * A second queue brings its own table (a migration with id, attempts, next_attempt_at,
 * lease_owner, lease_until, created_at, the outcome columns and its payload), its own store over
 * it (see `src/mail/outbox.ts` for the lease conditions and PostgreSQL's SKIP LOCKED), its own
 * deliver and permanence rule, and its own metric names; its service wraps one DurableQueue:
 *
 *   const queue = new DurableQueue<LogoutRow>({
 *     store: logoutStore(db), deliver: (row) => postLogoutToken(row), isPermanent: (e) => e instanceof ClientRefused,
 *     clock, logger, metrics, options: { ...LOGOUT_QUEUE, batch: 10 }, names: LOGOUT_NAMES,
 *   })
 *   queue.start()            // at boot; `await queue.stop()` at shutdown
 *   queue.kick()             // after the commit that wrote a row
 */
export class DurableQueue<Row extends DurableRow> {
  private readonly owner = randomUUID()
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null
  private again = false
  private stopped = false
  /** The queue length as of the last pass; the gauge reads it without a query per scrape. */
  private queuedCount = 0
  /** With lanes: each lane's rows claimed and not yet done here, and the end of its chain. */
  private readonly laneWork = new Map<string, { rows: number; tail: Promise<void> }>()
  /** Lanes whose receiver could not be reached: not claimed from until `until`. */
  private readonly resting = new Map<string, { until: number; streak: number }>()
  private readonly sent
  private readonly retried
  private readonly failed

  constructor(private readonly parts: DurableQueueParts<Row>) {
    const { metrics, names } = parts
    if (parts.lanes && !parts.store.release) throw new Error('a queue with lanes needs a store that can release a claimed row')
    const labelNames = [names.label.name] as const
    this.sent = metrics.counter({ ...names.sent, labelNames })
    this.retried = metrics.counter({ ...names.retried, labelNames })
    this.failed = metrics.counter({ ...names.failed, labelNames })
    metrics.gauge({ ...names.queued, read: () => this.queuedCount })
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), this.parts.options.pollMs)
    this.timer.unref()
    this.kick()
  }

  /** Looks for due rows now (after a commit that wrote one); passes never overlap. */
  kick(): void {
    if (this.stopped) return
    if (this.running) {
      this.again = true
      return
    }
    this.running = this.pass()
      .catch((error: unknown) => this.parts.logger.warn({ err: { message: (error as Error).message } }, this.parts.names.log.passFailed))
      .finally(() => {
        this.running = null
        if (this.again) {
          this.again = false
          this.kick()
        }
      })
  }

  private async pass(): Promise<void> {
    const { store, clock, options, lanes } = this.parts
    for (;;) {
      const now = clock.now()
      const full = lanes ? [...this.laneWork].filter(([, work]) => work.rows >= lanes.depth).map(([lane]) => lane) : []
      for (const [lane, rest] of this.resting) if (rest.until > now) full.push(lane)
      const batch = await store.claim(this.owner, clock.now(), options.leaseMs, options.batch, full)
      if (lanes) for (const row of batch) this.queueInLane(row, lanes)
      // One at a time: a receiver is better served by a steady stream than by a burst of connections.
      else for (const row of batch) await this.deliver(row)
      if (batch.length < options.batch || this.stopped) break
    }
    this.queuedCount = await store.pending()
  }

  /**
   * Appends a claimed row to its lane's chain; a lane that had been full claims again once it has
   * room. Rows beyond the lane's depth go back untried: waiting here, their lease could run out
   * behind a slow receiver and another instance take them up while this one still holds them.
   */
  private queueInLane(row: Row, lanes: DurableQueueLanes<Row>): void {
    const lane = lanes.of(row)
    if ((this.laneWork.get(lane)?.rows ?? 0) >= lanes.depth) {
      void this.parts.store.release!(row.id, this.owner).catch((error: unknown) => this.parts.logger.warn({ err: { message: (error as Error).message } }, this.parts.names.log.passFailed))
      return
    }
    const work = this.laneWork.get(lane) ?? { rows: 0, tail: Promise.resolve() }
    this.laneWork.set(lane, work)
    work.rows += 1
    work.tail = work.tail
      // Rows not started when the queue stops are left to their lease: another instance takes them up.
      .then(async () => {
        if (this.stopped || (this.resting.get(lane)?.until ?? 0) > this.parts.clock.now()) {
          // Stopping, or the lane began to rest while this row waited: back untried.
          await this.parts.store.release!(row.id, this.owner)
          return
        }
        this.rest(lane, lanes, await this.deliver(row))
      })
      .catch((error: unknown) => this.parts.logger.warn({ err: { message: (error as Error).message } }, this.parts.names.log.passFailed))
      .finally(() => {
        work.rows -= 1
        if (work.rows > 0) return
        if (this.laneWork.get(lane) === work) this.laneWork.delete(lane)
        // The lane is empty: claim again (a claim per lane-full of rows, not per row).
        this.kick()
      })
  }

  /** After a delivery in a lane: an unreachable receiver makes the lane rest (longer each time); any answer ends the rest. */
  private rest(lane: string, lanes: DurableQueueLanes<Row>, failure: unknown): void {
    if (failure === null || !lanes.unreachable?.(failure)) {
      this.resting.delete(lane)
      return
    }
    const streak = (this.resting.get(lane)?.streak ?? 0) + 1
    const pause = Math.min(this.parts.options.retryBaseMs * 2 ** (streak - 1), LANE_REST_MAX_MS)
    this.resting.set(lane, { until: this.parts.clock.now() + pause, streak })
  }

  private lanesDone(): Promise<unknown> {
    return Promise.all([...this.laneWork.values()].map((work) => work.tail))
  }

  /** Hands one row over and records the outcome; resolves with the failure, or null when delivered. */
  private async deliver(row: Row): Promise<unknown> {
    const { store, clock, options, logger, names } = this.parts
    const label = { [names.label.name]: names.label.of(row) }
    try {
      await this.parts.deliver(row)
    } catch (error) {
      const now = clock.now()
      const reason = ((error as Error).message ?? 'unknown error').slice(0, 300)
      if (this.parts.isPermanent(error) || now - row.created_at >= options.maxAgeMs) {
        await store.givenUp(row.id, this.owner, now, reason)
        this.failed.inc(label)
        logger.error({ ...names.log.fields(row), err: { message: reason } }, names.log.givenUp)
        return error
      }
      const jitter = 1 + (options.jitter ?? 0) * (2 * Math.random() - 1)
      const delay = Math.round(Math.min(options.retryBaseMs * 2 ** (row.attempts - 1), options.retryMaxMs) * jitter)
      await store.retryAt(row.id, this.owner, now + delay, reason)
      this.retried.inc(label)
      logger.warn({ ...names.log.fields(row), retryInMs: delay, err: { message: reason } }, names.log.retrying)
      return error
    }
    await store.delivered(row.id, this.owner, clock.now())
    this.sent.inc(label)
    return null
  }

  /** Resolves once every row due now has been tried once more (tests wait on it). */
  async flush(): Promise<void> {
    await this.running
    await this.lanesDone()
    this.kick()
    await this.running
    await this.lanesDone()
  }

  /** Stops claiming; resolves once the pass under way (if any) has finished. */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
    await this.running
    await this.lanesDone()
  }
}

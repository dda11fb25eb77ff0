import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { Clock } from '../../src/clock.ts'
import { Metrics } from '../../src/http/metrics.ts'
import type { Logger } from '../../src/logger.ts'
import { DurableQueue, type DurableQueueNames, type DurableQueueOptions, type DurableStore } from '../../src/queue/durable.ts'

interface Row {
  id: string
  kind: string
  attempts: number
  created_at: number
  next_attempt_at: number
  lease_owner: string | null
  lease_until: number | null
  sent_at: number | null
  failed_at: number | null
  last_error: string | null
}

/**
 * The storage contract in memory, with the same lease conditions as the outbox's SQL: this file
 * tests the scheduling, which does not need a database (the outbox itself is tested on both
 * engines by test/integration/mail-queue.test.ts).
 */
class MemoryStore implements DurableStore<Row> {
  readonly rows = new Map<string, Row>()
  claims = 0
  /** Calls to pending(): one at the end of every pass that did not fail. */
  passesEnded = 0
  /** Set when a claim came while a delivery was still under way, i.e. two passes overlapped. */
  overlapped = false
  inFlight = 0

  add(id: string, at: number, kind = 'ping'): void {
    this.rows.set(id, { id, kind, attempts: 0, created_at: at, next_attempt_at: at, lease_owner: null, lease_until: null, sent_at: null, failed_at: null, last_error: null })
  }

  row(id: string): Row {
    return this.rows.get(id)!
  }

  async claim(owner: string, now: number, leaseMs: number, limit: number, skipLanes: string[] = []): Promise<Row[]> {
    this.claims++
    if (this.inFlight > 0) this.overlapped = true
    const due = [...this.rows.values()]
      .filter((row) => !skipLanes.includes(row.kind))
      .filter((row) => row.sent_at === null && row.failed_at === null && row.next_attempt_at <= now && (row.lease_until === null || row.lease_until < now))
      .sort((a, b) => a.next_attempt_at - b.next_attempt_at)
      .slice(0, limit)
    for (const row of due) Object.assign(row, { lease_owner: owner, lease_until: now + leaseMs, attempts: row.attempts + 1 })
    return due.map((row) => ({ ...row }))
  }

  private held(id: string, owner: string): Row | undefined {
    const row = this.rows.get(id)
    return row?.lease_owner === owner ? row : undefined
  }

  async delivered(id: string, owner: string, at: number): Promise<void> {
    Object.assign(this.held(id, owner) ?? {}, { sent_at: at, last_error: null, lease_until: null })
  }

  async givenUp(id: string, owner: string, at: number, error: string): Promise<void> {
    Object.assign(this.held(id, owner) ?? {}, { failed_at: at, last_error: error, lease_until: null })
  }

  async retryAt(id: string, owner: string, at: number, error: string): Promise<void> {
    Object.assign(this.held(id, owner) ?? {}, { next_attempt_at: at, last_error: error, lease_until: null })
  }

  async release(id: string, owner: string): Promise<void> {
    const row = this.held(id, owner)
    if (row) Object.assign(row, { lease_until: null, lease_owner: null, attempts: row.attempts - 1 })
  }

  async pending(): Promise<number> {
    this.passesEnded++
    return [...this.rows.values()].filter((row) => row.sent_at === null && row.failed_at === null).length
  }
}

/** A refusal no retry cures, like an SMTP 5xx. */
class Refused extends Error {}

const NAMES: DurableQueueNames<Row> = {
  sent: { name: 'test_sent_total', help: 'Delivered.' },
  retried: { name: 'test_retried_total', help: 'Rescheduled.' },
  failed: { name: 'test_failed_total', help: 'Given up.' },
  queued: { name: 'test_queued', help: 'Waiting.' },
  label: { name: 'kind', of: (row) => row.kind },
  log: { givenUp: 'ping given up', retrying: 'ping failed; will retry', passFailed: 'ping pass failed', fields: (row) => ({ ping: { id: row.id, attempts: row.attempts } }) },
}

const OPTIONS: DurableQueueOptions = { pollMs: 60_000, leaseMs: 30_000, retryBaseMs: 1000, retryMaxMs: 5000, maxAgeMs: 3600_000, batch: 10 }

/** A queue on a memory store and a clock the test moves; `deliver` is swapped by each test. */
function setup(options: Partial<DurableQueueOptions> = {}, lanes?: { depth: number; unreachable?: (error: unknown) => boolean }) {
  const clock = { ms: 1_000_000, now() { return this.ms } } satisfies Clock & { ms: number }
  const store = new MemoryStore()
  const metrics = new Metrics()
  const logs: { level: string; msg: string; obj: Record<string, unknown> }[] = []
  const log = (level: string) => (obj: object, msg?: string) => logs.push({ level, msg: msg ?? '', obj: obj as Record<string, unknown> })
  const logger: Logger = { info: log('info'), warn: log('warn'), error: log('error') }
  const delivered: string[] = []
  const harness = {
    clock, store, metrics, logs, delivered,
    /** The receiver; by default it accepts everything. */
    receive: async (_row: Row): Promise<void> => {},
    async count(name: string): Promise<number> {
      const { values } = await metrics.registry.getSingleMetric(name)!.get()
      return values.reduce((sum, value) => sum + value.value, 0)
    },
  }
  const queue = new DurableQueue<Row>({
    store,
    deliver: async (row) => {
      store.inFlight++
      try {
        await harness.receive(row)
        delivered.push(row.id)
      } finally {
        store.inFlight--
      }
    },
    isPermanent: (error) => error instanceof Refused,
    clock,
    logger,
    metrics,
    options: { ...OPTIONS, ...options },
    names: NAMES,
    ...(lanes ? { lanes: { of: (row: Row) => row.kind, ...lanes } } : {}),
  })
  return Object.assign(harness, { queue })
}

/** A receiver that holds each delivery until the test finishes it. */
function heldReceiver() {
  const held: { id: string; finish(): void }[] = []
  return {
    held,
    receive: (row: Row) => new Promise<void>((resolve) => held.push({ id: row.id, finish: resolve })),
    /** Waits until `count` deliveries have started. */
    async started(count: number): Promise<void> {
      for (let turn = 0; held.length < count; turn++) {
        if (turn > 1000) throw new Error(`${held.length} deliveries started, not ${count}`)
        await new Promise((resolve) => setImmediate(resolve))
      }
    },
  }
}

const settle = async (turns = 20) => {
  for (let i = 0; i < turns; i++) await new Promise((resolve) => setImmediate(resolve))
}

describe('durable queue', () => {
  test('a due row is delivered once, recorded, and counted under its label', async () => {
    const q = setup()
    q.store.add('a', q.clock.now())
    q.clock.ms += 5
    await q.queue.flush()
    assert.deepEqual(q.delivered, ['a'])
    assert.equal(q.store.row('a').sent_at, q.clock.now())
    assert.equal(q.store.row('a').attempts, 1)
    const { values } = await q.metrics.registry.getSingleMetric('test_sent_total')!.get()
    assert.deepEqual(values.map((v) => [v.labels, v.value]), [[{ kind: 'ping' }, 1]])
    assert.equal(await q.count('test_queued'), 0)

    q.clock.ms += 3600_000
    await q.queue.flush()
    assert.deepEqual(q.delivered, ['a'], 'a delivered row is never delivered again')
    assert.equal(q.logs.length, 0)
  })

  test('one pass keeps claiming while batches come back full', async () => {
    const q = setup({ batch: 4 })
    for (let i = 0; i < 10; i++) q.store.add(`r${i}`, q.clock.now())
    await q.queue.flush()
    assert.equal(q.delivered.length, 10)
    assert.equal(new Set(q.delivered).size, 10)
    assert.equal(q.store.claims, 3, 'batches of 4, 4 and 2: the short one ends the pass')
    assert.equal(await q.count('test_sent_total'), 10)
  })

  test('a failing delivery is retried after a delay that doubles from retryBaseMs up to retryMaxMs', async () => {
    const q = setup()
    q.receive = async () => {
      throw new Error('connection refused')
    }
    q.store.add('a', q.clock.now())
    const delays: number[] = []
    for (let attempt = 1; attempt <= 5; attempt++) {
      await q.queue.flush()
      assert.equal(q.store.row('a').attempts, attempt)
      const delay = q.store.row('a').next_attempt_at - q.clock.now()
      delays.push(delay)
      q.clock.ms += delay - 1
      await q.queue.flush()
      assert.equal(q.store.row('a').attempts, attempt, 'not tried before its delay is over')
      q.clock.ms += 1
    }
    assert.deepEqual(delays, [1000, 2000, 4000, 5000, 5000])
    assert.equal(q.store.row('a').last_error, 'connection refused')
    assert.equal(q.store.row('a').lease_until, null, 'the lease is released for whichever instance comes next')
    assert.equal(await q.count('test_retried_total'), 5)
    assert.equal(await q.count('test_queued'), 1)
    assert.deepEqual(q.logs.map((l) => [l.level, l.msg, l.obj.retryInMs]), delays.map((d) => ['warn', 'ping failed; will retry', d]))
    assert.deepEqual(q.logs[0]!.obj, { ping: { id: 'a', attempts: 1 }, retryInMs: 1000, err: { message: 'connection refused' } })

    q.receive = async () => {}
    await q.queue.flush()
    assert.equal(q.store.row('a').sent_at, q.clock.now())
    assert.equal(q.store.row('a').last_error, null)
    assert.equal(await q.count('test_sent_total'), 1)
  })

  test('a permanent failure is given up at once, recorded with its reason, and never retried', async () => {
    const q = setup()
    q.receive = async () => {
      throw new Refused(`550 ${'x'.repeat(400)}`)
    }
    q.store.add('a', q.clock.now())
    await q.queue.flush()
    const row = q.store.row('a')
    assert.equal(row.failed_at, q.clock.now())
    assert.equal(row.sent_at, null)
    assert.match(row.last_error!, /^550 x+$/)
    assert.equal(row.last_error!.length, 300, 'the reason is bounded')
    assert.equal(await q.count('test_failed_total'), 1)
    assert.equal(await q.count('test_retried_total'), 0)
    assert.deepEqual(q.logs.map((l) => [l.level, l.msg]), [['error', 'ping given up']])

    q.clock.ms += 3600_000
    await q.queue.flush()
    assert.equal(q.store.row('a').attempts, 1)
  })

  test('a row still failing at maxAgeMs is given up; before that it is retried', async () => {
    const q = setup({ maxAgeMs: 10_000 })
    q.receive = async () => {
      throw new Error('timeout')
    }
    q.store.add('a', q.clock.now())
    await q.queue.flush()
    assert.equal(q.store.row('a').failed_at, null)
    q.clock.ms += 10_000
    await q.queue.flush()
    assert.equal(q.store.row('a').attempts, 2)
    assert.equal(q.store.row('a').failed_at, q.clock.now())
    assert.equal(q.store.row('a').last_error, 'timeout')
    assert.equal(await q.count('test_retried_total'), 1)
    assert.equal(await q.count('test_failed_total'), 1)
    assert.equal(await q.count('test_queued'), 0)
  })

  test('kicks during a pass do not start a second one beside it, but one more pass after it', async () => {
    const q = setup()
    const receiver = heldReceiver()
    q.receive = receiver.receive
    q.store.add('a', q.clock.now())
    q.queue.kick()
    await receiver.started(1)
    q.store.add('b', q.clock.now())
    q.queue.kick()
    q.queue.kick()
    q.queue.kick()
    await settle()
    assert.equal(q.store.claims, 1, 'no claim while the pass is under way')

    receiver.held[0]!.finish()
    await receiver.started(2)
    assert.equal(receiver.held[1]!.id, 'b', 'the row written during the first pass is found by the one after')
    receiver.held[1]!.finish()
    for (let turn = 0; q.store.passesEnded < 2; turn++) {
      assert.ok(turn < 1000, 'the second pass ends')
      await settle(1)
    }
    await settle()
    assert.equal(q.store.claims, 2, 'three kicks during the pass make one more pass, not three')
    assert.equal(q.store.overlapped, false)
    assert.deepEqual(q.delivered, ['a', 'b'])
  })

  test('a pass that fails is logged, and the next kick runs again', async () => {
    const q = setup()
    const pending = q.store.pending.bind(q.store)
    q.store.pending = async () => {
      throw new Error('database is locked')
    }
    q.store.add('a', q.clock.now())
    await q.queue.flush()
    assert.deepEqual(q.logs.map((l) => [l.level, l.msg, l.obj]), [['warn', 'ping pass failed', { err: { message: 'database is locked' } }]])
    q.store.pending = pending
    q.store.add('b', q.clock.now())
    await q.queue.flush()
    assert.deepEqual(q.delivered, ['a', 'b'])
  })

  test('stop waits for the pass under way, which claims no further batch; nothing runs after it', async () => {
    const q = setup({ batch: 2 })
    const receiver = heldReceiver()
    q.receive = receiver.receive
    for (const id of ['a', 'b', 'c', 'd', 'e']) q.store.add(id, q.clock.now())
    q.queue.kick()
    await receiver.started(1)

    let stopped = false
    const stopping = q.queue.stop().then(() => {
      stopped = true
    })
    await settle()
    assert.equal(stopped, false, 'stop does not return while a delivery is under way')
    receiver.held[0]!.finish()
    await receiver.started(2)
    assert.equal(stopped, false, 'the claimed batch is finished, so no row waits out a lease')
    receiver.held[1]!.finish()
    for (let turn = 0; !stopped; turn++) {
      assert.ok(turn < 1000, 'stop returns once the claimed batch is done')
      await settle(1)
    }
    await stopping
    assert.deepEqual(q.delivered, ['a', 'b'])
    assert.equal(q.store.claims, 1)

    q.queue.kick()
    await settle()
    assert.equal(q.store.claims, 1, 'a stopped queue claims nothing')
    assert.equal(['c', 'd', 'e'].every((id) => q.store.row(id).lease_owner === null), true, 'the rest stay for another instance')
  })

  test('lanes: a receiver that hangs holds only its own lane; the other lanes deliver meanwhile, and a full lane is not claimed from', async () => {
    const q = setup({}, { depth: 2 })
    for (let i = 0; i < 4; i++) q.store.add(`slow-${i}`, q.clock.ms, 'slow')
    for (let i = 0; i < 3; i++) q.store.add(`fast-${i}`, q.clock.ms, 'fast')
    const hung: (() => void)[] = []
    q.receive = (row) => (row.kind === 'slow' ? new Promise<void>((resolve) => hung.push(resolve)) : Promise.resolve())
    q.queue.kick()
    for (let turn = 0; turn < 1000 && q.delivered.filter((id) => id.startsWith('fast')).length < 3; turn++) await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(q.delivered, ['fast-0', 'fast-1', 'fast-2'], 'the fast lane was not held up by the hanging one')
    assert.equal(hung.length, 1, 'one delivery at a time in a lane')
    const claimedSlow = [...q.store.rows.values()].filter((row) => row.kind === 'slow' && row.lease_owner !== null).length
    assert.equal(claimedSlow, 2, 'no more than the lane\'s depth claimed')
    // The lane drains one by one, claiming again as it gets room.
    for (let turn = 0; turn < 2000 && q.delivered.length < 7; turn++) {
      hung.shift()?.()
      await new Promise((resolve) => setImmediate(resolve))
    }
    assert.deepEqual(q.delivered.slice(3), ['slow-0', 'slow-1', 'slow-2', 'slow-3'])
    await q.queue.stop()
  })

  test('jitter spreads the retry delay around the doubling: never the same for every row', async () => {
    const q = setup({ jitter: 0.2 })
    for (let i = 0; i < 20; i++) q.store.add(`r-${i}`, q.clock.ms)
    q.receive = async () => {
      throw new Error('down')
    }
    await q.queue.flush()
    const delays = [...q.store.rows.values()].map((row) => row.next_attempt_at - q.clock.ms)
    assert.ok(delays.every((delay) => delay >= 800 && delay <= 1200), `within 20% of 1000 ms: ${delays}`)
    assert.ok(new Set(delays).size > 1, 'not all equal')
    await q.queue.stop()
  })

  test('a lane whose receiver cannot be reached rests, doubling, instead of trying every due row; an answer ends the rest', async () => {
    class Refused extends Error {}
    const q = setup({ retryBaseMs: 1000 }, { depth: 5, unreachable: (error) => error instanceof Refused })
    for (let i = 0; i < 20; i++) q.store.add(`dead-${i}`, q.clock.ms, 'dead')
    q.store.add('live-0', q.clock.ms, 'live')
    let tries = 0
    q.receive = async (row) => {
      if (row.kind === 'dead') {
        tries++
        throw new Refused('connect ECONNREFUSED')
      }
    }
    await q.queue.flush()
    assert.equal(tries, 1, 'one attempt, then the lane rests; its other claimed rows go back untried')
    assert.ok(q.delivered.includes('live-0'), 'another lane is not held')
    assert.equal([...q.store.rows.values()].filter((row) => row.kind === 'dead' && row.attempts > 0).length, 1, 'the rows given back kept their attempts')
    q.clock.ms += 999
    await q.queue.flush()
    assert.equal(tries, 1, 'still resting')
    q.clock.ms += 2
    await q.queue.flush()
    assert.equal(tries, 2, 'one attempt after the rest')
    q.clock.ms += 1999
    await q.queue.flush()
    assert.equal(tries, 2, 'the second rest is twice as long')
    q.receive = async () => {}
    q.clock.ms += 2
    for (let turn = 0; turn < 20 && q.delivered.filter((id) => id.startsWith('dead')).length < 20; turn++) await q.queue.flush()
    assert.equal(q.delivered.filter((id) => id.startsWith('dead')).length, 20, 'once it answers, the lane delivers all of its rows')
    await q.queue.stop()
  })
})

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { describe, test } from 'node:test'
import { promisify } from 'node:util'
import { Webhook } from 'standardwebhooks'
import { openDatabase } from '../../src/db/index.ts'
import { WEBHOOK_QUEUE } from '../../src/webhooks/service.ts'
import { freePort, PASSWORD, within } from '../helpers/app.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { startServerProcess as start, type ServerProcess } from '../helpers/process.ts'

/**
 * Webhook delivery across processes: the built service (dist/server.js) as real processes, a real
 * receiver on loopback verifying every request with the `standardwebhooks` package (what an
 * application would use), and the database read afterwards for what the service recorded.
 * test/mail-crash.test.ts is the same shape for the mail queue.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const json = { 'content-type': 'application/json' }

interface Received {
  id: string
  type: string
  email: string
  /** The signature checked out against the endpoint's secret (and the timestamp is recent). */
  verified: boolean
}

/**
 * A receiver like an application's: it reads the body, verifies it, records it and answers 200.
 * With `holdNext` set it keeps the next request open without ever answering (recorded all the
 * same: its bytes arrived), the receiver that is still working when the service dies.
 */
class Receiver {
  readonly received: Received[] = []
  secret = ''
  holdNext = false
  /** Requests being held, so that the test can see one is in flight. */
  readonly held: ServerResponse[] = []
  private readonly server: Server = createServer((request, response) => void this.take(request, response))
  url = ''

  async start(): Promise<this> {
    this.server.listen(0, '127.0.0.1')
    await once(this.server, 'listening')
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}/hook`
    return this
  }

  private async take(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString('utf8')
    const headers = { 'webhook-id': String(request.headers['webhook-id']), 'webhook-timestamp': String(request.headers['webhook-timestamp']), 'webhook-signature': String(request.headers['webhook-signature']) }
    let verified = false
    try {
      new Webhook(this.secret).verify(body, headers)
      verified = true
    } catch {
      // Recorded as unverified: the test asserts on it.
    }
    const event = JSON.parse(body) as { type: string; data: { email: string } }
    this.received.push({ id: headers['webhook-id'], type: event.type, email: event.data.email, verified })
    if (this.holdNext) {
      this.holdNext = false
      this.held.push(response)
      return
    }
    response.writeHead(200).end()
  }

  /** Each webhook-id and how many times it arrived. */
  counts(): Map<string, number> {
    const counts = new Map<string, number>()
    for (const { id } of this.received) counts.set(id, (counts.get(id) ?? 0) + 1)
    return counts
  }

  async close(): Promise<void> {
    for (const response of this.held) response.destroy()
    this.server.closeAllConnections()
    await new Promise((resolve) => this.server.close(resolve))
  }
}

/** An admin API key for the webhooks, made with the CLI on the service's database as an operator would. */
async function apiKey(storage: TestStorage): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, ['bin/portcullis.mjs', 'api-keys', 'create', '--name', 'webhooks test', '--scopes', 'webhooks:read,webhooks:write'], {
    env: { ...process.env, DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl ?? '' },
  })
  return stdout.trim()
}

/** Registers the receiver's endpoint for user.created through the admin API; the receiver gets the signing secret. */
async function addEndpoint(api: string, key: string, receiver: Receiver): Promise<void> {
  const answer = await fetch(`${api}/admin/webhooks`, { method: 'POST', headers: { ...json, authorization: `Bearer ${key}` }, body: JSON.stringify({ url: receiver.url, events: ['user.created'] }) })
  assert.equal(answer.status, 201, await answer.clone().text())
  receiver.secret = ((await answer.json()) as { data: { secret: string } }).data.secret
}

/** A registration: one user.created event, committed with the account before the 201. */
async function register(api: string, email: string): Promise<void> {
  const answer = await fetch(`${api}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password: PASSWORD, full_name: 'Webhook' }) })
  assert.equal(answer.status, 201, `register ${email}: ${await answer.clone().text()}`)
}

/** The service's record of the events: one row per event (one endpoint here), read from its database. */
async function deliveryRows(storage: TestStorage) {
  const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
  try {
    return await db.kysely.selectFrom('webhook_deliveries').select(['event_id', 'lease_owner', 'sent_at', 'attempts']).execute()
  } finally {
    await db.close()
  }
}

/** What other engineers' processes must not share: their own limits, no mail relay, and users who log in unverified. */
const serviceEnv = (storage: TestStorage) => ({
  DATA_DIR: storage.dataDir,
  DATABASE_URL: storage.databaseUrl ?? '',
  LOG_LEVEL: 'warn',
  REQUIRE_EMAIL_VERIFICATION: 'false',
  RATE_LIMIT_REGISTER_PER_IP: '1000000',
})

/**
 * The service dies (kill -9) while a receiver holds a delivery open. The event was committed with
 * the account and its row was leased to the dead process; once the lease is over, the restarted
 * service sends it again with the same webhook-id, and every other event caused before the crash
 * (queued behind it in the endpoint's lane, leased to the dead process too) arrives as well.
 */
for (const engine of ENGINES) {
  describe(`webhooks survive a crash on ${engine}`, () => {
    test('kill -9 during a delivery: after restart every event arrives, the interrupted one again with the same webhook-id', async (t) => {
      const storage = await createStorage(engine)
      const port = await freePort()
      const api = `http://127.0.0.1:${port}/api/v1`
      const env = { ...serviceEnv(storage), PORT: String(port) }
      const receiver = await new Receiver().start()
      let first: ServerProcess | null = null
      let second: ServerProcess | null = null
      try {
        first = await start(env)
        await addEndpoint(api, await apiKey(storage), receiver)

        const emails = Array.from({ length: 5 }, (_, i) => `crash-${engine}-${i}@example.com`)
        receiver.holdNext = true
        await register(api, emails[0]!)
        await within(10_000, async () => receiver.held.length === 1)
        const heldId = receiver.received[0]!.id
        // Two more events before the crash: the lane takes them behind the held one, leased to this process.
        await register(api, emails[1]!)
        await register(api, emails[2]!)
        await sleep(300)
        assert.equal(receiver.received.length, 1, 'one delivery at a time to an endpoint: the others wait behind the held one')

        first.child.kill('SIGKILL')
        await once(first.child, 'exit')

        // The lease (WEBHOOK_QUEUE.leaseMs, two minutes, no setting for it) stands between the
        // crash and the redelivery, so that a slow instance's row is not sent twice. Moving each
        // live lease back by its length here stands for those two minutes passing: the rows are
        // then exactly as they would be once the dead process's leases ran out.
        const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
        try {
          const moved = await db.kysely
            .updateTable('webhook_deliveries')
            .set((eb) => ({ lease_until: eb('lease_until', '-', WEBHOOK_QUEUE.leaseMs) }))
            .where('sent_at', 'is', null)
            .where('failed_at', 'is', null)
            .where('lease_until', '>', Date.now())
            .executeTakeFirst()
          t.diagnostic(`rows leased to the killed process: ${moved.numUpdatedRows}`)
          assert.ok(moved.numUpdatedRows >= 1n, 'the held delivery was under a lease of the killed process')
        } finally {
          await db.close()
        }

        second = await start(env)
        // Two more events after the restart, delivered beside the ones taken over.
        await register(api, emails[3]!)
        await register(api, emails[4]!)
        await within(20_000, async () => new Set(receiver.received.map((r) => r.email)).size === emails.length && (receiver.counts().get(heldId) ?? 0) >= 2)
        // A little longer: anything sent more than that would show now.
        await sleep(1000)

        const rows = await deliveryRows(storage)
        const caused = new Set(rows.map((row) => row.event_id))
        assert.equal(caused.size, emails.length, 'one event per registration was recorded')
        const counts = receiver.counts()
        t.diagnostic(`deliveries received: ${receiver.received.length} (${[...counts.values()].join(', ')} per webhook-id)`)
        for (const id of caused) assert.ok((counts.get(id) ?? 0) >= 1, `event ${id} arrived`)
        assert.deepEqual(new Set(counts.keys()), caused, 'nothing arrived that was not caused')
        assert.ok(receiver.received.every((r) => r.verified), 'every delivery verified with the endpoint secret')
        assert.deepEqual(new Set(receiver.received.map((r) => r.email)), new Set(emails))
        assert.equal(counts.get(heldId), 2, 'the interrupted delivery arrived again, with the same webhook-id')
        assert.ok(rows.every((row) => row.sent_at !== null), 'the service recorded every delivery as sent')
      } finally {
        first?.child.kill('SIGKILL')
        second?.child.kill('SIGKILL')
        if (second && second.child.exitCode === null && second.child.signalCode === null) await once(second.child, 'exit')
        await receiver.close()
        await storage.drop()
      }
    })
  })
}

/**
 * Two instances on one database, each claiming due rows with a lease: in the normal case (no
 * crash) every event is delivered exactly once, whichever instance wrote it. PostgreSQL only: it is
 * the storage for more than one instance (docs/operations.md; its claim skips rows another
 * instance has locked), while SQLite is the single-instance store, one file on one machine.
 */
describe('two instances on PostgreSQL', () => {
  test('each event is delivered once, and both instances deliver', async (t) => {
    const storage = await createStorage('postgres')
    const [portA, portB] = [await freePort(), await freePort()]
    const apis = [`http://127.0.0.1:${portA}/api/v1`, `http://127.0.0.1:${portB}/api/v1`]
    const receiver = await new Receiver().start()
    const instances: ServerProcess[] = []
    try {
      instances.push(await start({ ...serviceEnv(storage), PORT: String(portA) }))
      await addEndpoint(apis[0]!, await apiKey(storage), receiver)
      instances.push(await start({ ...serviceEnv(storage), PORT: String(portB) }))

      // 100 registrations, alternating between the instances, 8 at a time.
      const EVENTS = 100
      let next = 0
      await Promise.all(Array.from({ length: 8 }, async () => {
        for (let i = next++; i < EVENTS; i = next++) await register(apis[i % 2]!, `pair-${i}@example.com`)
      }))
      await within(30_000, async () => receiver.counts().size === EVENTS)
      // A little longer (several polls of both instances): a second delivery of anything would show now.
      await sleep(2000)

      const counts = receiver.counts()
      const twice = [...counts].filter(([, n]) => n > 1)
      assert.deepEqual(twice, [], 'no webhook-id arrived twice')
      assert.equal(receiver.received.length, EVENTS)
      assert.ok(receiver.received.every((r) => r.verified), 'every delivery verified with the endpoint secret')

      // Which instance delivered a row is on the row: its lease owner (each instance's queue has its
      // own random id), kept when the row is closed as sent.
      const rows = await deliveryRows(storage)
      assert.equal(rows.length, EVENTS)
      assert.deepEqual(new Set(rows.map((row) => row.event_id)), new Set(counts.keys()))
      assert.ok(rows.every((row) => row.sent_at !== null && row.attempts === 1), 'each row sent on its first attempt')
      const byOwner = new Map<string, number>()
      for (const row of rows) byOwner.set(row.lease_owner ?? 'none', (byOwner.get(row.lease_owner ?? 'none') ?? 0) + 1)
      t.diagnostic(`rows delivered per instance: ${[...byOwner.values()].join(', ')}`)
      assert.equal(byOwner.size, 2, 'both instances delivered some')
    } finally {
      for (const instance of instances) instance.child.kill('SIGKILL')
      await Promise.all(instances.map((i) => (i.child.exitCode === null && i.child.signalCode === null ? once(i.child, 'exit') : undefined)))
      await receiver.close()
      await storage.drop()
    }
  })
})

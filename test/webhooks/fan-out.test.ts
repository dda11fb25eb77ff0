import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { setTimeout as delay } from 'node:timers/promises'
import { describe, test } from 'node:test'
import { promisify } from 'node:util'
import pg from 'pg'
import { openDatabase } from '../../src/db/index.ts'
import { AppError } from '../../src/errors.ts'
import { freePort, PASSWORD, startTestApp, uniqueEmail, within } from '../helpers/app.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { startServerProcess as start, type ServerProcess } from '../helpers/process.ts'
import { startWebhookReceiver, verifyError, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

/**
 * Which endpoints an event fans out to, across processes (issue 40 item 5, issue 47): the built
 * service as two real instances A and B on one database, and the CLI as a third process. While users
 * register on A, an endpoint is added and another removed by the CLI, then the same by B. The rule
 * (docs/webhooks.md, "A transactional outbox"): every registration answers 201, and each event goes
 * to exactly the endpoints committed when it was written. Each registration and each change of the
 * endpoints is timed by this process, so "written after the endpoint's creation returned" is "began
 * after the command or the API call answered", and "written before" is "answered before it began".
 */

const execFileAsync = promisify(execFile)
const json = { 'content-type': 'application/json' }

/** The processes' shared settings: the test's database, their own limits, users who log in unverified. */
const serviceEnv = (storage: TestStorage) => ({
  DATA_DIR: storage.dataDir,
  DATABASE_URL: storage.databaseUrl ?? '',
  LOG_LEVEL: 'warn',
  REQUIRE_EMAIL_VERIFICATION: 'false',
  RATE_LIMIT_REGISTER_PER_IP: '1000000',
})

/** `portcullis ARGS` on the service's database, as an operator would run it; its stdout. */
async function cli(storage: TestStorage, args: string[]): Promise<string> {
  const { stdout } = await execFileAsync(process.execPath, ['bin/portcullis.mjs', ...args], { env: { ...process.env, DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl ?? '' } })
  return stdout
}

/** A stretch of the test's time: when a call began and when it answered. */
interface Span {
  start: number
  end: number
}

async function timed<T>(work: () => Promise<T>): Promise<{ value: T; span: Span }> {
  const start = performance.now()
  const value = await work()
  return { value, span: { start, end: performance.now() } }
}

/** One endpoint under test: its receiver, its id, and when it was added and removed (if it was). */
interface Endpoint {
  receiver: WebhookReceiver
  id: string
  added: Span | null
  removed: Span | null
  /** The events delivered to it before it was removed. */
  deliveredBefore: string[]
}

async function receiverFor(): Promise<WebhookReceiver> {
  return startWebhookReceiver()
}

/** POST /admin/webhooks on an instance: user.created to the receiver, which gets the secret. */
async function addByApi(api: string, key: string, receiver: WebhookReceiver): Promise<string> {
  const answer = await fetch(`${api}/admin/webhooks`, { method: 'POST', headers: { ...json, authorization: `Bearer ${key}` }, body: JSON.stringify({ url: receiver.url, events: ['user.created'] }) })
  assert.equal(answer.status, 201, await answer.clone().text())
  const { webhook, secret } = ((await answer.json()) as { data: { webhook: { id: string }; secret: string } }).data
  receiver.secrets = [secret]
  return webhook.id
}

async function removeByApi(api: string, key: string, id: string): Promise<void> {
  const answer = await fetch(`${api}/admin/webhooks/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${key}` } })
  assert.equal(answer.status, 200, await answer.clone().text())
}

async function addByCli(storage: TestStorage, receiver: WebhookReceiver): Promise<string> {
  const { webhook, secret } = JSON.parse(await cli(storage, ['webhooks', 'add', receiver.url, '--events', 'user.created'])) as { webhook: { id: string }; secret: string }
  receiver.secrets = [secret]
  return webhook.id
}

/** The users registered on A, each with the span of its request (the event was written within it). */
class Registrations {
  readonly done: { email: string; span: Span }[] = []
  /** Registrations that did not answer 201 (issue 47: a 500 after an endpoint was removed). */
  readonly failures: string[] = []
  private stopped = false
  private readonly workers: Promise<void>[] = []
  private next = 0

  constructor(
    private readonly api: string,
    private readonly prefix: string,
  ) {}

  /** `count` users registering one after another each, until stop(). Any answer but 201 fails the test. */
  start(count: number): void {
    for (let i = 0; i < count; i++) this.workers.push(this.work())
  }

  private async work(): Promise<void> {
    while (!this.stopped) {
      const email = `${this.prefix}-${this.next++}@example.com`
      try {
        const { value: answer, span } = await timed(() => fetch(`${this.api}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password: PASSWORD, full_name: 'Fan-out' }) }))
        if (answer.status === 201) this.done.push({ email, span })
        else this.failures.push(`${email}: ${answer.status} ${await answer.text()}`)
      } catch (error) {
        this.failures.push(`${email}: ${(error as Error).message}`)
      }
    }
  }

  /** Resolves once `more` registrations beyond those done now have answered. */
  async more(more: number): Promise<void> {
    const target = this.done.length + more
    await within(30_000, async () => {
      assert.deepEqual(this.failures, [], 'every registration answered 201')
      return this.done.length >= target
    })
  }

  async stop(): Promise<void> {
    this.stopped = true
    await Promise.all(this.workers)
  }

  emails(which: (span: Span) => boolean): string[] {
    return this.done.filter(({ span }) => which(span)).map(({ email }) => email)
  }
}

/** The e-mails of the events each endpoint's delivery rows carry, read from the service's database. */
async function rowsByEndpoint(storage: TestStorage): Promise<Map<string, { emails: Set<string>; unsent: number }>> {
  const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
  try {
    const rows = await db.kysely.selectFrom('webhook_deliveries').select(['endpoint_id', 'payload', 'sent_at']).execute()
    const by = new Map<string, { emails: Set<string>; unsent: number }>()
    for (const row of rows) {
      const entry = by.get(row.endpoint_id) ?? { emails: new Set<string>(), unsent: 0 }
      entry.emails.add((JSON.parse(row.payload!) as { data: { email: string } }).data.email)
      if (row.sent_at === null) entry.unsent++
      by.set(row.endpoint_id, entry)
    }
    return by
  } finally {
    await db.close()
  }
}

const received = (endpoint: Endpoint) => new Set(endpoint.receiver.deliveries.map((delivery) => delivery.payload!.data.email!))

for (const engine of ENGINES) {
  describe(`the endpoints an event fans out to, across processes, on ${engine}`, () => {
    test('while A registers users, the CLI and instance B each add one endpoint and remove another: every registration 201, every event to exactly the endpoints that existed when it was written', async (t) => {
      const storage = await createStorage(engine)
      const [portA, portB] = [await freePort(), await freePort()]
      const [apiA, apiB] = [`http://127.0.0.1:${portA}/api/v1`, `http://127.0.0.1:${portB}/api/v1`]
      const instances: ServerProcess[] = []
      const endpoints: Endpoint[] = []
      try {
        // One after the other: the first applies the migrations.
        instances.push(await start({ ...serviceEnv(storage), PORT: String(portA) }))
        instances.push(await start({ ...serviceEnv(storage), PORT: String(portB) }))
        const key = (await cli(storage, ['api-keys', 'create', '--name', 'fan-out test', '--scopes', 'webhooks:read,webhooks:write'])).trim()
        const existing = async () => {
          const receiver = await receiverFor()
          const endpoint: Endpoint = { receiver, id: await addByApi(apiA, key, receiver), added: null, removed: null, deliveredBefore: [] }
          endpoints.push(endpoint)
          return endpoint
        }
        const kept = await existing()
        const removedByCli = await existing()
        const removedByB = await existing()

        const users = new Registrations(apiA, `fan-${engine}`)
        users.start(2)
        await users.more(6)

        // A removal takes effect for what is written after it; what was delivered before stays delivered.
        const removeAfterDelivery = async (endpoint: Endpoint, remove: () => Promise<void>) => {
          const before = users.emails(() => true)
          await within(20_000, async () => before.every((email) => received(endpoint).has(email)))
          endpoint.deliveredBefore = before
          endpoint.removed = (await timed(remove)).span
        }

        const addedByCli: Endpoint = { receiver: await receiverFor(), id: '', added: null, removed: null, deliveredBefore: [] }
        const cliAdd = await timed(() => addByCli(storage, addedByCli.receiver))
        Object.assign(addedByCli, { id: cliAdd.value, added: cliAdd.span })
        endpoints.push(addedByCli)
        await users.more(6)
        await removeAfterDelivery(removedByCli, () => cli(storage, ['webhooks', 'remove', removedByCli.id]).then(() => {}))
        await users.more(6)

        const addedByB: Endpoint = { receiver: await receiverFor(), id: '', added: null, removed: null, deliveredBefore: [] }
        const bAdd = await timed(() => addByApi(apiB, key, addedByB.receiver))
        Object.assign(addedByB, { id: bAdd.value, added: bAdd.span })
        endpoints.push(addedByB)
        await users.more(6)
        await removeAfterDelivery(removedByB, () => removeByApi(apiB, key, removedByB.id))
        await users.more(6)
        await users.stop()
        assert.deepEqual(users.failures, [], 'every registration answered 201')
        t.diagnostic(`registrations on A: ${users.done.length}, all 201`)

        // Written after the endpoint's creation answered: must reach it. Answered before it began: must not.
        const after = (span: Span | null) => (event: Span) => span === null || event.start > span.end
        const before = (span: Span | null) => (event: Span) => span !== null && event.end < span.start
        const owed = (endpoint: Endpoint) => users.emails((event) => after(endpoint.added)(event) && !(endpoint.removed && event.end > endpoint.removed.start))
        // Every event is written by now (each registration has answered); once the live endpoints'
        // rows are all sent, their receivers hold every event that reached each one's fan-out.
        await within(30_000, async () => {
          const rows = await rowsByEndpoint(storage)
          return [kept, addedByCli, addedByB].every((endpoint) => (rows.get(endpoint.id)?.unsent ?? 0) === 0)
        })
        const rows = await rowsByEndpoint(storage)

        const everyone = users.emails(() => true)
        assert.deepEqual(received(kept), new Set(everyone), 'the endpoint that stayed got every event')
        for (const [name, endpoint] of [['the CLI', addedByCli], ['B', addedByB]] as const) {
          const got = received(endpoint)
          assert.ok(owed(endpoint).length >= 12, `events were written after ${name} added the endpoint`)
          for (const email of owed(endpoint)) assert.ok(got.has(email), `${email}, written after ${name} added the endpoint, reached it`)
          for (const email of users.emails(before(endpoint.added))) assert.ok(!got.has(email), `${email}, written before ${name} added the endpoint, did not reach it`)
          assert.deepEqual(got, rows.get(endpoint.id)!.emails, `what ${name}'s endpoint received is what was fanned out to it`)
        }
        for (const [name, endpoint] of [['the CLI', removedByCli], ['B', removedByB]] as const) {
          const got = received(endpoint)
          assert.ok(endpoint.deliveredBefore.length >= 6 && endpoint.deliveredBefore.every((email) => got.has(email)), `events written before ${name} removed the endpoint reached it`)
          const late = users.emails(after(endpoint.removed))
          assert.ok(late.length >= 6, `events were written after ${name} removed the endpoint`)
          for (const email of late) assert.ok(!got.has(email), `${email}, written after ${name} removed the endpoint, did not reach it`)
          assert.equal(rows.get(endpoint.id), undefined, 'the removed endpoint has no delivery rows left')
        }
        // Checked now, not as each arrived: a new endpoint's first delivery may come before this
        // process has read the secret from the answer that created it.
        for (const endpoint of endpoints) {
          for (const delivery of endpoint.receiver.deliveries) assert.equal(verifyError(endpoint.receiver.secrets[0]!, delivery.body, delivery.headers), null, 'every delivery verified with its endpoint secret')
        }
        for (const [name, instance] of [['A', instances[0]!], ['B', instances[1]!]] as const) {
          // (A delivery claimed just before its endpoint was removed is given up, and logged so: that is not this.)
          assert.doesNotMatch(instance.output(), /foreign key|violat|INTERNAL_ERROR/i, `${name} logged no failed change`)
        }
      } finally {
        for (const instance of instances) instance.child.kill('SIGKILL')
        await Promise.all(instances.map((i) => (i.child.exitCode === null && i.child.signalCode === null ? once(i.child, 'exit') : undefined)))
        for (const endpoint of endpoints) await endpoint.receiver.close()
        await storage.drop()
      }
    })
  })
}

for (const engine of ENGINES) {
  describe(`the cap on endpoints on ${engine}`, () => {
    test('20 endpoints at most, even when the last ones are registered at once: the rest answer LIMIT_EXCEEDED', async () => {
      const t = await startTestApp(engine)
      try {
        const hooks = t.app.services.webhooks
        // Disabled, so that nothing here is ever delivered.
        const create = (i: number) => hooks.create({ url: `https://hooks-${i}.example.com/hook`, events: ['*'], enabled: false })
        for (let i = 0; i < 17; i++) await create(i)
        const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => create(100 + i)))
        const refused = results.filter((result) => result.status === 'rejected').map((result) => (result as PromiseRejectedResult).reason as unknown)
        assert.equal(results.length - refused.length, 3, 'three more fitted')
        assert.ok(refused.every((error) => error instanceof AppError && error.code === 'LIMIT_EXCEEDED'), String(refused))
        assert.equal((await hooks.list()).length, 20)
      } finally {
        await t.close()
      }
    })
  })
}

/**
 * PostgreSQL runs changes side by side under READ COMMITTED, so a removal can be under way while a
 * change writes its event: the event must neither wait for the removal nor fail on the foreign key
 * once it commits (docs/webhooks.md, "Decisions"). SQLite has one writer at a time: there a change
 * simply comes before or after the removal.
 */
describe('a removal under way on PostgreSQL', () => {
  test('a registration made while another connection is deleting the endpoint answers 201 before that commits, and fans out to the endpoints that remain', async () => {
    const t = await startTestApp('postgres')
    const remover = new pg.Client({ connectionString: t.storage.databaseUrl })
    await remover.connect()
    try {
      const hooks = t.app.services.webhooks
      // Loopback port 9 (discard): nothing answers, and nothing here waits on a delivery.
      const going = (await hooks.create({ url: 'http://127.0.0.1:9/going', events: ['user.created'] })).webhook.id
      const staying = (await hooks.create({ url: 'http://127.0.0.1:9/staying', events: ['user.created'] })).webhook.id

      await remover.query('begin')
      await remover.query('delete from webhook_endpoints where id = $1', [going])
      let removalCommitted = false
      let answeredBeforeCommit = false
      const email = uniqueEmail('during-removal')
      const registration = t.post('/auth/register', { email, password: PASSWORD, full_name: 'During' }).then((answer) => {
        answeredBeforeCommit = !removalCommitted
        return answer
      })
      // Long enough for a registration that does not wait; one that waits on the removal's lock is
      // released by the commit below and must then still succeed.
      await Promise.race([registration, delay(3000)])
      await remover.query('commit')
      removalCommitted = true
      const answer = await registration
      assert.equal(answer.statusCode, 201, answer.body)
      assert.ok(answeredBeforeCommit, 'the registration did not wait for the removal')

      const userId = answer.json().data.user_id as string
      const rows = await t.app.services.db.kysely.selectFrom('webhook_deliveries').select('endpoint_id').where('user_id', '=', userId).execute()
      assert.deepEqual(rows.map((row) => row.endpoint_id), [staying], 'the event went to the endpoint that remains, not the one being removed')
    } finally {
      await remover.end()
      await t.close()
    }
  })
})

import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type AddressInfo, type Socket } from 'node:net'
import { describe, test } from 'node:test'
import { runCli, type CliIo } from '../../src/cli.ts'
import { isSpecialUse } from '../../src/webhooks/addresses.ts'
import type { ResolvedAddress } from '../../src/webhooks/sender.ts'
import { COULD_NOT_CONNECT } from '../../src/webhooks/sender.ts'
import type { DeliveryView } from '../../src/webhooks/service.ts'
import { ENGINES } from '../helpers/db.ts'
import { LogCapture } from '../helpers/logs.ts'
import { PASSWORD, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'

// Webhooks must not turn the server into a probe of its own network (docs/webhooks.md, "Where events
// may go"; issue 40 item 4). In production a special-use address is refused at registration when the
// URL spells it, and at connection time when a name resolves to it; the deliveries log shows a generic
// error. Names are made to resolve to loopback offline through the service's one DNS seam (`resolve`);
// the policy and the sockets are the real ones.

const PRODUCTION = { NODE_ENV: 'production', TRUST_PROXY: '127.0.0.1', PUBLIC_URL: 'https://auth.example.com', KEY_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64') }
const QUEUE = { pollMs: 50, retryBaseMs: 1000 }

/** What a production deployment must refuse to register, by its URL alone. */
const REFUSED_URLS = [
  'https://127.0.0.1:8443/hook',
  'https://127.255.0.9/hook',
  'https://2130706433/hook', // 127.0.0.1 as one number
  'https://0x7f.1/hook', // and in hex
  'https://localhost/hook',
  'https://LOCALHOST./hook',
  'https://hooks.localhost/hook',
  'https://0.0.0.0/hook',
  'https://10.0.0.1/hook',
  'https://172.16.5.4/hook',
  'https://192.168.1.10/hook',
  'https://100.64.0.1/hook', // carrier-grade NAT
  'https://169.254.169.254/latest/meta-data', // cloud metadata
  'https://224.0.0.1/hook',
  'https://255.255.255.255/hook',
  'https://198.18.0.1/hook',
  'https://[::1]/hook',
  'https://[::]/hook',
  'https://[::ffff:127.0.0.1]/hook',
  'https://[::ffff:a9fe:a9fe]/hook', // 169.254.169.254, mapped
  'https://[fe80::1]/hook',
  'https://[fc00::1]/hook',
  'https://[fd12:3456::1]/hook',
  'https://[ff02::1]/hook',
  'https://[64:ff9b::7f00:1]/hook', // NAT64 of 127.0.0.1
  'https://[2002:7f00:1::1]/hook', // 6to4 of 127.0.0.1
  'https://[2001:db8::1]/hook',
]

const capture = (): CliIo & { stdout: string[]; stderr: string[] } => {
  const io = { stdout: [] as string[], stderr: [] as string[], out: (line: string) => void io.stdout.push(line), err: (line: string) => void io.stderr.push(line) }
  return io
}

/** A request as the TLS-terminating proxy in front of a production deployment forwards it. */
function call(t: TestApp, method: 'GET' | 'POST' | 'PATCH', path: string, key: string | null, body?: unknown) {
  return t.app.inject({
    method,
    url: t.base + path,
    remoteAddress: '127.0.0.1',
    headers: { 'x-forwarded-proto': 'https', ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  })
}

/** A TCP listener on loopback that only counts connections: whether anything reached it at all. */
async function connectionCounter(): Promise<{ port: number; connections: () => number; close: () => Promise<void> }> {
  let connections = 0
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    connections++
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => connections,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

/** The test's DNS: these names only, and a count of each question (one per connection). */
function testResolver(names: Record<string, ResolvedAddress[]>) {
  const asked = new Map<string, number>()
  const resolve = async (hostname: string): Promise<ResolvedAddress[]> => {
    asked.set(hostname, (asked.get(hostname) ?? 0) + 1)
    const found = names[hostname]
    if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' })
    return found
  }
  return { resolve, asked }
}

describe('the special-use address table', () => {
  const special = ['127.0.0.1', '10.1.2.3', '100.64.0.1', '100.127.255.255', '169.254.169.254', '172.16.0.1', '172.31.255.255', '192.168.1.1', '0.0.0.0', '224.0.0.1', '239.1.2.3', '255.255.255.255', '192.0.2.1', '198.18.0.1', '198.51.100.7', '203.0.113.9', '::1', '::', '::ffff:127.0.0.1', '::ffff:a9fe:a9fe', '::127.0.0.1', 'fe80::1', 'fe80::1%eth0', 'fc00::1', 'fd00::2', 'ff02::1', 'fec0::1', '100::1', '64:ff9b::7f00:1', '64:ff9b::10.0.0.1', '64:ff9b:1::1', '2002:7f00:1::1', '2001:db8::1', '2001::1', '3fff::1', 'not an address']
  const global = ['8.8.8.8', '93.184.216.34', '1.1.1.1', '100.63.255.255', '100.128.0.1', '172.15.255.255', '172.32.0.1', '192.169.0.1', '223.255.255.255', '2606:4700::1111', '2a00:1450:4001:82b::200e', '::ffff:8.8.8.8', '64:ff9b::8.8.8.8']
  for (const address of special) test(`${address} is special-use`, () => assert.equal(isSpecialUse(address), true))
  for (const address of global) test(`${address} is globally reachable`, () => assert.equal(isSpecialUse(address), false))
})

for (const engine of ENGINES) {
  describe(`webhook addresses in production on ${engine}`, () => {
    test('registration refuses every spelling of a special-use address and localhost names: POST, PATCH and the CLI answer VALIDATION_ERROR on url', async () => {
      const t = await startTestApp(engine, { env: PRODUCTION })
      try {
        const { key } = await t.app.services.apiKeys.create({ name: 'hooks', scopes: ['webhooks:read', 'webhooks:write'], expiresAt: null })
        for (const url of REFUSED_URLS) {
          const refused = await call(t, 'POST', '/admin/webhooks', key, { url, events: ['*'] })
          assert.equal(refused.statusCode, 400, `${url}: ${refused.body}`)
          assert.equal(refused.json().error.code, 'VALIDATION_ERROR', url)
          assert.deepEqual(refused.json().error.details.map((detail: { field: string }) => detail.field), ['url'], url)
        }
        assert.deepEqual((await call(t, 'GET', '/admin/webhooks', key)).json().data.webhooks, [], 'nothing was registered')

        // A public address and a name pass; a name is judged when a delivery connects (next test).
        const ids: string[] = []
        for (const url of ['https://93.184.216.34/hook', 'https://[2606:4700::1111]/hook', 'https://hooks.example.com/hook']) {
          const created = await call(t, 'POST', '/admin/webhooks', key, { url, events: ['user.deleted'] })
          assert.equal(created.statusCode, 201, `${url}: ${created.body}`)
          ids.push(created.json().data.webhook.id as string)
        }
        const id = ids[0]!
        for (const url of ['https://10.0.0.1/hook', 'https://[::ffff:127.0.0.1]/hook', 'https://api.localhost/hook']) {
          const patched = await call(t, 'PATCH', `/admin/webhooks/${id}`, key, { url })
          assert.deepEqual([patched.statusCode, patched.json().error?.code, patched.json().error?.details?.[0]?.field], [400, 'VALIDATION_ERROR', 'url'], `PATCH ${url}`)
        }
        assert.equal((await call(t, 'GET', `/admin/webhooks/${id}`, key)).json().data.webhook.url, 'https://93.184.216.34/hook', 'the refused PATCH changed nothing')

        // The CLI is the same service on the same database, with the same rule.
        const env = { ...PRODUCTION, SMTP_URL: t.mail.url, DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl ?? '' }
        for (const url of ['https://127.0.0.1:8443/hook', 'https://localhost/hook', 'https://[::1]/hook', 'https://169.254.169.254/']) {
          const io = capture()
          assert.equal(await runCli(['webhooks', 'add', url, '--events', '*'], env, io), 1, url)
          assert.deepEqual(io.stdout, [], url)
          assert.match(io.stderr.join('\n'), /url must not point at a loopback, private, link-local or other special-use address/, url)
        }
        assert.equal((await call(t, 'GET', '/admin/webhooks', key)).json().data.webhooks.length, 3)
      } finally {
        await t.close()
      }
    })

    test('a name that resolves to a special-use address is refused when a delivery connects: nothing connects, the name is asked once per attempt, and the log says only that it could not connect', async () => {
      const listener = await connectionCounter()
      const dns = testResolver({
        'hooks.internal.test': [{ address: '127.0.0.1', family: 4 }],
        // One public address and one loopback: any special-use one refuses the name.
        'mixed.internal.test': [{ address: '93.184.216.34', family: 4 }, { address: '::1', family: 6 }],
      })
      const logs = new LogCapture()
      let t: TestApp | null = null
      try {
        t = await startTestApp(engine, { env: { ...PRODUCTION, LOG_LEVEL: 'warn' }, overrides: { logStream: logs, webhooks: { queue: QUEUE, timeoutMs: 2000, resolve: dns.resolve } } })
        const { key } = await t.app.services.apiKeys.create({ name: 'hooks', scopes: ['webhooks:read', 'webhooks:write'], expiresAt: null })
        const ids: string[] = []
        for (const url of [`https://hooks.internal.test:${listener.port}/hook`, `https://mixed.internal.test:${listener.port}/hook`, 'https://literal.example.com/hook']) {
          const created = await call(t, 'POST', '/admin/webhooks', key, { url, events: ['user.created'] })
          assert.equal(created.statusCode, 201, created.body)
          ids.push(created.json().data.webhook.id as string)
        }
        // An endpoint stored before the rule existed (or by hand), spelling loopback: judged again at delivery.
        await t.app.services.db.kysely.updateTable('webhook_endpoints').set({ url: `https://127.0.0.1:${listener.port}/hook` }).where('id', '=', ids[2]!).execute()

        assert.equal((await call(t, 'POST', '/auth/register', null, { email: uniqueEmail('ssrf'), password: PASSWORD, full_name: 'Probe' })).statusCode, 201)
        await t.app.services.webhooks.flush()

        for (const id of ids) {
          const log = await call(t, 'GET', `/admin/webhooks/${id}/deliveries`, key)
          assert.equal(log.statusCode, 200, log.body)
          const [delivery] = log.json().data.deliveries as DeliveryView[]
          assert.ok(delivery, 'the event was fanned out to the endpoint')
          assert.deepEqual([delivery.attempts, delivery.last_status, delivery.last_error, delivery.delivered_at], [1, null, COULD_NOT_CONNECT, null])
          for (const secret of ['127.0.0.1', '::1', String(listener.port), 'ECONNREFUSED', 'policy', 'resolved']) assert.ok(!log.body.includes(secret), `the log shows ${secret}: ${log.body}`)
        }
        assert.equal(listener.connections(), 0, 'no connection reached the loopback listener')
        assert.deepEqual(Object.fromEntries(dns.asked), { 'hooks.internal.test': 1, 'mixed.internal.test': 1 }, 'one question per connection attempt, none for the literal')

        // The operator's own log keeps the cause.
        const causes = logs.messages(/could not be reached/).map((entry) => (entry.err as { message: string }).message)
        assert.ok(causes.some((cause) => cause.includes('hooks.internal.test resolved to 127.0.0.1')), causes.join('\n'))
        assert.ok(causes.some((cause) => cause.includes('mixed.internal.test resolved to ::1')), causes.join('\n'))
        assert.ok(causes.some((cause) => cause.includes('127.0.0.1 is a special-use address')), causes.join('\n'))
      } finally {
        await t?.close()
        await listener.close()
      }
    })

    test('outside production the same name resolving to loopback is delivered: the socket goes to the address the lookup returned', async () => {
      const receiver = await startWebhookReceiver()
      const dns = testResolver({ 'hooks.internal.test': [{ address: '127.0.0.1', family: 4 }] })
      const t = await startTestApp(engine, { overrides: { webhooks: { queue: QUEUE, timeoutMs: 2000, resolve: dns.resolve } } })
      try {
        const created = await t.app.services.webhooks.create({ url: receiver.url.replace('127.0.0.1', 'hooks.internal.test'), events: ['user.created'] })
        receiver.secrets = [created.secret]
        const email = uniqueEmail('named')
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Named' })).statusCode, 201)
        const [delivery] = await receiver.waitFor(1)
        assert.ok(delivery!.verified, delivery!.error ?? '')
        assert.equal(delivery!.payload!.data.email, email)
        assert.equal(dns.asked.get('hooks.internal.test'), 1)
      } finally {
        await t.close()
        await receiver.close()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { after, before, describe, test } from 'node:test'
import { createArgon2Hasher } from '../../src/auth/passwords.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within, type TestApp } from '../helpers/app.ts'
import { TcpProxy } from '../helpers/proxy.ts'
import { LogCapture } from '../helpers/logs.ts'


/** A registration carrying its own request id, so its log lines can be found. */
function registerWithRequestId(t: TestApp, requestId: string) {
  return t.app.inject({
    method: 'POST',
    url: `${t.base}/auth/register`,
    headers: { 'content-type': 'application/json', 'x-request-id': requestId },
    payload: JSON.stringify({ email: uniqueEmail(), password: PASSWORD, full_name: 'Request Id' }),
  })
}

function assertErrorEnvelope(body: unknown, code: string) {
  const b = body as { success: boolean; error: { code: string; message: string } }
  assert.equal(b.success, false)
  assert.equal(b.error.code, code)
  assert.equal(typeof b.error.message, 'string')
}

for (const engine of ENGINES) {
  describe(`http behaviour on ${engine}`, () => {
    let t: TestApp
    const logs = new LogCapture()
    before(async () => {
      t = await startTestApp(engine, { env: { LOG_LEVEL: 'info' }, overrides: { logStream: logs } })
    })
    after(async () => {
      await t.close()
    })

    test('an unknown path is 404 NOT_FOUND in the envelope', async () => {
      const response = await t.get('/nowhere')
      assert.equal(response.statusCode, 404)
      assertErrorEnvelope(response.json(), 'NOT_FOUND')
      assert.ok(response.headers['x-request-id'])
    })

    test('a known path with another method is 405 with an Allow header', async () => {
      const response = await t.app.inject({ method: 'DELETE', url: `${t.base}/auth/login` })
      assert.equal(response.statusCode, 405)
      assertErrorEnvelope(response.json(), 'METHOD_NOT_ALLOWED')
      assert.equal(response.headers.allow, 'POST')
      const me = await t.app.inject({ method: 'POST', url: `${t.base}/auth/me` })
      assert.equal(me.statusCode, 405)
      assert.match(String(me.headers.allow), /GET/)
    })

    test('an auth body over 16 KiB is 413 PAYLOAD_TOO_LARGE before any hashing', async () => {
      const response = await t.post('/auth/login', { email: 'a@example.com', password: 'x'.repeat(17 * 1024) })
      assert.equal(response.statusCode, 413)
      assertErrorEnvelope(response.json(), 'PAYLOAD_TOO_LARGE')
    })

    test('a body that is not JSON is 415 UNSUPPORTED_MEDIA_TYPE', async () => {
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
        const response = await t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': type }, payload: 'email=a' })
        assert.equal(response.statusCode, 415, type)
        assertErrorEnvelope(response.json(), 'UNSUPPORTED_MEDIA_TYPE')
      }
    })

    test('malformed JSON and a missing body are VALIDATION_ERROR', async () => {
      const malformed = await t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': 'application/json' }, payload: '{"email":' })
      assert.equal(malformed.statusCode, 400)
      assertErrorEnvelope(malformed.json(), 'VALIDATION_ERROR')
      const empty = await t.post('/auth/login')
      assert.equal(empty.statusCode, 400)
      assertErrorEnvelope(empty.json(), 'VALIDATION_ERROR')
    })

    test('__proto__ and constructor.prototype keys are refused and pollute nothing', async () => {
      for (const payload of [
        '{"email":"a@example.com","password":"x","__proto__":{"polluted":true}}',
        '{"email":"a@example.com","password":"x","constructor":{"prototype":{"polluted":true}}}',
      ]) {
        const response = await t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': 'application/json' }, payload })
        assert.equal(response.statusCode, 400)
        assertErrorEnvelope(response.json(), 'VALIDATION_ERROR')
      }
      assert.equal(({} as Record<string, unknown>).polluted, undefined)
    })

    test('every response carries x-request-id; a sane incoming one is kept, a hostile one replaced', async () => {
      const kept = await t.app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'trace-123' } })
      assert.equal(kept.headers['x-request-id'], 'trace-123')
      const replaced = await t.app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'bad id\u0000"}' } })
      assert.match(String(replaced.headers['x-request-id']), /^[0-9a-f-]{36}$/)
    })

    test('health and readiness answer 200 while the database is up', async () => {
      assert.equal((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200)
      const ready = await t.app.inject({ method: 'GET', url: '/readyz' })
      assert.equal(ready.statusCode, 200)
      assert.equal(ready.json().data.status, 'ready')
    })

    test('/openapi.json documents every API route from the validating schemas; /docs serves the reference', async () => {
      const response = await t.app.inject({ method: 'GET', url: '/openapi.json' })
      assert.equal(response.statusCode, 200)
      const doc = response.json()
      assert.equal(doc.openapi, '3.1.0')
      const operations = Object.values(doc.paths as Record<string, Record<string, { operationId?: string; security?: unknown[] }>>).flatMap((methods) => Object.values(methods))
      const ids = operations.map((operation) => operation.operationId)
      for (const id of ['register', 'login', 'refresh', 'verifyEmail', 'me', 'logout', 'listSessions', 'listWatchlists', 'createWatchlist', 'removeWatchlistSymbol']) {
        assert.ok(ids.includes(id), `${id} missing`)
      }
      assert.equal(new Set(ids).size, ids.length)
      const register = doc.paths[`${t.base}/auth/register`].post
      assert.equal(register.requestBody.content['application/json'].schema.additionalProperties, false)
      assert.deepEqual(doc.paths[`${t.base}/auth/me`].get.security, [{ bearer: [] }])
      assert.equal(doc.components.securitySchemes.bearer.scheme, 'bearer')
      const loginErrors = doc.paths[`${t.base}/auth/login`].post.responses['4XX'].content['application/json'].schema
      const codes = loginErrors.properties.error.properties.code.anyOf.map((c: { const?: string; enum?: string[] }) => c.const ?? c.enum?.[0])
      for (const expected of ['INVALID_CREDENTIALS', 'RATE_LIMITED', 'VALIDATION_ERROR', 'EMAIL_NOT_VERIFIED']) assert.ok(codes.includes(expected), expected)
      const page = await t.app.inject({ method: 'GET', url: '/docs' })
      assert.equal(page.statusCode, 200)
      assert.match(String(page.headers['content-type']), /text\/html/)
      assert.match(String(page.headers['content-security-policy']), /default-src 'self'/)
    })

    test('/metrics exposes request counters by route pattern in Prometheus text', async () => {
      await t.get('/auth/me')
      await t.get('/nowhere/at/all')
      const response = await t.app.inject({ method: 'GET', url: '/metrics' })
      assert.equal(response.statusCode, 200)
      assert.match(String(response.headers['content-type']), /^text\/plain/)
      assert.match(response.body, new RegExp(`portcullis_http_requests_total\\{method="GET",route="${t.base}/auth/me",status="401"\\} \\d+`))
      assert.match(response.body, /route="unmatched",status="404"/)
      assert.ok(!response.body.includes('/nowhere/at/all'))
      assert.match(response.body, /portcullis_session_gate_sessions \d+/)
      assert.match(response.body, /portcullis_password_hashes_waiting 0/)
      // A histogram, so latency percentiles can be computed, and the process metrics.
      assert.match(response.body, new RegExp(`portcullis_http_request_duration_seconds_bucket\\{le="0.005",method="GET",route="${t.base}/auth/me"\\} \\d+`))
      assert.match(response.body, /portcullis_http_request_duration_seconds_count\{method="GET",route="unmatched"\} \d+/)
      for (const name of ['process_resident_memory_bytes', 'nodejs_eventloop_lag_p99_seconds', 'nodejs_heap_size_used_bytes']) {
        assert.match(response.body, new RegExp(`^${name}`, 'm'), name)
      }
      // The GC histogram has samples only once V8 has collected since the app started, which a
      // short test may not reach; it is declared from the start.
      assert.match(response.body, /^# TYPE nodejs_gc_duration_seconds histogram$/m)
    })

    test('logs carry the request id and never a password or token', async () => {
      logs.lines.length = 0
      const { access_token, refresh_token } = await registerVerifyLogin(t)
      const me = await t.app.inject({ method: 'GET', url: `${t.base}/auth/me`, headers: { authorization: `Bearer ${access_token}`, 'x-request-id': 'me-call' } })
      assert.equal(me.statusCode, 200)
      await t.post('/auth/refresh', { refresh_token })
      await t.post('/auth/login', { email: uniqueEmail(), password: PASSWORD })
      const text = logs.lines.join('\n')
      for (const secret of [PASSWORD, access_token, refresh_token, access_token.split('.')[2]!]) {
        assert.ok(!text.includes(secret), 'a secret reached the log')
      }
      const line = logs.entries().find((entry) => entry.reqId === 'me-call')
      assert.equal(line?.status, 200)
      assert.equal(line?.path, `${t.base}/auth/me`)
    })

    test('one request line per request, without the query string; every other line still redacted', async () => {
      logs.lines.length = 0
      const answer = await t.app.inject({ method: 'GET', url: `${t.base}/watchlists?cursor=secret-cursor`, headers: { 'x-request-id': 'line-call' } })
      assert.equal(answer.statusCode, 401)
      const lines = logs.entries().filter((entry) => entry.reqId === 'line-call')
      assert.equal(lines.length, 1)
      const { time, pid, hostname, ...line } = lines[0]!
      assert.equal(typeof time, 'number')
      assert.equal(pid, process.pid)
      assert.equal(typeof hostname, 'string')
      assert.equal(typeof line.ms, 'number')
      assert.deepEqual({ ...line, ms: 0 }, { level: 30, reqId: 'line-call', method: 'GET', path: `${t.base}/watchlists`, status: 401, ms: 0, msg: 'request' })
      // The request line's logger skips the redaction paths; the service's own lines keep them.
      t.app.log.info({ body: { password: 'hunter2-in-a-body', email: 'x@example.com' } }, 'redaction check')
      const checked = logs.entries().find((entry) => entry.msg === 'redaction check') as { body?: Record<string, unknown> } | undefined
      assert.deepEqual(checked?.body, { password: '[redacted]', email: 'x@example.com' })
    })
  })

  describe(`internal errors on ${engine}`, () => {
    test('a 500 says INTERNAL_ERROR and nothing else; the log has the cause and the request id, no stack', async () => {
      const logs = new LogCapture()
      const broken = createArgon2Hasher()
      broken.hash = async () => {
        throw new TypeError('SELECT password_hash FROM users WHERE secret = 1')
      }
      const t = await startTestApp(engine, { env: { LOG_LEVEL: 'info' }, overrides: { hasher: broken, logStream: logs } })
      try {
        const response = await registerWithRequestId(t, 'boom-1')
        assert.equal(response.statusCode, 500)
        assert.deepEqual(response.json(), { success: false, error: { code: 'INTERNAL_ERROR', message: 'An internal error occurred.' } })
        // The cause's type and message with the request id, and never a stack trace.
        const logged = logs.entries().find((entry) => entry.reqId === 'boom-1' && entry.level === 50) as { err?: Record<string, unknown> } | undefined
        assert.deepEqual(logged?.err, { type: 'TypeError', message: 'SELECT password_hash FROM users WHERE secret = 1' })
        assert.ok(!logs.lines.join('\n').includes('"stack"'))
        assert.ok(!logs.lines.join('\n').includes('    at '))
        assert.ok(!logs.lines.join('\n').includes(PASSWORD))
        // Nothing half-written: the failed registration left no user behind.
        assert.equal((await t.app.services.db.kysely.selectFrom('users').select('id').execute()).length, 0)
      } finally {
        await t.close()
      }
    })
  })
}

describe('refusals under load', () => {
  test('a login refused because hashing is saturated: 503, Retry-After, Connection: close, and only its request line in the log', async () => {
    const logs = new LogCapture()
    const t = await startTestApp('sqlite', { env: { LOG_LEVEL: 'info', HASH_CONCURRENCY: '1', HASH_QUEUE: '1' }, overrides: { hasher: createArgon2Hasher(), logStream: logs } })
    try {
      const user = await registerVerifyLogin(t)
      const answers = await Promise.all(Array.from({ length: 12 }, () => t.post('/auth/login', { email: user.email, password: PASSWORD })))
      const refused = answers.filter((a) => a.statusCode === 503)
      const served = answers.filter((a) => a.statusCode === 200)
      assert.ok(refused.length > 0 && served.length > 0, 'some logins were refused, some served')
      // Refused: Retry-After, and the connection closed so a flood must reconnect before retrying.
      for (const answer of refused) {
        assert.equal(answer.headers.connection, 'close')
        assert.equal(answer.headers['retry-after'], '1')
      }
      for (const answer of served) assert.notEqual(answer.headers.connection, 'close')
      const entries = logs.entries()
      assert.deepEqual(entries.filter((e) => (e.level as number) >= 50), [])
      assert.ok(!logs.lines.join('\n').includes('"stack"'))
      assert.equal(entries.filter((e) => e.msg === 'request' && e.status === 503).length, refused.length)
    } finally {
      await t.close()
    }
  })
})

describe('database outage on postgres', () => {
  test('answers 503 SERVICE_UNAVAILABLE while the database is unreachable and recovers by itself', async () => {
    const storage = await createStorage('postgres')
    const target = new URL(storage.databaseUrl!)
    const proxy = await new TcpProxy(target.hostname, Number(target.port)).start()
    const proxied = new URL(target)
    proxied.port = String(proxy.port)
    const t = await startTestApp('postgres', { storage: { ...storage, databaseUrl: proxied.toString() } })
    try {
      const { email } = await registerVerifyLogin(t)
      await proxy.cut()
      const ready = await t.app.inject({ method: 'GET', url: '/readyz' })
      assert.equal(ready.statusCode, 503)
      assert.equal(ready.json().error.code, 'SERVICE_UNAVAILABLE')
      const login = await t.post('/auth/login', { email, password: PASSWORD })
      assert.equal(login.statusCode, 503)
      assert.equal(login.json().error.code, 'SERVICE_UNAVAILABLE')
      assert.ok(login.headers['retry-after'])
      assert.ok(!login.body.includes('ECONNREFUSED'))
      assert.equal((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200)

      await proxy.restore()
      let status = 0
      for (let attempt = 0; attempt < 50 && status !== 200; attempt++) {
        status = (await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode
        if (status !== 200) await sleep(100)
      }
      assert.equal(status, 200)
      assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 200)
    } finally {
      await t.close()
      await proxy.cut().catch(() => {})
      await storage.drop()
    }
  })
})

describe('per-request loggers', () => {
  test('are made only when a request writes a line, and that line carries the request id', async () => {
    const logs = new LogCapture()
    const hasher = createArgon2Hasher()
    const t = await startTestApp('sqlite', { env: { LOG_LEVEL: 'warn' }, overrides: { hasher, logStream: logs } })
    try {
      const user = await registerVerifyLogin(t)
      hasher.hash = async () => {
        throw new Error('hashing broke')
      }
      let children = 0
      const child = t.app.log.child.bind(t.app.log)
      t.app.log.child = ((...args: Parameters<typeof child>) => {
        children++
        return child(...args)
      }) as typeof t.app.log.child
      for (let i = 0; i < 5; i++) assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
      assert.equal(children, 0)
      const failed = await registerWithRequestId(t, 'lazy-1')
      assert.equal(failed.statusCode, 500)
      assert.equal(children, 1)
      assert.ok(logs.entries().some((entry) => entry.reqId === 'lazy-1' && entry.level === 50))
    } finally {
      await t.close()
    }
  })
})

describe('handlers that answer by callback', () => {
  test('the static files behind /docs answer whole (the shutdown count passes such handlers through untouched)', async () => {
    const t = await startTestApp('sqlite')
    try {
      for (const asset of ['/docs/static/swagger-ui.css', '/docs/static/swagger-ui-bundle.js', '/docs/static/swagger-initializer.js']) {
        const response = await t.app.inject({ method: 'GET', url: asset })
        assert.equal(response.statusCode, 200, asset)
        assert.ok(response.body.length > 100, asset)
      }
    } finally {
      await t.close()
    }
  })
})

describe('shutdown with clients that have gone', () => {
  test('logins whose clients disconnected while queued for hashing finish before the database closes', async () => {
    const logs = new LogCapture()
    const storage = await createStorage('sqlite')
    const t = await startTestApp('sqlite', { storage, env: { LOG_LEVEL: 'warn', HASH_CONCURRENCY: '1', HASH_QUEUE: '8' }, overrides: { hasher: createArgon2Hasher(), logStream: logs } })
    let closed = false
    try {
      const user = await registerVerifyLogin(t)
      const sessionsBefore = (await t.app.services.db.kysely.selectFrom('sessions').select('id').where('user_id', '=', user.userId).execute()).length
      await t.app.listen({ port: 0, host: '127.0.0.1' })
      const { port } = t.app.server.address() as { port: number }
      // Logins queue behind one hashing slot; every client hangs up before its answer. Eight of
      // them, so a queue forms even when a loaded machine spaces their arrivals out.
      const clients = Array.from({ length: 8 }, () => new AbortController())
      const sent = clients.map((client) =>
        fetch(`http://127.0.0.1:${port}${t.base}/auth/login`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ email: user.email, password: PASSWORD }),
          signal: client.signal,
        }).catch(() => null),
      )
      await within(5000, async () => t.app.services.hasher.waiting() >= 2)
      for (const client of clients) client.abort()
      await Promise.all(sent)
      assert.ok(t.app.services.hasher.waiting() >= 1, 'logins still queued when the close begins')
      await t.close()
      closed = true
      assert.deepEqual(logs.entries().filter((entry) => (entry.level as number) >= 50), [])
      // Each abandoned login ran to its end: its session and its audit row, or nothing at all.
      const reopened = await startTestApp('sqlite', { storage })
      try {
        const sessions = await reopened.app.services.db.kysely.selectFrom('sessions').select('id').where('user_id', '=', user.userId).execute()
        const events = await reopened.app.services.db.kysely.selectFrom('audit_events').select('id').where('user_id', '=', user.userId).where('type', '=', 'login.succeeded').execute()
        // Every login that had reached the hashing queue (one hashing, at least two waiting) ran to
        // its end; a fourth may have been cut off while its body was still being read, before any
        // handler ran, which writes nothing.
        assert.ok(sessions.length - sessionsBefore >= 3, `${sessions.length - sessionsBefore} sessions`)
        assert.equal(events.length, sessions.length)
      } finally {
        await reopened.close()
      }
    } finally {
      if (!closed) await t.close()
      await storage.drop()
    }
  })
})

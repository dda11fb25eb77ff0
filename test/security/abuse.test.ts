import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createArgon2Hasher, type PasswordHasher } from '../../src/auth/passwords.ts'
import { ENGINES } from '../helpers/db.ts'
import { fastHasher, freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

const code = (response: { json(): { error?: { code: string } } }) => response.json().error?.code

async function withApp(engine: (typeof ENGINES)[number], env: Record<string, string>, run: (t: TestApp) => Promise<void>, hasher?: PasswordHasher) {
  const t = await startTestApp(engine, { env, overrides: hasher ? { hasher } : {} })
  try {
    await run(t)
  } finally {
    await t.close()
  }
}

function countingHasher(): PasswordHasher & { calls: number } {
  const counted = { ...fastHasher, calls: 0 }
  counted.hash = async (password) => (counted.calls++, fastHasher.hash(password))
  counted.verify = async (hash, password) => (counted.calls++, fastHasher.verify(hash, password))
  counted.verifyDummy = async (password) => (counted.calls++, fastHasher.verifyDummy(password))
  return counted
}

const SQL_INJECTION = ["' OR '1'='1", "'; DROP TABLE users; --", '" OR ""="', '1; SELECT pg_sleep(5); --', "admin'--", "') OR 1=1 --", '%\' UNION SELECT password_hash FROM users --']

for (const engine of ENGINES) {
  describe(`security: enumeration and input on ${engine}`, () => {
    test('unknown address and wrong password: byte-identical 401s; unverified and disabled accounts with a wrong password: 401 too', async () => {
      await withApp(engine, {}, async (t) => {
        const active = await registerVerifyLogin(t)
        const unverified = uniqueEmail('unverified')
        await t.post('/auth/register', { email: unverified, password: PASSWORD, full_name: 'U' })
        const disabled = await registerVerifyLogin(t)
        await t.app.services.accounts.disable(disabled.email, 'banned')
        const answers = await Promise.all([
          t.post('/auth/login', { email: uniqueEmail('ghost'), password: 'wrong password 1' }),
          t.post('/auth/login', { email: active.email, password: 'wrong password 1' }),
          t.post('/auth/login', { email: unverified, password: 'wrong password 1' }),
          t.post('/auth/login', { email: disabled.email, password: 'wrong password 1' }),
        ])
        for (const answer of answers) {
          assert.equal(answer.statusCode, 401)
          assert.equal(answer.body, answers[0]!.body)
          assert.equal(answer.headers['www-authenticate'], answers[0]!.headers['www-authenticate'])
        }
      })
    })

    test('mass assignment: state, role and id fields in a body are refused', async () => {
      await withApp(engine, {}, async (t) => {
        for (const extra of [{ email_verified_at: 1 }, { status: 'active' }, { role: 'admin' }, { id: '00000000-0000-4000-8000-000000000000' }, { is_admin: true }]) {
          const response = await t.post('/auth/register', { email: uniqueEmail(), password: PASSWORD, full_name: 'M', ...extra })
          assert.equal(response.statusCode, 400, JSON.stringify(extra))
          assert.equal(code(response), 'VALIDATION_ERROR')
        }
        assert.equal((await t.app.services.db.kysely.selectFrom('users').select('id').execute()).length, 0)
      })
    })

    test('__proto__ and constructor keys, nested too, are refused', async () => {
      await withApp(engine, {}, async (t) => {
        const user = await registerVerifyLogin(t)
        for (const [path, payload, token] of [
          ['/auth/register', `{"email":"${uniqueEmail()}","password":"${PASSWORD}","full_name":"P","__proto__":{"admin":true}}`, undefined],
          ['/watchlists', '{"name":"x","constructor":{"prototype":{"admin":true}}}', user.access_token],
          ['/watchlists', '{"name":"x","symbols":[{"__proto__":{"admin":true}}]}', user.access_token],
        ] as const) {
          const response = await t.app.inject({ method: 'POST', url: t.base + path, headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, payload })
          assert.equal(response.statusCode, 400, payload)
          assert.equal(code(response), 'VALIDATION_ERROR')
        }
        assert.equal(({} as Record<string, unknown>).admin, undefined)
      })
    })

    test('SQL-injection strings in every text field are data: stored literally or refused, never a 500', async () => {
      await withApp(engine, {}, async (t) => {
        const user = await registerVerifyLogin(t)
        const list = (await t.call('POST', '/watchlists', user.access_token, { name: 'base' })).json().data.watchlist
        for (const evil of SQL_INJECTION) {
          const email = `x${Math.random().toString(36).slice(2, 8)}'--@example.com`
          const registered = await t.post('/auth/register', { email, password: `${evil} long enough`, full_name: evil })
          assert.equal(registered.statusCode, 201, registered.body)
          assert.equal(registered.json().data.email, email)
          const responses = [
            await t.post('/auth/login', { email: evil, password: evil }),
            await t.post('/auth/login', { email, password: evil }),
            await t.post('/auth/verify-email', { token: evil }),
            await t.post('/auth/reset-password', { token: evil, password: 'a fine new passphrase' }),
            await t.post('/auth/refresh', { refresh_token: evil }),
            await t.post('/auth/logout', { refresh_token: evil }),
            await t.post('/auth/resend-verification', { email: evil }),
            await t.post('/auth/forgot-password', { email: evil }),
            await t.call('POST', '/watchlists', user.access_token, { name: evil, symbols: [evil] }),
            await t.call('PATCH', `/watchlists/${encodeURIComponent(evil)}`, user.access_token, { name: evil }),
            await t.call('DELETE', `/watchlists/${list.id}/symbols/${encodeURIComponent(evil)}`, user.access_token),
            await t.call('DELETE', `/auth/sessions/${encodeURIComponent(evil)}`, user.access_token),
            await t.get(`/watchlists?cursor=${encodeURIComponent(evil)}`, user.access_token),
          ]
          for (const response of responses) assert.ok(response.statusCode < 500, `${response.statusCode} ${response.body}`)
          const named = await t.call('POST', '/watchlists', user.access_token, { name: evil })
          assert.equal(named.statusCode, 201)
          assert.equal(named.json().data.watchlist.name, evil)
        }
        const stored = await t.app.services.db.kysely.selectFrom('users').select('full_name').execute()
        for (const evil of SQL_INJECTION) assert.ok(stored.some((row) => row.full_name === evil))
        assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
      })
    })

    test('a 1 MB password is 413 and never hashed', async () => {
      const hasher = countingHasher()
      await withApp(engine, {}, async (t) => {
        const huge = 'p'.repeat(1024 * 1024)
        for (const path of ['/auth/register', '/auth/login']) {
          const response = await t.post(path, { email: uniqueEmail(), password: huge, full_name: 'Huge' })
          assert.equal(response.statusCode, 413)
          assert.equal(code(response), 'PAYLOAD_TOO_LARGE')
        }
        assert.equal(hasher.calls, 0)
      }, hasher)
    })

    test('50 parallel registrations of one address: exactly one 201, 49 EMAIL_EXISTS', async () => {
      await withApp(engine, {}, async (t) => {
        const email = uniqueEmail('dup')
        const responses = await Promise.all(Array.from({ length: 50 }, () => t.post('/auth/register', { email, password: PASSWORD, full_name: 'Dup' })))
        assert.equal(responses.filter((r) => r.statusCode === 201).length, 1)
        assert.equal(responses.filter((r) => r.statusCode === 409 && code(r) === 'EMAIL_EXISTS').length, 49)
        const rows = await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', email).execute()
        assert.equal(rows.length, 1)
      })
    })
  })

  describe(`security: throttling on ${engine}`, () => {
    test('after 10 failures an account waits 1 s, then 2 s, 4 s...; a 429 even for the right password, the same for an unknown address; success resets', async () => {
      await withApp(engine, {}, async (t) => {
        const user = await registerVerifyLogin(t)
        const ghost = uniqueEmail('ghost')
        for (const email of [user.email, ghost]) {
          for (let i = 0; i < 10; i++) assert.equal(code(await t.post('/auth/login', { email, password: `wrong ${i} password` })), 'INVALID_CREDENTIALS')
        }
        const known = await t.post('/auth/login', { email: user.email, password: PASSWORD })
        const unknown = await t.post('/auth/login', { email: ghost, password: PASSWORD })
        for (const response of [known, unknown]) {
          assert.equal(response.statusCode, 429)
          assert.equal(code(response), 'RATE_LIMITED')
          assert.equal(response.headers['retry-after'], '1')
          assert.equal(response.headers['ratelimit-remaining'], '0')
        }
        assert.equal(known.body, unknown.body)

        t.clock.advance(1)
        assert.equal(code(await t.post('/auth/login', { email: ghost, password: 'wrong again!' })), 'INVALID_CREDENTIALS')
        assert.equal((await t.post('/auth/login', { email: ghost, password: PASSWORD })).headers['retry-after'], '2')
        t.clock.advance(2)
        assert.equal(code(await t.post('/auth/login', { email: ghost, password: 'wrong again!' })), 'INVALID_CREDENTIALS')
        assert.equal((await t.post('/auth/login', { email: ghost, password: PASSWORD })).headers['retry-after'], '4')

        // The owner recovers after Retry-After, and a success wipes the slate.
        assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200)
        for (let i = 0; i < 10; i++) assert.equal(code(await t.post('/auth/login', { email: user.email, password: `wrong ${i} password` })), 'INVALID_CREDENTIALS')
      })
    })

    test('the delay is capped at 15 minutes: never a permanent lock', async () => {
      await withApp(engine, {}, async (t) => {
        const user = await registerVerifyLogin(t)
        // An attacker who waits out every delay: 30 failures in all.
        const waits: number[] = []
        for (let failures = 0; failures < 30; ) {
          const response = await t.post('/auth/login', { email: user.email, password: 'still wrong!' })
          if (response.statusCode === 429) {
            waits.push(Number(response.headers['retry-after']))
            t.clock.advance(waits[waits.length - 1]!)
          } else {
            assert.equal(code(response), 'INVALID_CREDENTIALS')
            failures++
          }
        }
        assert.deepEqual(waits.slice(0, 6), [1, 2, 4, 8, 16, 32])
        assert.equal(Math.max(...waits), 900)
        const refused = await t.post('/auth/login', { email: user.email, password: PASSWORD })
        assert.equal(refused.headers['retry-after'], '900')
        t.clock.advance(900)
        assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200)
      })
    })

    test('a throttled burst is audited once a minute per address, not once a refusal', async () => {
      await withApp(engine, { LOGIN_FREE_FAILURES: '3' }, async (t) => {
        const user = await registerVerifyLogin(t)
        const throttledEvents = async () => (await t.app.services.accounts.events({ email: user.email })).filter((event) => event.type === 'login.throttled')
        for (let i = 0; i < 3; i++) assert.equal(code(await t.post('/auth/login', { email: user.email, password: `wrong ${i} password` })), 'INVALID_CREDENTIALS')
        const burst = await Promise.all(Array.from({ length: 20 }, () => t.post('/auth/login', { email: user.email, password: PASSWORD })))
        assert.ok(burst.every((answer) => answer.statusCode === 429))
        await t.app.services.background.drain()
        assert.equal((await throttledEvents()).length, 1)

        // A minute on, the same address is throttled again (a wrong password keeps the delay up): a second row.
        t.clock.advance(61)
        assert.equal(code(await t.post('/auth/login', { email: user.email, password: 'wrong again!' })), 'INVALID_CREDENTIALS')
        for (let i = 0; i < 5; i++) assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 429)
        await t.app.services.background.drain()
        assert.equal((await throttledEvents()).length, 2)
      })
    })

    test('login per client IP: the 6th in a minute is 429 with RateLimit headers; X-Forwarded-For counts only behind TRUST_PROXY', async () => {
      await withApp(engine, { RATE_LIMIT_LOGIN_PER_IP: '5' }, async (t) => {
        const attempt = (forwardedFor: string) =>
          t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': 'application/json', 'x-forwarded-for': forwardedFor }, payload: JSON.stringify({ email: uniqueEmail(), password: 'whatever it is' }) })
        for (let i = 0; i < 5; i++) {
          const response = await attempt(`203.0.113.${i}`)
          assert.equal(response.statusCode, 401)
          assert.equal(response.headers['ratelimit-limit'], '5')
          assert.equal(response.headers['ratelimit-remaining'], String(4 - i))
        }
        const limited = await attempt('203.0.113.99')
        assert.equal(limited.statusCode, 429)
        assert.equal(code(limited), 'RATE_LIMITED')
        assert.ok(Number(limited.headers['retry-after']) >= 1 && Number(limited.headers['retry-after']) <= 60)
        t.clock.advance(60)
        assert.equal((await attempt('203.0.113.1')).statusCode, 401)
      })
      await withApp(engine, { RATE_LIMIT_LOGIN_PER_IP: '5', TRUST_PROXY: '127.0.0.1' }, async (t) => {
        for (let i = 0; i < 12; i++) {
          const response = await t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': 'application/json', 'x-forwarded-for': `198.51.100.${i}` }, payload: JSON.stringify({ email: uniqueEmail(), password: 'whatever it is' }) })
          assert.equal(response.statusCode, 401)
        }
      })
    })

    test('register per IP, mail routes per IP (429) and per address (silent: same 202, no mail)', async () => {
      await withApp(engine, { RATE_LIMIT_REGISTER_PER_IP: '3', RATE_LIMIT_MAIL_PER_IP: '4', RATE_LIMIT_MAIL_PER_ADDRESS: '2' }, async (t) => {
        const email = uniqueEmail()
        for (let i = 0; i < 3; i++) {
          const response = await t.post('/auth/register', { email: i === 0 ? email : uniqueEmail(), password: PASSWORD, full_name: 'R' })
          assert.equal(response.statusCode, 201)
        }
        assert.equal(code(await t.post('/auth/register', { email: uniqueEmail(), password: PASSWORD, full_name: 'R' })), 'RATE_LIMITED')
        await t.mail.next(email)

        const answers: Awaited<ReturnType<TestApp['post']>>[] = []
        for (let i = 0; i < 4; i++) answers.push(await t.post('/auth/forgot-password', { email }))
        assert.ok(answers.every((a) => a.statusCode === 202 && a.body === answers[0]!.body))
        await t.app.services.background.drain()
        await t.app.services.mailQueue.flush()
        assert.equal(t.mail.received.filter((m) => m.to.includes(email)).length, 2)
        const limited = await t.post('/auth/resend-verification', { email })
        assert.equal(limited.statusCode, 429)
        assert.ok(limited.headers['retry-after'])
      })
    })
  })

  describe(`security: overload on ${engine}`, () => {
    test('a login flood beyond the hashing queue gets 503 at once while bearer requests keep working', async () => {
      // The real hasher, watched: the flood is sent once the account's own login holds the one
      // hashing slot, so that login is admitted whatever order the database reads finish in.
      const argon2 = createArgon2Hasher()
      let armed = false
      let admitted!: () => void
      const accountHashing = new Promise<void>((resolve) => (admitted = resolve))
      const watched: PasswordHasher = {
        ...argon2,
        verify: (passwordHash, password) => {
          if (armed) admitted()
          return argon2.verify(passwordHash, password)
        },
      }
      await withApp(engine, { HASH_CONCURRENCY: '1', HASH_QUEUE: '2' }, async (t) => {
        const user = await registerVerifyLogin(t)
        armed = true
        // One account's own burst is throttled by its progressive delay (each attempt is counted
        // before it is judged), so the flood is the account's login and fifteen other addresses.
        const own = t.post('/auth/login', { email: user.email, password: PASSWORD })
        await accountHashing
        const flood = Array.from({ length: 15 }, () => t.post('/auth/login', { email: uniqueEmail('flood'), password: PASSWORD }))
        const me = await t.get('/auth/me', user.access_token)
        const answers = await Promise.all(flood)
        assert.equal(me.statusCode, 200)
        const unavailable = answers.filter((a) => a.statusCode === 503)
        assert.ok(unavailable.length >= 10, `only ${unavailable.length} refused`)
        assert.ok(unavailable.every((a) => code(a) === 'SERVICE_UNAVAILABLE' && a.headers['retry-after'] === '1'))
        assert.equal((await own).statusCode, 200, 'the login admitted before the flood completes')
      }, watched)
    })
  })
}

describe('security: limits shared through Redis', () => {
  test('failures on instance A throttle the address on instance B', async () => {
    const redisUrl = process.env.REDIS_URL
    assert.ok(redisUrl, 'REDIS_URL must be set (npm test starts a redis-server)')
    const a = await startTestApp('sqlite', { env: { REDIS_URL: redisUrl, LOGIN_FREE_FAILURES: '3' } })
    const b = await startTestApp('sqlite', { env: { REDIS_URL: redisUrl, LOGIN_FREE_FAILURES: '3' }, storage: a.storage })
    // Each app's clock starts when it is built; B, built later under load, could otherwise be past A's 1 s delay already.
    b.clock.ms = a.clock.ms
    try {
      const user = await registerVerifyLogin(a)
      for (let i = 0; i < 3; i++) assert.equal(code(await a.post('/auth/login', { email: user.email, password: 'wrong password!' })), 'INVALID_CREDENTIALS')
      const onB = await b.post('/auth/login', { email: user.email, password: PASSWORD })
      assert.equal(onB.statusCode, 429)
      assert.equal(onB.headers['retry-after'], '1')
      a.clock.advance(1)
      b.clock.advance(1)
      assert.equal((await b.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200)
      assert.equal(code(await a.post('/auth/login', { email: user.email, password: 'wrong password!' })), 'INVALID_CREDENTIALS')
    } finally {
      await b.close()
      await a.close()
    }
  })

  test('a Redis that cannot be reached: the limited routes count on this instance alone, neither 503 nor 500 nor unlimited', async () => {
    // Nothing listens on this port: the instance starts anyway and falls back to its own counters
    // (test/deployment/redis-fallback.test.ts loses Redis and gets it back under load).
    const env = { REDIS_URL: `redis://127.0.0.1:${await freePort()}`, LOGIN_FREE_FAILURES: '3', RATE_LIMIT_REGISTER_PER_IP: '3', RATE_LIMIT_MAIL_PER_IP: '2' }
    const t = await startTestApp('sqlite', { env })
    try {
      const user = await registerVerifyLogin(t)
      for (let i = 0; i < 3; i++) assert.equal(code(await t.post('/auth/login', { email: user.email, password: 'wrong password!' })), 'INVALID_CREDENTIALS')
      const throttled = await t.post('/auth/login', { email: user.email, password: PASSWORD })
      assert.equal(throttled.statusCode, 429)
      assert.equal(code(throttled), 'RATE_LIMITED')
      const registers = []
      for (let i = 0; i < 3; i++) registers.push((await t.post('/auth/register', { email: uniqueEmail('more'), password: PASSWORD, full_name: 'M' })).statusCode)
      assert.deepEqual(registers, [201, 201, 429], 'the per-IP register limit (3, one used above) holds')
      const mails = []
      for (let i = 0; i < 3; i++) mails.push((await t.post('/auth/forgot-password', { email: user.email })).statusCode)
      assert.deepEqual(mails, [202, 202, 429], 'the per-IP mail limit holds')
      assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
    } finally {
      await t.close()
    }
  })
})

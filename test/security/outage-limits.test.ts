import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import SQLite from 'better-sqlite3'
import type { LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import pg from 'pg'
import type { PasswordHasher } from '../../src/auth/passwords.ts'
import { sqliteFile } from '../../src/db/index.ts'
import { Limits, type LimitSettings } from '../../src/limits/limits.ts'
import { MemoryStore, RedisStore, type CounterStore } from '../../src/limits/store.ts'
import { createStorage, ENGINES, type EngineName } from '../helpers/db.ts'
import { fastHasher, PASSWORD, registerVerifyLogin, startTestApp, TestClock, uniqueEmail, within, type TestApp } from '../helpers/app.ts'
import { mailText } from '../helpers/mail.ts'
import { TcpProxy } from '../helpers/proxy.ts'
import { oathtool } from '../helpers/totp.ts'
import { SoftAuthenticator } from '../helpers/webauthn.ts'

/**
 * Issue 40 item 6, docs/SECURITY.md "An outage throttles logins": every attempt on an account's
 * progressive delay is counted before it is judged, and only one judged wrong may stay counted. An
 * attempt that could not be judged (503) is taken back, so however many arrive during an outage
 * none is answered 429, and afterwards the right credential signs in at once, with the test clock
 * never moved. The free failures are the default 10; every fault sends 15 attempts.
 *
 * The faults are real, on real databases:
 * - PostgreSQL unreachable: the app reaches its database through a TCP forwarder the test cuts
 *   (every connection dropped, new ones refused), as during a restart; then restores.
 * - Password hashing refused: the service's own bounded hasher with one slot and a 1 s wait bound
 *   (HASH_CONCURRENCY=1, HASH_WAIT_SECONDS=1). The test holds the slot with a hash of its own (the
 *   only thing injected: fastHasher, whose hash of HOLD waits for the test), the attempts queue
 *   behind it after claiming, and when the slot frees more than a second later each is refused
 *   with the 503 a flood gets. SQLite in WAL mode never refuses the login's reads, so on SQLite
 *   this is the fault that stops the password from being judged.
 * - Writes refused before the verdict (the second step's and the e-mailed code's attempt counts):
 *   on SQLite another connection holds the write lock (BEGIN IMMEDIATE) and the app's connection
 *   waits 20 ms for it instead of 5 s, so fifteen refusals take a moment; on PostgreSQL the test
 *   locks the table, waits until the request's UPDATE is queued behind the lock, and ends that
 *   backend, as a failover or an operator does (57P01).
 */

const FREE = 10
const ATTEMPTS = 15
const HOLD = 'the test holds the hashing slot'

const code = (r: LightMyRequestResponse) => r.json().error?.code as string | undefined

function assertAllUnavailable(answers: LightMyRequestResponse[]): void {
  const codes = answers.map((a) => `${a.statusCode} ${code(a)}`)
  assert.deepEqual(codes, answers.map(() => '503 SERVICE_UNAVAILABLE'), 'every attempt that could not be judged answers 503, none 429')
  for (const answer of answers) assert.ok(answer.headers['retry-after'], 'a 503 says when to try again')
}

/** fastHasher, except that hashing HOLD waits until the test lets it go. */
function stallableHasher(): { hasher: PasswordHasher; release(): void } {
  let release = () => {}
  const hasher: PasswordHasher = {
    ...fastHasher,
    async hash(password) {
      if (password === HOLD) await new Promise<void>((resolve) => (release = resolve))
      return fastHasher.hash(password)
    },
  }
  return { hasher, release: () => release() }
}

interface Faulty {
  t: TestApp
  /**
   * Sends `count` requests the fault keeps from being judged and returns their answers. At most
   * `atOnce` are in flight together (the hashing fault queues them side by side): each has claimed
   * its attempt before it is refused, so a burst larger than the free failures left would be
   * throttled by its own claims, fault or not.
   */
  unjudged(send: () => Promise<LightMyRequestResponse>, count: number, atOnce?: number): Promise<LightMyRequestResponse[]>
}

/** The hashing fault, on either engine: the service's bounded hasher refuses every queued hash. */
async function withStalledHashing(engine: EngineName, env: Record<string, string>, run: (f: Faulty) => Promise<void>) {
  const stall = stallableHasher()
  const t = await startTestApp(engine, { env: { ...env, HASH_CONCURRENCY: '1', HASH_WAIT_SECONDS: '1' }, overrides: { hasher: stall.hasher } })
  const hasher = t.app.services.hasher
  const unjudged = async (send: () => Promise<LightMyRequestResponse>, count: number, atOnce = FREE) => {
    const answers: LightMyRequestResponse[] = []
    for (let done = 0; done < count; done += atOnce) {
      const round = Math.min(atOnce, count - done)
      const holder = hasher.hash(HOLD)
      const pending = Array.from({ length: round }, send)
      await within(10_000, async () => hasher.waiting() === round)
      // Past HASH_WAIT_SECONDS: when the slot frees, every waiter is refused rather than started.
      await sleep(1100)
      stall.release()
      await holder
      answers.push(...(await Promise.all(pending)))
    }
    return answers
  }
  try {
    await run({ t, unjudged })
  } finally {
    await t.close()
  }
}

/** PostgreSQL unreachable: the app's database connections go through a forwarder the test cuts. */
async function withUnreachablePostgres(env: Record<string, string>, run: (f: Faulty) => Promise<void>) {
  const storage = await createStorage('postgres')
  const target = new URL(storage.databaseUrl!)
  const proxy = await new TcpProxy(target.hostname, Number(target.port)).start()
  const proxied = new URL(target)
  proxied.port = String(proxy.port)
  const t = await startTestApp('postgres', { env, storage: { ...storage, databaseUrl: proxied.toString() } })
  const unjudged = async (send: () => Promise<LightMyRequestResponse>, count: number) => {
    await proxy.cut()
    const answers: LightMyRequestResponse[] = []
    try {
      for (let i = 0; i < count; i++) answers.push(await send())
    } finally {
      await proxy.restore()
    }
    await within(10_000, async () => (await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode === 200)
    return answers
  }
  try {
    await run({ t, unjudged })
  } finally {
    await t.close()
    await proxy.cut().catch(() => {})
    await storage.drop()
  }
}

/** A login that cannot be judged: PostgreSQL unreachable; on SQLite, the hashing refused. */
function withUnjudgedLogins(engine: EngineName, env: Record<string, string>, run: (f: Faulty) => Promise<void>) {
  return engine === 'postgres' ? withUnreachablePostgres(env, run) : withStalledHashing(engine, env, run)
}

/** Writes to `table` refused while the fault lasts (the header says how, per engine). */
interface WriteFault {
  send(request: () => Promise<LightMyRequestResponse>): Promise<LightMyRequestResponse>
  end(): Promise<void>
}

async function refuseWrites(t: TestApp, table: string): Promise<WriteFault> {
  if (t.storage.engine === 'sqlite') {
    const kysely = t.app.services.db.kysely
    await sql`pragma busy_timeout = 20`.execute(kysely)
    const blocker = new SQLite(sqliteFile(t.storage.dataDir))
    blocker.exec('begin immediate')
    return {
      send: (request) => request(),
      async end() {
        blocker.exec('rollback')
        blocker.close()
        await sql`pragma busy_timeout = 5000`.execute(kysely)
      },
    }
  }
  // One connection holds the lock in its transaction; another watches, outside any transaction
  // (pg_stat_activity is read once per transaction and would not change inside the locker's).
  const locker = new pg.Client({ connectionString: t.storage.databaseUrl })
  const watcher = new pg.Client({ connectionString: t.storage.databaseUrl })
  await locker.connect()
  await watcher.connect()
  await locker.query('begin')
  await locker.query(`lock table ${table} in exclusive mode`)
  return {
    async send(request) {
      const pending = request()
      let pid: number | undefined
      await within(10_000, async () => {
        const waiting = await watcher.query<{ pid: number }>(`select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike 'update%'`)
        pid = waiting.rows[0]?.pid
        return pid !== undefined
      })
      await watcher.query('select pg_terminate_backend($1)', [pid])
      const answer = await pending
      // The ended connection may go back to the pool before its end is seen; the next query on it
      // fails (503) and drops it. A ping takes that query, so the next attempt starts clean.
      await within(10_000, async () => (await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode === 200)
      return answer
    },
    async end() {
      await locker.query('rollback')
      await locker.end()
      await watcher.end()
    },
  }
}

/** A verified account with a confirmed authenticator app. */
async function enrolled(t: TestApp) {
  const user = await registerVerifyLogin(t, uniqueEmail('outage'))
  const started = await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)
  assert.equal(started.statusCode, 201, started.body)
  const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
  const confirmed = await t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, user.access_token)
  assert.equal(confirmed.statusCode, 200, confirmed.body)
  return { ...user, secret }
}

const COUNTERS = { memory: {}, redis: { REDIS_URL: process.env.REDIS_URL ?? '' } } as const

function countersEnv(counters: keyof typeof COUNTERS): Record<string, string> {
  if (counters === 'redis') assert.ok(process.env.REDIS_URL, 'REDIS_URL must be set (npm test starts a redis-server)')
  return COUNTERS[counters]
}

for (const engine of ENGINES) {
  const fault = engine === 'postgres' ? 'the database unreachable' : 'the hashing refused'
  describe(`attempts that could not be judged are taken back, on ${engine}`, () => {
    for (const counters of ['memory', 'redis'] as const) {
      test(`${ATTEMPTS} logins with ${fault} (counters in ${counters}): all 503, none 429; then the right password signs in at once`, async () => {
        await withUnjudgedLogins(engine, countersEnv(counters), async ({ t, unjudged }) => {
          const user = await registerVerifyLogin(t)
          assertAllUnavailable(await unjudged(() => t.post('/auth/login', { email: user.email, password: PASSWORD }), ATTEMPTS))
          const after = await t.post('/auth/login', { email: user.email, password: PASSWORD })
          assert.equal(after.statusCode, 200, after.body)
        })
      })

      test(`wrong passwords still count around them (counters in ${counters}): 5 wrong, ${ATTEMPTS} unjudged, 5 wrong, and the 11th attempt is 429 even for the right password`, async () => {
        await withUnjudgedLogins(engine, countersEnv(counters), async ({ t, unjudged }) => {
          const user = await registerVerifyLogin(t)
          const wrong = async () => {
            for (let i = 0; i < 5; i++) assert.equal(code(await t.post('/auth/login', { email: user.email, password: `wrong password ${i}` })), 'INVALID_CREDENTIALS')
          }
          await wrong()
          // Five free failures are left: the hashing fault's rounds stay within them.
          assertAllUnavailable(await unjudged(() => t.post('/auth/login', { email: user.email, password: PASSWORD }), ATTEMPTS, 5))
          await wrong()
          const limited = await t.post('/auth/login', { email: user.email, password: PASSWORD })
          assert.equal(limited.statusCode, 429, limited.body)
          assert.equal(code(limited), 'RATE_LIMITED')
          assert.equal(limited.headers['retry-after'], '1', 'the first wait after ten failures: only the ten wrong ones were counted')
          t.clock.advance(1)
          assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200)
        })
      })
    }

    test(`the per-IP login limit counts requests, judged or not: with 12 a minute, 12 unjudged logins use it up; the next minute is free again`, async () => {
      await withUnjudgedLogins(engine, { RATE_LIMIT_LOGIN_PER_IP: '12' }, async ({ t, unjudged }) => {
        const user = await registerVerifyLogin(t)
        // A new minute's window: the set-up's login counted in the previous one.
        t.clock.advance(60)
        assertAllUnavailable(await unjudged(() => t.post('/auth/login', { email: user.email, password: PASSWORD }), 12))
        const limited = await t.post('/auth/login', { email: user.email, password: PASSWORD })
        assert.equal(limited.statusCode, 429, limited.body)
        assert.ok(Number(limited.headers['retry-after']) <= 60, `Retry-After ${limited.headers['retry-after']}: never beyond the window`)
        t.clock.advance(60)
        assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200)
      })
    })

    test(`${ATTEMPTS} change-password confirmations with the hashing refused: all 503, none 429; then the current password is accepted at once`, async () => {
      await withStalledHashing(engine, {}, async ({ t, unjudged }) => {
        const user = await registerVerifyLogin(t)
        const change = () => t.post('/auth/change-password', { current_password: PASSWORD, new_password: 'a passphrase after the outage' }, user.access_token)
        assertAllUnavailable(await unjudged(change, ATTEMPTS))
        const after = await change()
        assert.equal(after.statusCode, 200, after.body)
      })
    })

    test(`${ATTEMPTS} second steps with their count refused (writes to mfa_challenges): all 503, none 429; then the right code signs in at once`, async () => {
      const t = await startTestApp(engine)
      try {
        const user = await enrolled(t)
        t.clock.advance(60)
        const login = await t.post('/auth/login', { email: user.email, password: PASSWORD })
        assert.equal(code(login), 'MFA_REQUIRED', login.body)
        const mfaToken = login.json().error.mfa.mfa_token as string
        const right = { mfa_token: mfaToken, method: 'totp', code: oathtool(user.secret, t.clock.now()) }
        const writes = await refuseWrites(t, 'mfa_challenges')
        const answers: LightMyRequestResponse[] = []
        try {
          for (let i = 0; i < ATTEMPTS; i++) answers.push(await writes.send(() => t.post('/auth/mfa/verify', right)))
        } finally {
          await writes.end()
        }
        assertAllUnavailable(answers)
        const after = await t.post('/auth/mfa/verify', right)
        assert.equal(after.statusCode, 200, after.body)
      } finally {
        await t.close()
      }
    })

    test(`${ATTEMPTS} e-mailed codes with their count refused (writes to email_sign_ins): all 503, none 429; then the code signs in at once`, async () => {
      const t = await startTestApp(engine, { env: { PUBLIC_URL: 'http://localhost:4000' } })
      try {
        const user = await registerVerifyLogin(t)
        assert.equal((await t.post('/auth/email/start', { email: user.email })).statusCode, 202)
        await t.app.services.background.drain()
        let text = mailText(await t.mail.next(user.email))
        while (!text.includes('/sign-in/email?token=')) text = mailText(await t.mail.next(user.email))
        const mailed = /^(\d{6})$/m.exec(text)?.[1]
        assert.ok(mailed, text)
        const writes = await refuseWrites(t, 'email_sign_ins')
        const answers: LightMyRequestResponse[] = []
        try {
          for (let i = 0; i < ATTEMPTS; i++) answers.push(await writes.send(() => t.post('/auth/email/verify', { email: user.email, code: mailed })))
        } finally {
          await writes.end()
        }
        assertAllUnavailable(answers)
        const after = await t.post('/auth/email/verify', { email: user.email, code: mailed })
        assert.equal(after.statusCode, 200, after.body)
      } finally {
        await t.close()
      }
    })

    test('wrong e-mailed codes and refused passkeys still count: 10 INVALID_CREDENTIALS, then 429 even for the right one', async () => {
      const origin = 'https://auth.example.com'
      const t = await startTestApp(engine, { env: { PUBLIC_URL: origin, WEBAUTHN_RP_ID: 'example.com' } })
      try {
        const user = await registerVerifyLogin(t)
        assert.equal((await t.post('/auth/email/start', { email: user.email })).statusCode, 202)
        for (let i = 0; i < FREE; i++) assert.equal(code(await t.post('/auth/email/verify', { email: user.email, code: String(100000 + i) })), 'INVALID_CREDENTIALS')
        assert.equal(code(await t.post('/auth/email/verify', { email: user.email, code: '123456' })), 'RATE_LIMITED')

        const owner = await registerVerifyLogin(t)
        const device = new SoftAuthenticator()
        const options = (await t.post('/auth/passkeys/register/options', undefined, owner.access_token)).json().data.options
        assert.equal((await t.post('/auth/passkeys/register', { credential: device.register(options, { origin }) }, owner.access_token)).statusCode, 201)
        const passkeyLogin = async (from: string) => {
          const { challenge_id, options } = (await t.post('/auth/passkeys/login/options')).json().data
          return t.post('/auth/passkeys/login', { challenge_id, credential: device.authenticate(options, { origin: from }) })
        }
        for (let i = 0; i < FREE; i++) assert.equal(code(await passkeyLogin('https://evil.example.net')), 'INVALID_CREDENTIALS')
        assert.equal(code(await passkeyLogin(origin)), 'RATE_LIMITED')
      } finally {
        await t.close()
      }
    })

    test('50 wrong passwords at once are still counted before they are judged: 10 INVALID_CREDENTIALS, 40 RATE_LIMITED', async () => {
      const t = await startTestApp(engine)
      try {
        const user = await registerVerifyLogin(t)
        const burst = await Promise.all(Array.from({ length: 50 }, (_, i) => t.post('/auth/login', { email: user.email, password: `wrong password ${i}` })))
        const counts = { INVALID_CREDENTIALS: 0, RATE_LIMITED: 0 }
        for (const answer of burst) counts[code(answer) as keyof typeof counts]++
        assert.deepEqual(counts, { INVALID_CREDENTIALS: FREE, RATE_LIMITED: 50 - FREE })
      } finally {
        await t.close()
      }
    })
  })
}

const SETTINGS: LimitSettings = {
  clientRegistrationsPerIpPerHour: 10,
  loginPerIpPerMinute: 60,
  loginFreeFailures: 2,
  loginMaxDelaySeconds: 900,
  registerPerIpPerHour: 20,
  mailPerIpPerHour: 20,
  mailPerAddressPerHour: 5,
  apiKeyFailuresPerIpPerMinute: 10,
}

const silent = { info() {}, warn() {}, error() {} }

/** Whether a further attempt on `email` is let through now (and if so, it stays counted as wrong). */
async function admitted(limits: Limits, email: string): Promise<boolean> {
  try {
    ;(await limits.claimLoginAttempt(email)).judgedWrong()
    return true
  } catch (error) {
    assert.equal((error as { code?: string }).code, 'RATE_LIMITED')
    return false
  }
}

/**
 * The take-back is exact: it removes its own attempt and nothing else, whatever happened in
 * between, in memory and in Redis shared by two instances. Two free failures, so a third recorded
 * failure shows as a refusal.
 */
for (const kind of ['memory', 'redis'] as const) {
  describe(`the take-back of an attempt is exact, counters in ${kind}`, () => {
    async function withLimits(run: (a: Limits, b: Limits, clock: TestClock) => Promise<void>) {
      const clock = new TestClock()
      const stores: CounterStore[] = []
      const open = async () => {
        let store: CounterStore = new MemoryStore(clock)
        if (kind === 'redis') {
          assert.ok(process.env.REDIS_URL, 'REDIS_URL must be set (npm test starts a redis-server)')
          const redis = new RedisStore(process.env.REDIS_URL, { local: store as MemoryStore, logger: silent })
          await redis.start()
          assert.equal(redis.fallingBack(), false, 'Redis is reachable')
          store = redis
        }
        stores.push(store)
        return new Limits(store, clock, SETTINGS)
      }
      try {
        // In memory each instance counts alone, so "the other instance" is the same one there.
        const a = await open()
        await run(a, kind === 'redis' ? await open() : a, clock)
      } finally {
        for (const store of stores) await store.close()
      }
    }

    test('two attempts claimed, the first taken back: the second stays, and one more failure is free', async () => {
      await withLimits(async (a, b) => {
        const email = uniqueEmail('exact')
        const first = await a.claimLoginAttempt(email)
        const second = await b.claimLoginAttempt(email)
        await first.takeBack()
        second.judgedWrong()
        await second[Symbol.asyncDispose]()
        assert.equal(await admitted(b, email), true, 'the second free failure')
        assert.equal(await admitted(a, email), false, 'two recorded failures: the wait begins')
      })
    })

    test('a success between the claim and the take-back: a wrong guess made after the success stays counted', async () => {
      await withLimits(async (a, b) => {
        const email = uniqueEmail('exact')
        const unjudged = await a.claimLoginAttempt(email)
        await b.loginSucceeded(email)
        assert.equal(await admitted(b, email), true)
        await unjudged.takeBack()
        assert.equal(await admitted(a, email), true)
        assert.equal(await admitted(b, email), false, 'both wrong guesses after the success are counted')
      })
    })

    test('taken back twice (the right password with a second factor, then the end of the login): removed once', async () => {
      await withLimits(async (a, b) => {
        const email = uniqueEmail('exact')
        assert.equal(await admitted(a, email), true)
        const right = await b.claimLoginAttempt(email)
        await b.attemptWasRight(right)
        await right[Symbol.asyncDispose]()
        assert.equal(await admitted(a, email), true, 'the one wrong guess before is still there, and this is the second')
        assert.equal(await admitted(b, email), false)
      })
    })

    test('one judged wrong is never taken back; disposing it changes nothing', async () => {
      await withLimits(async (a) => {
        const email = uniqueEmail('exact')
        for (let i = 0; i < 2; i++) {
          const attempt = await a.claimLoginAttempt(email)
          attempt.judgedWrong()
          await attempt.takeBack()
          await attempt[Symbol.asyncDispose]()
        }
        assert.equal(await admitted(a, email), false)
      })
    })

    test('the wait runs from the latest remaining failure: taking back the latest leaves the wait of the one before', async () => {
      await withLimits(async (a, b, clock) => {
        const email = uniqueEmail('exact')
        assert.equal(await admitted(a, email), true)
        clock.advance(1)
        assert.equal(await admitted(a, email), true)
        // Two failures, the latest one now: 1 s to wait.
        assert.equal(await admitted(b, email), false)
        clock.advance(1)
        const unjudged = await b.claimLoginAttempt(email)
        await unjudged.takeBack()
        // Back to two failures, the latest 1 s ago: the wait has passed.
        assert.equal(await admitted(a, email), true)
      })
    })

    test('50 claims at once from two instances: 2 let through, 48 refused, as before the take-back existed', async () => {
      await withLimits(async (a, b) => {
        const email = uniqueEmail('exact')
        const results = await Promise.allSettled(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).claimLoginAttempt(email)))
        assert.equal(results.filter((r) => r.status === 'fulfilled').length, 2)
        assert.ok(results.every((r) => r.status === 'fulfilled' || (r.reason as { code?: string }).code === 'RATE_LIMITED'))
      })
    })
  })
}

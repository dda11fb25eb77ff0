import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { connect } from 'node:net'
import { describe, test } from 'node:test'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within, type TestApp } from '../helpers/app.ts'
import { createStorage } from '../helpers/db.ts'
import { LogCapture } from '../helpers/logs.ts'

const REDIS_SERVER = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((candidate) => existsSync(candidate))
const FREE_FAILURES = 3


/** A redis-server of this test's own (the shared one is never stopped), on a fixed loopback port. */
async function startRedis(port: number): Promise<ChildProcess> {
  const child = spawn(REDIS_SERVER!, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'], { stdio: 'ignore' })
  const accepts = () =>
    new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1')
      socket.once('connect', () => (socket.destroy(), resolve(true)))
      socket.once('error', () => resolve(false))
    })
  await within(10_000, accepts)
  return child
}

async function stopRedis(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGKILL')
  await exited
}

const code = (response: { json(): { error?: { code: string } } }) => response.json().error?.code

async function metric(t: TestApp, name: string): Promise<number> {
  const body = (await t.app.inject({ method: 'GET', url: '/metrics' })).body
  const value = new RegExp(`^${name} (\\S+)$`, 'm').exec(body)?.[1]
  assert.ok(value !== undefined, `${name} is in /metrics`)
  return Number(value)
}

/** `FREE_FAILURES` wrong passwords for `email` on `t`, each still answered INVALID_CREDENTIALS. */
async function failFreely(t: TestApp, email: string): Promise<void> {
  for (let i = 0; i < FREE_FAILURES; i++) assert.equal(code(await t.post('/auth/login', { email, password: 'wrong password!' })), 'INVALID_CREDENTIALS')
}

/**
 * Issue 30 item 5: Redis is an optional cache of counters, not a point of failure for signing in.
 * Two instances share one PostgreSQL database and a redis-server this test owns. Logins run on
 * both while the test kills redis-server and later starts it again on the same port. It asserts
 * outcomes, not speed: every login of the load answers 200, before, during and after the outage
 * (never a 503); while Redis is away each instance enforces the limit on its own counters; once it
 * is back the counters are shared again; and the fallback is logged once per instance and shown in
 * /metrics.
 */
describe('rate limits when Redis goes away and comes back', () => {
  test('under a login load on two instances: no 503, the limit holds per instance while Redis is away and is shared again after', async (context) => {
    if (!REDIS_SERVER) throw new Error('redis-server is needed for the Redis fallback test: apt-get install redis-server')
    const port = await freePort()
    let redis = await startRedis(port)
    const storage = await createStorage('postgres')
    const logs = { a: new LogCapture(), b: new LogCapture() }
    const env = { REDIS_URL: `redis://127.0.0.1:${port}`, LOGIN_FREE_FAILURES: String(FREE_FAILURES), LOG_LEVEL: 'info' }
    const a = await startTestApp('postgres', { storage, env, overrides: { logStream: logs.a } })
    let second: TestApp | undefined
    let running = true
    const load: Promise<void>[] = []
    try {
      // Every account is made before B starts: B's mail queue, on the same database, could
      // otherwise send A's verification mail to B's mail catcher.
      const users = await Promise.all(Array.from({ length: 6 }, () => registerVerifyLogin(a)))
      const before = await registerVerifyLogin(a)
      const victim = await registerVerifyLogin(a)
      const after = await registerVerifyLogin(a)
      const b = await startTestApp('postgres', { storage, env, overrides: { logStream: logs.b } })
      second = b
      // Each app's clock starts when it is built; one time for both, and it never moves: a delay, once due, stays due.
      b.clock.ms = a.clock.ms
      assert.equal(await metric(a, 'portcullis_limits_redis_fallback'), 0)
      assert.equal(await metric(b, 'portcullis_limits_redis_fallback'), 0)

      // The load: one user per worker, right-password logins in a loop, workers split over the two
      // instances, each answer recorded with the phase it was sent in.
      let phase = 'shared'
      const answers: { phase: string; instance: string; status: number }[] = []
      users.forEach((user, i) => {
        const [name, instance] = i % 2 === 0 ? ['a', a] : ['b', b]
        load.push(
          (async () => {
            while (running) {
              const sentIn = phase
              const response = await instance.post('/auth/login', { email: user.email, password: PASSWORD })
              answers.push({ phase: sentIn, instance: name, status: response.statusCode })
            }
          })(),
        )
      })
      const loggedIn = (inPhase: string, instance: string) => answers.filter((answer) => answer.phase === inPhase && answer.instance === instance && answer.status === 200).length
      const someLoginsOnBoth = (inPhase: string) => within(20_000, async () => loggedIn(inPhase, 'a') >= 10 && loggedIn(inPhase, 'b') >= 10)
      await someLoginsOnBoth('shared')

      // Shared: failures on A throttle the address on B.
      await failFreely(a, before.email)
      assert.equal((await b.post('/auth/login', { email: before.email, password: PASSWORD })).statusCode, 429)

      // Redis dies mid-load.
      phase = 'redis away'
      await stopRedis(redis)
      await within(10_000, async () => (await metric(a, 'portcullis_limits_redis_fallback')) === 1 && (await metric(b, 'portcullis_limits_redis_fallback')) === 1)
      await someLoginsOnBoth('redis away')

      // Per instance: A throttles the address after its own free failures; B has not seen them and
      // judges its own, then throttles after its own free failures too.
      await failFreely(a, victim.email)
      const throttledOnA = await a.post('/auth/login', { email: victim.email, password: PASSWORD })
      assert.equal(throttledOnA.statusCode, 429)
      assert.equal(throttledOnA.headers['retry-after'], '1')
      await failFreely(b, victim.email)
      assert.equal((await b.post('/auth/login', { email: victim.email, password: PASSWORD })).statusCode, 429)
      // The other limited routes answer as usual too.
      assert.equal((await b.post('/auth/register', { email: uniqueEmail('away'), password: PASSWORD, full_name: 'Away' })).statusCode, 201)
      assert.equal((await a.post('/auth/forgot-password', { email: victim.email })).statusCode, 202)

      // One warning per instance for the whole outage (however many requests and reconnection
      // attempts it saw), and one fallback counted.
      for (const [name, instance] of [['a', a], ['b', b]] as const) {
        assert.equal(logs[name].messages(/^redis unreachable/).length, 1, `one fallback warning on ${name}`)
        assert.equal(logs[name].messages(/^redis unreachable/)[0]!.level, 40)
        assert.equal(await metric(instance, 'portcullis_limits_redis_fallbacks_total'), 1)
      }

      // Redis comes back on the same port (empty: it keeps nothing on disk); ioredis reconnects by itself.
      redis = await startRedis(port)
      await within(15_000, async () => (await metric(a, 'portcullis_limits_redis_fallback')) === 0 && (await metric(b, 'portcullis_limits_redis_fallback')) === 0)
      phase = 'redis back'
      await someLoginsOnBoth('redis back')
      assert.equal(logs.a.messages(/^redis reachable again/).length, 1)
      assert.equal(logs.b.messages(/^redis reachable again/).length, 1)

      // Shared again: failures on A throttle the address on B.
      await failFreely(a, after.email)
      assert.equal((await b.post('/auth/login', { email: after.email, password: PASSWORD })).statusCode, 429)
      assert.equal(await metric(a, 'portcullis_limits_redis_fallbacks_total'), 1)
      assert.equal(await metric(b, 'portcullis_limits_redis_fallbacks_total'), 1)

      running = false
      await Promise.all(load)
      for (const inPhase of ['shared', 'redis away', 'redis back']) context.diagnostic(`${inPhase}: ${loggedIn(inPhase, 'a')} logins on A, ${loggedIn(inPhase, 'b')} on B`)
      const unexpected = answers.filter((answer) => answer.status !== 200)
      assert.deepEqual(unexpected, [], 'every login of the load succeeded, before, during and after the outage')
      assert.equal(logs.a.messages(/^redis unreachable/).length + logs.b.messages(/^redis unreachable/).length, 2)
    } finally {
      running = false
      await Promise.allSettled(load)
      await second?.close()
      await a.close()
      await storage.drop()
      await stopRedis(redis)
    }
  })

  test('a Redis that is down at start does not stop the start: the instance counts alone, then shares once Redis answers', async () => {
    if (!REDIS_SERVER) throw new Error('redis-server is needed for the Redis fallback test: apt-get install redis-server')
    const port = await freePort()
    const logs = new LogCapture()
    const t = await startTestApp('sqlite', { env: { REDIS_URL: `redis://127.0.0.1:${port}`, LOGIN_FREE_FAILURES: String(FREE_FAILURES), LOG_LEVEL: 'warn' }, overrides: { logStream: logs } })
    let redis: ChildProcess | undefined
    try {
      assert.equal(await metric(t, 'portcullis_limits_redis_fallback'), 1)
      assert.equal(logs.messages(/^redis unreachable/).length, 1)
      const user = await registerVerifyLogin(t)
      await failFreely(t, user.email)
      assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 429)

      redis = await startRedis(port)
      await within(15_000, async () => (await metric(t, 'portcullis_limits_redis_fallback')) === 0)
      // Back on the (empty) shared counters: the counts made alone are dropped, the limit counts afresh.
      assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200)
      await failFreely(t, user.email)
      assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 429)
      assert.equal(await metric(t, 'portcullis_limits_redis_fallbacks_total'), 1)
    } finally {
      await t.close()
      if (redis) await stopRedis(redis)
    }
  })
})

import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { describe, test } from 'node:test'
import { freePort, PASSWORD, uniqueEmail, within } from '../helpers/app.ts'
import { createStorage } from '../helpers/db.ts'
import { startServerProcess } from '../helpers/process.ts'

const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((candidate) => existsSync(candidate))
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

interface Instance {
  name: string
  port: number
  child: ChildProcess
}

/**
 * The deployment docs/operations.md describes: two instances on PostgreSQL and Redis behind
 * HAProxy (deploy/haproxy.cfg), health-checked on /readyz. Each instance is restarted in turn
 * while a load of logins, refreshes, bearer reads and watchlist writes runs through the proxy.
 * It lives in test/ so CI runs it on every change; it asserts outcomes (no failed request, nothing
 * acknowledged lost), not speed.
 */
describe('rolling restart of two instances behind HAProxy', () => {
  test('under load: zero failed requests, nothing acknowledged lost; keys, revocation and limits hold across the pair', async (t) => {
    if (!HAPROXY) throw new Error('HAProxy is needed for the rolling-restart test: apt-get install haproxy')
    const redisUrl = process.env.REDIS_URL
    if (!redisUrl) throw new Error('REDIS_URL is not set: the rolling-restart test needs Redis (npm test starts one)')
    const storage = await createStorage('postgres')
    const [front, portA, portB] = [await freePort(), await freePort(), await freePort()]
    const base = `http://127.0.0.1:${front}/api/v1`
    const env = {
      LOG_LEVEL: 'warn',
      DATA_DIR: storage.dataDir,
      DATABASE_URL: storage.databaseUrl!,
      REDIS_URL: redisUrl,
      PUBLIC_URL: `http://127.0.0.1:${front}`,
      TRUST_PROXY: '127.0.0.1',
      SHUTDOWN_DRAIN_SECONDS: '2',
      REQUIRE_EMAIL_VERIFICATION: 'false',
      RATE_LIMIT_LOGIN_PER_IP: '1000000',
      RATE_LIMIT_REGISTER_PER_IP: '1000000',
    }

    const startInstance = async (name: string, port: number): Promise<Instance> => {
      const { child, output } = await startServerProcess({ ...env, PORT: String(port) })
      child.on('exit', (code) => {
        if (code !== 0 && code !== null) t.diagnostic(`instance ${name} exited ${code}: ${output().slice(-2000)}`)
      })
      return { name, port, child }
    }
    const instances = { a: await startInstance('a', portA), b: await startInstance('b', portB) }
    const proxy = spawn(HAPROXY, ['-f', 'deploy/haproxy.cfg', '-db'], {
      env: { ...process.env, FRONTEND_ADDRESS: `127.0.0.1:${front}`, INSTANCE_A: `127.0.0.1:${portA}`, INSTANCE_B: `127.0.0.1:${portB}` },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    let proxyErrors = ''
    proxy.stderr!.on('data', (chunk) => (proxyErrors += chunk))

    try {
      await within(10_000, async () => (await fetch(`http://127.0.0.1:${front}/readyz`).then((r) => r.ok, () => false)))
      await sleep(1000)

      const call = async (method: string, path: string, body?: unknown, token?: string) => {
        const response = await fetch(base + path, {
          method,
          headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(token ? { authorization: `Bearer ${token}` } : {}) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        })
        return { status: response.status, body: (await response.json()) as { data?: Record<string, unknown>; error?: { code: string } } }
      }

      // One user per worker; each worker logs in, refreshes, reads and writes in a loop.
      const WORKERS = 8
      const failures: string[] = []
      const counts: Record<string, number> = {}
      const acknowledged: { token: () => string; lists: Map<string, string> }[] = []
      let running = true
      const worker = async (index: number) => {
        const email = uniqueEmail(`rolling${index}`)
        const registered = await call('POST', '/auth/register', { email, password: PASSWORD, full_name: 'Rolling' })
        assert.equal(registered.status, 201)
        let tokens = (await call('POST', '/auth/login', { email, password: PASSWORD })).body.data as { access_token: string; refresh_token: string }
        const lists = new Map<string, string>()
        acknowledged.push({ token: () => tokens.access_token, lists })
        for (let i = 0; running; i++) {
          const op = ['login', 'refresh', 'me', 'write', 'list'][i % 5]!
          counts[op] = (counts[op] ?? 0) + 1
          try {
            if (op === 'login') {
              const answer = await call('POST', '/auth/login', { email, password: PASSWORD })
              if (answer.status !== 200) throw new Error(`${answer.status} ${answer.body.error?.code}`)
              tokens = answer.body.data as typeof tokens
            } else if (op === 'refresh') {
              const answer = await call('POST', '/auth/refresh', { refresh_token: tokens.refresh_token })
              if (answer.status !== 200) throw new Error(`${answer.status} ${answer.body.error?.code}`)
              tokens = { ...tokens, access_token: answer.body.data!.access_token as string }
            } else if (op === 'me' || op === 'list') {
              const answer = await call('GET', op === 'me' ? '/auth/me' : '/watchlists?limit=5', undefined, tokens.access_token)
              if (answer.status !== 200) throw new Error(`${answer.status} ${answer.body.error?.code}`)
            } else if (lists.size < 90) {
              const name = `list ${i}`
              const answer = await call('POST', '/watchlists', { name, symbols: ['AAPL'] }, tokens.access_token)
              if (answer.status !== 201) throw new Error(`${answer.status} ${answer.body.error?.code}`)
              lists.set((answer.body.data!.watchlist as { id: string }).id, name)
            } else {
              const [id] = [...lists.keys()].slice(i % lists.size, (i % lists.size) + 1)
              const name = `renamed ${i}`
              const answer = await call('PATCH', `/watchlists/${id}`, { name }, tokens.access_token)
              if (answer.status !== 200) throw new Error(`${answer.status} ${answer.body.error?.code}`)
              lists.set(id!, name)
            }
          } catch (error) {
            failures.push(`${op}: ${(error as Error).message}`)
          }
        }
      }
      const load = Array.from({ length: WORKERS }, (_, i) => worker(i))

      const restart = async (key: 'a' | 'b') => {
        const instance = instances[key]
        instance.child.kill('SIGTERM')
        const [code] = (await once(instance.child, 'exit')) as [number | null]
        assert.equal(code, 0, `instance ${key} exit status`)
        instances[key] = await startInstance(key, instance.port)
        // HAProxy marks it up after two good checks (300 ms apart).
        await sleep(1500)
      }
      await sleep(1500)
      await restart('a')
      await restart('b')
      await sleep(1000)
      running = false
      await Promise.all(load)

      const total = Object.values(counts).reduce((sum, n) => sum + n, 0)
      t.diagnostic(`requests through HAProxy: ${total} (${Object.entries(counts).map(([op, n]) => `${op} ${n}`).join(', ')}); failed: ${failures.length}`)
      assert.deepEqual(failures, [], 'no request failed at the client')
      assert.ok(total > 500, `a real load ran (${total} requests)`)

      // Nothing acknowledged was lost: every list created, with its last acknowledged name.
      let checked = 0
      for (const { token, lists } of acknowledged) {
        for (const [id, name] of lists) {
          const answer = await call('GET', `/watchlists/${id}`, undefined, token())
          assert.equal(answer.status, 200)
          assert.equal((answer.body.data!.watchlist as { name: string }).name, name)
          checked++
        }
      }
      t.diagnostic(`acknowledged watchlist writes checked after the restarts: ${checked}`)

      // Across the pair: a token from one instance works on the other (shared keys) ...
      const direct = (instance: Instance) => `http://127.0.0.1:${instance.port}/api/v1`
      const email = uniqueEmail('pair')
      await call('POST', '/auth/register', { email, password: PASSWORD, full_name: 'Pair' })
      const login = await fetch(`${direct(instances.a)}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) })
      const { access_token: access } = ((await login.json()) as { data: { access_token: string } }).data
      const me = (instance: Instance) => fetch(`${direct(instance)}/auth/me`, { headers: { authorization: `Bearer ${access}` } }).then(async (r) => ({ status: r.status, code: ((await r.json()) as { error?: { code: string } }).error?.code }))
      assert.equal((await me(instances.b)).status, 200, 'a token signed by A is accepted by B')
      // ... a revocation on one reaches the other within the bound ...
      await fetch(`${direct(instances.a)}/auth/logout-all`, { method: 'POST', headers: { authorization: `Bearer ${access}` } })
      const took = await within(1000, async () => (await me(instances.b)).code === 'INVALID_TOKEN')
      t.diagnostic(`logout-all on A refused on B after ${Math.round(took)} ms`)
      // ... and the per-address login throttle is shared through Redis.
      for (let i = 0; i < 10; i++) {
        const target = i % 2 ? instances.a : instances.b
        const wrong = await fetch(`${direct(target)}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: 'not the password' }) })
        assert.equal(wrong.status, 401)
      }
      const throttled = await fetch(`${direct(instances.b)}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) })
      assert.equal(throttled.status, 429, 'ten failures spread over both instances throttle the address on either')
    } finally {
      proxy.kill('SIGTERM')
      for (const instance of Object.values(instances)) instance.child.kill('SIGKILL')
      await Promise.all([proxy, ...Object.values(instances).map((i) => i.child)].map((child) => (child.exitCode === null && child.signalCode === null ? once(child, 'exit') : undefined)))
      if (proxyErrors.trim()) t.diagnostic(`haproxy: ${proxyErrors.trim().slice(0, 500)}`)
      await storage.drop()
    }
  })
})

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { runCli } from '../../src/cli.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startPair, startTestApp, within, type TestApp } from '../helpers/app.ts'

async function cliKey(storage: TestStorage, scopes: string, name = 'test tool'): Promise<string> {
  const out: string[] = []
  const status = await runCli(['api-keys', 'create', '--name', name, '--scopes', scopes], { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }, { out: (line) => out.push(line), err() {} })
  assert.equal(status, 0)
  assert.match(out[0]!, /^pcl_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/)
  return out[0]!
}

const idOf = (key: string) => key.split('_')[1]!

for (const engine of ENGINES) {
  describe(`the admin API on ${engine}`, () => {
    let storage: TestStorage
    let t: TestApp
    let keys: Record<'read' | 'write' | 'audit' | 'revoked' | 'expired', string>
    const as = (key: string | undefined, method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown) =>
      t.app.inject({
        method,
        url: t.base + path,
        headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
      })

    before(async () => {
      storage = await createStorage(engine)
      t = await startTestApp(engine, { storage, env: { RATE_LIMIT_API_KEY_FAILURES_PER_IP: '100000' } })
      keys = {
        read: await cliKey(storage, 'users:read'),
        write: await cliKey(storage, 'users:write'),
        audit: await cliKey(storage, 'audit:read'),
        revoked: await cliKey(storage, 'users:read,users:write,audit:read'),
        expired: (await t.app.services.apiKeys.create({ name: 'short', scopes: ['users:read', 'users:write', 'audit:read'], expiresAt: t.clock.now() + 1000 })).key,
      }
      assert.equal(await runCli(['api-keys', 'revoke', idOf(keys.revoked)], { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }, { out() {}, err() {} }), 0)
      t.clock.advance(2)
    })
    after(async () => {
      await t.close()
      await storage.drop()
    })

    test('every route: the right scope works; wrong scope, revoked, expired, a user JWT and no credential are refused', async () => {
      const user = await registerVerifyLogin(t)
      const routes: { method: 'GET' | 'POST' | 'DELETE'; path: (id: string) => string; scope: 'read' | 'write' | 'audit'; body?: unknown; status?: number }[] = [
        { method: 'GET', path: () => '/admin/users', scope: 'read' },
        { method: 'GET', path: (id) => `/admin/users/${id}`, scope: 'read' },
        { method: 'POST', path: (id) => `/admin/users/${id}/disable`, scope: 'write', body: { reason: 'banned' } },
        { method: 'POST', path: (id) => `/admin/users/${id}/enable`, scope: 'write' },
        { method: 'POST', path: (id) => `/admin/users/${id}/verify`, scope: 'write' },
        { method: 'POST', path: (id) => `/admin/users/${id}/revoke-sessions`, scope: 'write' },
        { method: 'DELETE', path: (id) => `/admin/users/${id}`, scope: 'write' },
        { method: 'GET', path: () => '/admin/events', scope: 'audit' },
      ]
      for (const route of routes) {
        const path = route.path(user.userId)
        const label = `${route.method} ${route.path(':id')}`
        const wrong = route.scope === 'read' ? keys.write : keys.read
        const refused = await as(wrong, route.method, path, route.body)
        assert.equal(refused.statusCode, 403, label)
        assert.equal(refused.json().error.code, 'INSUFFICIENT_SCOPE', label)
        assert.match(String(refused.headers['www-authenticate']), /insufficient_scope/)
        for (const [credential, code] of [[keys.revoked, 'INVALID_API_KEY'], [keys.expired, 'INVALID_API_KEY'], [user.access_token, 'INVALID_API_KEY'], [undefined, 'AUTH_REQUIRED']] as const) {
          const response = await as(credential, route.method, path, route.body)
          assert.equal(response.statusCode, 401, `${label} with ${code}`)
          assert.equal(response.json().error.code, code, label)
          assert.match(String(response.headers['www-authenticate']), /^Bearer realm="portcullis"/)
        }
        const done = await as(keys[route.scope], route.method, path, route.body)
        assert.equal(done.statusCode, 200, `${label}: ${done.body}`)
      }
      // The last write deleted the user.
      assert.equal((await as(keys.read, 'GET', `/admin/users/${user.userId}`)).json().error.code, 'NOT_FOUND')
    })

    test('what the routes answer, and every action is an audit event naming the key', async () => {
      const user = await registerVerifyLogin(t)
      const got = (await as(keys.read, 'GET', `/admin/users/${user.userId}`)).json().data.user
      assert.deepEqual(Object.keys(got).sort(), ['active_sessions', 'app_metadata', 'apps', 'created_at', 'disabled_reason', 'email', 'email_verified', 'full_name', 'identities', 'last_login_at', 'mfa', 'roles', 'status', 'user_id'])
      assert.deepEqual(got.mfa, { enabled: false, factors: [] })
      assert.equal(got.status, 'active')
      assert.equal(got.active_sessions, 1)
      assert.ok(got.last_login_at)

      const disabled = (await as(keys.write, 'POST', `/admin/users/${user.userId}/disable`, { reason: 'suspended' })).json().data.user
      assert.deepEqual([disabled.status, disabled.disabled_reason], ['disabled', 'suspended'])
      assert.equal((await t.get('/auth/me', user.access_token)).json().error.code, 'ACCOUNT_DISABLED')
      assert.equal((await as(keys.write, 'POST', `/admin/users/${user.userId}/disable`, { reason: 'bored' })).json().error.code, 'VALIDATION_ERROR')
      t.clock.advance(1)
      assert.equal((await as(keys.write, 'POST', `/admin/users/${user.userId}/enable`)).json().data.user.status, 'active')
      t.clock.advance(1)
      assert.deepEqual((await as(keys.write, 'POST', `/admin/users/${user.userId}/revoke-sessions`)).json().data, { revoked: 1 })
      assert.equal((await t.get('/auth/me', user.access_token)).json().error.code, 'INVALID_TOKEN')
      assert.equal((await as(keys.read, 'GET', `/admin/users/${user.userId}`)).json().data.user.active_sessions, 0)

      for (const id of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
        assert.equal((await as(keys.read, 'GET', `/admin/users/${id}`)).json().error.code, 'NOT_FOUND')
        assert.equal((await as(keys.write, 'DELETE', `/admin/users/${id}`)).json().error.code, 'NOT_FOUND')
      }

      const events = (await as(keys.audit, 'GET', `/admin/events?user_id=${user.userId}&limit=100`)).json().data.events
      const byKey = events.filter((e: { actor: string | null }) => e.actor === `api_key:${idOf(keys.write)}`).map((e: { type: string }) => e.type)
      assert.deepEqual(byKey, ['sessions.revoked_by_operator', 'account.enabled', 'account.disabled'])
      // Newest first.
      const times = events.map((e: { at: string }) => Date.parse(e.at))
      assert.deepEqual(times, [...times].sort((a, b) => b - a))
      const typed = (await as(keys.audit, 'GET', `/admin/events?user_id=${user.userId}&type=login.succeeded`)).json().data.events
      assert.equal(typed.length, 1)
      const future = new Date(t.clock.now() + 3600_000).toISOString()
      assert.deepEqual((await as(keys.audit, 'GET', `/admin/events?since=${future}`)).json().data.events, [])
      assert.equal((await as(keys.audit, 'GET', `/admin/events?since=yesterday`)).json().error.code, 'VALIDATION_ERROR')
    })

    test('an API key on a user route is INVALID_TOKEN', async () => {
      const response = await t.get('/auth/me', keys.read)
      assert.equal(response.statusCode, 401)
      assert.equal(response.json().error.code, 'INVALID_TOKEN')
      assert.equal((await t.get('/watchlists', keys.write)).json().error.code, 'INVALID_TOKEN')
    })

    test('users page by keyset: rows inserted between pages are neither repeated nor skipped; a cursor is bound to its filter', async () => {
      const prefix = `page-${Date.now().toString(36)}`
      const created: string[] = []
      for (let i = 0; i < 5; i++) {
        t.clock.advance(1)
        created.push((await t.post('/auth/register', { email: `${prefix}-${i}@example.com`, password: PASSWORD, full_name: `P ${i}` })).json().data.user_id)
      }
      const seen: string[] = []
      let page = (await as(keys.read, 'GET', `/admin/users?email=${prefix.toUpperCase()}&limit=2`)).json().data
      seen.push(...page.users.map((u: { user_id: string }) => u.user_id))
      assert.ok(page.next_cursor)
      // A newer account arrives between pages; an older one is deleted.
      t.clock.advance(1)
      const late = (await t.post('/auth/register', { email: `${prefix}-late@example.com`, password: PASSWORD, full_name: 'Late' })).json().data.user_id
      const wrongFilter = await as(keys.read, 'GET', `/admin/users?email=someone-else&limit=2&cursor=${page.next_cursor}`)
      assert.equal(wrongFilter.json().error.code, 'VALIDATION_ERROR')
      assert.equal((await as(keys.read, 'GET', `/admin/users?cursor=${page.next_cursor}x`)).json().error.code, 'VALIDATION_ERROR')
      while (page.next_cursor) {
        page = (await as(keys.read, 'GET', `/admin/users?email=${prefix}&limit=2&cursor=${encodeURIComponent(page.next_cursor)}`)).json().data
        seen.push(...page.users.map((u: { user_id: string }) => u.user_id))
      }
      assert.deepEqual(seen, [...created, late])
      const unverified = (await as(keys.read, 'GET', `/admin/users?email=${prefix}&status=unverified&limit=100`)).json().data.users
      assert.equal(unverified.length, 6)
      assert.deepEqual((await as(keys.read, 'GET', `/admin/users?email=${prefix}&status=active`)).json().data.users, [])
      // A prefix holding LIKE's wildcards means itself.
      assert.deepEqual((await as(keys.read, 'GET', `/admin/users?email=${encodeURIComponent('%')}`)).json().data.users, [])
    })

    test('an address prefix lists in address order across pages; without one, oldest first; each state filter pages too', async () => {
      const prefix = `order-${Date.now().toString(36)}`
      const names = ['carol', 'alice', 'bob', 'dave']
      const ids = new Map<string, string>()
      for (const name of names) {
        t.clock.advance(1)
        ids.set(name, (await t.post('/auth/register', { email: `${prefix}-${name}@example.com`, password: PASSWORD, full_name: name })).json().data.user_id)
      }
      await as(keys.write, 'POST', `/admin/users/${ids.get('bob')}/disable`, { reason: 'suspended' })
      await as(keys.write, 'POST', `/admin/users/${ids.get('dave')}/verify`)
      const walk = async (query: string) => {
        const seen: string[] = []
        let cursor: string | null = null
        do {
          const response = await as(keys.read, 'GET', `/admin/users?${query ? `${query}&` : ''}limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
          assert.equal(response.statusCode, 200, response.body)
          const data = response.json().data
          seen.push(...data.users.map((u: { full_name: string }) => u.full_name))
          cursor = data.next_cursor
        } while (cursor)
        return seen
      }
      assert.deepEqual(await walk(`email=${prefix}`), ['alice', 'bob', 'carol', 'dave'])
      assert.deepEqual(await walk(`email=${prefix}&status=unverified`), ['alice', 'carol'])
      assert.deepEqual((await walk('status=disabled')).filter((name) => names.includes(name)), ['bob'])
      assert.deepEqual((await walk('status=unverified')).filter((name) => names.includes(name)), ['carol', 'alice'])
      assert.deepEqual((await walk('status=active')).filter((name) => names.includes(name)), ['dave'])
      assert.deepEqual((await walk('')).filter((name) => names.includes(name)), names, 'oldest first')
    })

    test('last_used_at is kept without a write per request', async () => {
      const key = await cliKey(storage, 'users:read', 'usage')
      const lastUsed = async () => {
        await t.app.services.background.drain()
        return (await t.app.services.apiKeys.list()).find((k) => k.id === idOf(key))!.last_used_at
      }
      assert.equal(await lastUsed(), null)
      await as(key, 'GET', '/admin/users?limit=1')
      const first = await lastUsed()
      assert.equal(first, t.clock.now())
      t.clock.advance(10)
      await as(key, 'GET', '/admin/users?limit=1')
      assert.equal(await lastUsed(), first, 'a second use within the minute writes nothing')
      t.clock.advance(61)
      await as(key, 'GET', '/admin/users?limit=1')
      assert.equal(await lastUsed(), t.clock.now())
    })

    test('OpenAPI lists every admin route with the API-key security scheme and its scope', async () => {
      const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json()
      assert.equal(doc.components.securitySchemes.apiKey.scheme, 'bearer')
      const admin = Object.entries(doc.paths as Record<string, Record<string, { security: Record<string, string[]>[]; tags: string[] }>>).flatMap(([path, methods]) =>
        Object.entries(methods).filter(([, op]) => op.tags?.includes('admin')).map(([method, op]) => ({ route: `${method.toUpperCase()} ${path}`, scopes: op.security[0]!.apiKey })),
      )
      // 31, the registered resources' five and the import's one.
      assert.equal(admin.length, 37)
      for (const { route, scopes } of admin) assert.equal(scopes?.length, 1, route)
    })
  })

  describe(`admin actions on a second instance on ${engine}`, () => {
    let pair: Awaited<ReturnType<typeof startPair>>
    let storage: TestStorage
    let a: TestApp
    let b: TestApp
    before(async () => {
      pair = await startPair(engine)
      ;({ storage, a, b } = pair)
    })
    after(() => pair.close())
    const admin = (t: TestApp, key: string, method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown) =>
      t.app.inject({ method, url: t.base + path, headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { payload: JSON.stringify(body) } : {}) })

    test('a disable and a delete through A are refused on B within one second; a key revoked on A stops on B', async () => {
      const key = await cliKey(storage, 'users:read,users:write')
      const disabled = await registerVerifyLogin(a)
      const deleted = await registerVerifyLogin(a)
      for (const user of [disabled, deleted]) assert.equal((await b.get('/auth/me', user.access_token)).statusCode, 200)
      assert.equal((await admin(a, key, 'POST', `/admin/users/${disabled.userId}/disable`, { reason: 'banned' })).statusCode, 200)
      assert.equal((await admin(a, key, 'DELETE', `/admin/users/${deleted.userId}`)).statusCode, 200)
      await within(1000, async () => (await b.get('/auth/me', disabled.access_token)).json().error?.code === 'ACCOUNT_DISABLED')
      await within(1000, async () => (await b.get('/auth/me', deleted.access_token)).json().error?.code === 'INVALID_TOKEN')
      // The address is free again, on any instance.
      assert.equal((await b.post('/auth/register', { email: deleted.email, password: PASSWORD, full_name: 'Again' })).statusCode, 201)

      // B has the key cached; a revoke on A (through its service, as the admin tooling would) reaches B.
      assert.equal((await admin(b, key, 'GET', '/admin/users?limit=1')).statusCode, 200)
      assert.equal(await a.app.services.apiKeys.revoke(idOf(key)), true)
      await within(1000, async () => (await admin(b, key, 'GET', '/admin/users?limit=1')).json().error?.code === 'INVALID_API_KEY')
    })
  })
}

describe('failed API keys are limited per IP', () => {
  test('past the limit every key is refused with 429 until the window ends', async () => {
    const t = await startTestApp('sqlite', { env: { RATE_LIMIT_API_KEY_FAILURES_PER_IP: '3' } })
    try {
      const good = await cliKey(t.storage, 'users:read')
      const call = (key: string) => t.app.inject({ method: 'GET', url: `${t.base}/admin/users`, headers: { authorization: `Bearer ${key}` } })
      // Good calls do not count.
      for (let i = 0; i < 5; i++) assert.equal((await call(good)).statusCode, 200)
      for (const bad of ['pcl_0000000000000000_' + 'A'.repeat(43), good.slice(0, -1) + (good.endsWith('A') ? 'B' : 'A'), 'not-a-key']) {
        assert.equal((await call(bad)).json().error.code, 'INVALID_API_KEY')
      }
      const limited = await call(good)
      assert.equal(limited.statusCode, 429)
      assert.ok(Number(limited.headers['retry-after']) > 0)
      t.clock.advance(61)
      assert.equal((await call(good)).statusCode, 200)
    } finally {
      await t.close()
    }
  })
})

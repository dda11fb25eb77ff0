import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { runCli } from '../../src/cli.ts'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startPair, within, type TestApp } from '../helpers/app.ts'

type Method = 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE'
type User = Awaited<ReturnType<typeof registerVerifyLogin>>

/**
 * What an access token claims about what its user may do (roles, permissions, app_metadata), and
 * the snapshot rule: after a change of those, every older access token of the user answers 401
 * TOKEN_EXPIRED, on this instance at once and on another within the revocation bound, and the
 * refresh answers a token with the new claims.
 */
for (const engine of ENGINES) {
  describe(`claims in access tokens on ${engine}`, () => {
    let pair: Awaited<ReturnType<typeof startPair>>
    let a: TestApp
    let b: TestApp
    let key: string
    before(async () => {
      pair = await startPair(engine)
      ;({ a, b } = pair)
      key = (await a.app.services.apiKeys.create({ name: 'claims', scopes: ['roles:read', 'roles:write', 'users:read', 'users:write'], expiresAt: null })).key
    })
    after(() => pair.close())

    const admin = async (method: Method, path: string, body?: unknown) => {
      const response = await a.call(method, path, key, body)
      assert.ok(response.statusCode < 300, `${method} ${path}: ${response.body}`)
      return response
    }
    const codeOn = async (t: TestApp, token: string) => (await t.get('/auth/me', token)).json().error?.code ?? 'OK'
    const refresh = async (t: TestApp, user: User) => {
      const response = await t.post('/auth/refresh', { refresh_token: user.refresh_token })
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data.access_token as string
    }
    let unique = 0
    const newRole = async (permissions: string[]) => {
      const name = `claims-${engine}-${++unique}`
      await admin('POST', '/admin/roles', { name, permissions })
      return name
    }

    test('a token carries roles, their permissions and app_metadata when set, and none of them when not', async () => {
      const user = await registerVerifyLogin(a)
      const bare = decodeJwt(user.access_token)
      for (const claim of ['roles', 'permissions', 'app_metadata', 'org_id']) assert.equal(bare[claim], undefined, claim)
      assert.equal(typeof bare.cv, 'number')

      const support = await newRole(['tickets:read', 'tickets:write'])
      const marker = await newRole([])
      await admin('PUT', `/admin/users/${user.userId}/roles`, { roles: [support, 'viewer', marker] })
      await admin('PATCH', `/admin/users/${user.userId}`, { app_metadata: { plan: 'pro', seats: 3 } })
      const claims = decodeJwt(await refresh(a, user))
      assert.deepEqual(claims.roles, [support, marker, 'viewer'].sort())
      assert.deepEqual(claims.permissions, ['console:read', 'tickets:read', 'tickets:write'], 'the union, sorted, each once')
      assert.deepEqual(claims.app_metadata, { plan: 'pro', seats: 3 })
      assert.ok((claims.cv as number) > (bare.cv as number))
      assert.equal(claims.user_metadata, undefined)
    })

    // Each change, made through the admin API of instance A, on a user whose token A has accepted.
    const changes: { what: string; setUp?: (user: User) => Promise<string>; change: (user: User, role: string | undefined) => Promise<unknown>; expect: (claims: Record<string, unknown>) => void }[] = [
      {
        what: 'PUT /admin/users/{id}/roles',
        change: (user) => admin('PUT', `/admin/users/${user.userId}/roles`, { roles: ['operator'] }),
        expect: (claims) => assert.deepEqual(claims.permissions, ['console:read', 'console:write']),
      },
      {
        what: 'PATCH /admin/users/{id} {app_metadata}',
        change: (user) => admin('PATCH', `/admin/users/${user.userId}`, { app_metadata: { tier: 'gold' } }),
        expect: (claims) => assert.deepEqual(claims.app_metadata, { tier: 'gold' }),
      },
      {
        what: 'PATCH /admin/roles/{name} {permissions}',
        setUp: async (user) => {
          const name = await newRole(['reports:read'])
          await admin('PUT', `/admin/users/${user.userId}/roles`, { roles: [name] })
          return name
        },
        change: (_user, role) => admin('PATCH', `/admin/roles/${role}`, { permissions: ['reports:read', 'reports:export'] }),
        expect: (claims) => assert.deepEqual(claims.permissions, ['reports:export', 'reports:read']),
      },
    ]

    for (const { what, setUp, change, expect } of changes) {
      test(`after ${what} the older token answers TOKEN_EXPIRED at once; the refresh answers the new claims`, async () => {
        const user = await registerVerifyLogin(a)
        const role = await setUp?.(user)
        const token = role ? await refresh(a, user) : user.access_token
        assert.equal(await codeOn(a, token), 'OK')
        await change(user, role)
        assert.equal(await codeOn(a, token), 'TOKEN_EXPIRED')
        const fresh = await refresh(a, user)
        expect(decodeJwt(fresh))
        assert.equal(await codeOn(a, fresh), 'OK')
        assert.equal(await codeOn(a, token), 'TOKEN_EXPIRED', 'and the old one stays refused')
      })

      test(`after ${what} on instance A, instance B refuses the older token within one second`, async () => {
        const user = await registerVerifyLogin(a)
        const role = await setUp?.(user)
        const token = role ? await refresh(a, user) : user.access_token
        assert.equal(await codeOn(b, token), 'OK', 'B knows the session and the account')
        await change(user, role)
        const ms = await within(1000, async () => (await codeOn(b, token)) === 'TOKEN_EXPIRED')
        console.log(`${engine}: ${what} on A refused on B after ${ms.toFixed(0)} ms`)
        assert.ok(ms < 1000)
        expect(decodeJwt(await refresh(b, user)))
      })
    }

    test('a change from the CLI (another writer) reaches both instances within one second', async () => {
      const user = await registerVerifyLogin(a)
      assert.equal(await codeOn(a, user.access_token), 'OK')
      assert.equal(await codeOn(b, user.access_token), 'OK')
      const status = await runCli(['users', 'roles', user.email, '--add', 'viewer'], { DATA_DIR: pair.storage.dataDir, DATABASE_URL: pair.storage.databaseUrl }, { out() {}, err() {} })
      assert.equal(status, 0)
      for (const t of [a, b]) await within(1000, async () => (await codeOn(t, user.access_token)) === 'TOKEN_EXPIRED')
      assert.deepEqual(decodeJwt(await refresh(b, user)).roles, ['viewer'])
    })

    test('user_metadata is in no token, and changing it leaves every access token current', async () => {
      const user = await registerVerifyLogin(a)
      assert.equal(await codeOn(b, user.access_token), 'OK')
      assert.equal((await a.call('PATCH', '/auth/me', user.access_token, { user_metadata: { theme: 'dark' } })).statusCode, 200)
      assert.equal(await codeOn(a, user.access_token), 'OK')
      await new Promise((resolve) => setTimeout(resolve, 300))
      assert.equal(await codeOn(b, user.access_token), 'OK', 'past the revocation bound, still current on B')
      assert.equal(decodeJwt(await refresh(a, user)).user_metadata, undefined)
    })
  })
}

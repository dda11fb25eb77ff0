import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { runCli } from '../../src/cli.ts'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

type Method = 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE'

/** `count` distinct permissions of one resource, each `length` characters or so. */
const manyPermissions = (resource: string, count: number, pad = '') => Array.from({ length: count }, (_, i) => `${resource}:action-${pad}${i}`)

for (const engine of ENGINES) {
  describe(`the roles catalogue, users' roles and metadata on ${engine}`, () => {
    let t: TestApp
    let keys: Record<'roles' | 'rolesRead' | 'users' | 'audit', string>
    before(async () => {
      t = await startTestApp(engine)
      const key = async (scopes: ('roles:read' | 'roles:write' | 'users:read' | 'users:write' | 'audit:read')[]) =>
        (await t.app.services.apiKeys.create({ name: scopes.join(' '), scopes, expiresAt: null })).key
      keys = {
        roles: await key(['roles:read', 'roles:write']),
        rolesRead: await key(['roles:read']),
        users: await key(['users:read', 'users:write']),
        audit: await key(['audit:read']),
      }
    })
    after(() => t.close())

    const as = (key: string, method: Method, path: string, body?: unknown) => t.call(method, path, key, body)
    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const role = (name: string) => as(keys.roles, 'GET', `/admin/roles/${name}`)
    const userView = async (id: string) => (await as(keys.users, 'GET', `/admin/users/${id}`)).json().data.user
    const auditTypes = async (path = '/admin/events?limit=100') => ((await as(keys.audit, 'GET', path)).json().data.events as { type: string; reason: string | null }[])
    let unique = 0
    const roleName = (prefix: string) => `${prefix}-${engine}-${++unique}`

    test('the built-in roles are listed, marked built in, with their permissions', async () => {
      const listed = await as(keys.rolesRead, 'GET', '/admin/roles')
      assert.equal(listed.statusCode, 200, listed.body)
      const roles = listed.json().data.roles as { name: string; builtin: boolean; permissions: string[] }[]
      const byName = new Map(roles.map((r) => [r.name, r]))
      assert.deepEqual(byName.get('owner')?.permissions, ['organization:*'])
      assert.deepEqual(byName.get('admin')?.permissions, ['members:invite', 'members:manage', 'watchlists:read', 'watchlists:write'])
      assert.deepEqual(byName.get('member')?.permissions, ['watchlists:read'])
      for (const name of ['owner', 'admin', 'member']) assert.equal(byName.get(name)?.builtin, true, name)
      assert.deepEqual(roles.map((r) => r.name), [...roles.map((r) => r.name)].sort(), 'by name')
    })

    test('create, read, change and remove a role; permissions folded and sorted; every change audited', async () => {
      const name = roleName('support')
      const created = await as(keys.roles, 'POST', '/admin/roles', { name, description: '  Answers tickets ', permissions: ['tickets:read', 'tickets:*', 'tickets:read'] })
      assert.equal(created.statusCode, 201, created.body)
      const view = created.json().data.role
      assert.equal(view.name, name)
      assert.equal(view.description, 'Answers tickets')
      assert.deepEqual(view.permissions, ['tickets:*', 'tickets:read'])
      assert.equal(view.builtin, false)
      assert.deepEqual((await role(name)).json().data.role, view)
      assert.ok(((await as(keys.rolesRead, 'GET', '/admin/roles')).json().data.roles as { name: string }[]).some((r) => r.name === name))

      const described = await as(keys.roles, 'PATCH', `/admin/roles/${name}`, { description: null })
      assert.equal(described.statusCode, 200, described.body)
      assert.equal(described.json().data.role.description, null)
      assert.deepEqual(described.json().data.role.permissions, ['tickets:*', 'tickets:read'], 'untouched')
      const changed = await as(keys.roles, 'PATCH', `/admin/roles/${name}`, { permissions: ['reports:export'] })
      assert.deepEqual(changed.json().data.role.permissions, ['reports:export'])

      const removed = await as(keys.roles, 'DELETE', `/admin/roles/${name}`)
      assert.equal(removed.statusCode, 200, removed.body)
      assert.deepEqual(removed.json().data, { name, deleted: true, users: 0, memberships: 0 })
      assert.equal(code(await role(name)), 'NOT_FOUND')
      const audited = (await auditTypes()).filter((event) => event.reason === name).map((event) => event.type)
      assert.deepEqual(audited.sort(), ['role.created', 'role.removed', 'role.updated', 'role.updated'])
    })

    test('bad input is VALIDATION_ERROR naming the field; an unknown role is NOT_FOUND; the scopes are enforced', async () => {
      const cases: { body: unknown; field: string }[] = [
        { body: { name: 'A', permissions: [] }, field: 'name' },
        { body: { name: 'has space', permissions: [] }, field: 'name' },
        { body: { name: roleName('ok'), permissions: ['no-colon'] }, field: 'permissions.0' },
        { body: { name: roleName('ok'), permissions: ['Upper:read'] }, field: 'permissions.0' },
        { body: { name: roleName('ok'), permissions: manyPermissions('x', 101) }, field: 'permissions' },
        { body: { name: roleName('ok'), permissions: [], extra: 1 }, field: 'extra' },
        { body: { name: roleName('ok') }, field: 'permissions' },
      ]
      for (const { body, field } of cases) {
        const response = await as(keys.roles, 'POST', '/admin/roles', body)
        assert.equal(response.statusCode, 400, JSON.stringify(body))
        assert.equal(code(response), 'VALIDATION_ERROR')
        assert.ok((response.json().error.details as { field: string }[]).some((detail) => detail.field === field), `${JSON.stringify(body)}: ${response.body}`)
      }
      const name = roleName('taken')
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name, permissions: [] })).statusCode, 201)
      const again = await as(keys.roles, 'POST', '/admin/roles', { name, permissions: ['a:b'] })
      assert.equal(code(again), 'VALIDATION_ERROR')
      assert.equal(again.json().error.details[0].field, 'name')
      assert.deepEqual((await role(name)).json().data.role.permissions, [], 'the first stays')
      assert.equal(code(await as(keys.roles, 'PATCH', `/admin/roles/${name}`, {})), 'VALIDATION_ERROR')

      for (const path of ['/admin/roles/nobody-has-this', '/admin/roles/NOT-A-NAME']) {
        assert.equal(code(await as(keys.roles, 'GET', path)), 'NOT_FOUND', path)
        assert.equal(code(await as(keys.roles, 'PATCH', path, { description: 'x' })), 'NOT_FOUND', path)
        assert.equal(code(await as(keys.roles, 'DELETE', path)), 'NOT_FOUND', path)
      }

      assert.equal(code(await as(keys.rolesRead, 'POST', '/admin/roles', { name: roleName('nope'), permissions: [] })), 'INSUFFICIENT_SCOPE')
      assert.equal(code(await as(keys.rolesRead, 'DELETE', `/admin/roles/${name}`)), 'INSUFFICIENT_SCOPE')
      assert.equal(code(await as(keys.users, 'GET', '/admin/roles')), 'INSUFFICIENT_SCOPE')
      const user = await registerVerifyLogin(t)
      assert.equal(code(await as(keys.roles, 'PUT', `/admin/users/${user.userId}/roles`, { roles: [] })), 'INSUFFICIENT_SCOPE')
      assert.equal(code(await as(keys.roles, 'PATCH', `/admin/users/${user.userId}`, { app_metadata: null })), 'INSUFFICIENT_SCOPE')
      assert.equal(code(await t.call('GET', '/admin/roles', user.access_token)), 'INVALID_API_KEY', 'a user token is no API key')
      assert.equal(code(await t.call('GET', '/admin/roles')), 'AUTH_REQUIRED')
    })

    test('built-in roles may be changed but never removed, not even with force', async () => {
      const changed = await as(keys.roles, 'PATCH', '/admin/roles/member', { permissions: ['watchlists:read', 'reports:read'] })
      assert.equal(changed.statusCode, 200, changed.body)
      assert.deepEqual(changed.json().data.role.permissions, ['reports:read', 'watchlists:read'])
      assert.equal(changed.json().data.role.builtin, true)
      assert.equal((await as(keys.roles, 'PATCH', '/admin/roles/member', { permissions: ['watchlists:read'] })).statusCode, 200)
      for (const path of ['/admin/roles/owner', '/admin/roles/member?force=true']) {
        const refused = await as(keys.roles, 'DELETE', path)
        assert.equal(refused.statusCode, 400, refused.body)
        assert.equal(code(refused), 'VALIDATION_ERROR')
        assert.equal(refused.json().error.details[0].field, 'name')
      }
      assert.equal((await role('owner')).statusCode, 200)
    })

    test('a role in use is refused removal (409) until ?force=true, which takes it from every user and membership', async () => {
      const name = roleName('auditor')
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name, permissions: ['books:read'] })).statusCode, 201)
      const holder = await registerVerifyLogin(t)
      const owner = await registerVerifyLogin(t)
      const bystander = await registerVerifyLogin(t)
      // The holder holds it globally, beside another role; the owner in their organisation, beside `owner`.
      assert.equal((await as(keys.users, 'PUT', `/admin/users/${holder.userId}/roles`, { roles: [name, 'viewer'] })).statusCode, 200)
      const organization = (await t.post('/auth/organizations', { name: 'Books' }, owner.access_token)).json().data.organization
      // Joining it made the owner's first token out of date: the client refreshes.
      const joined = (await t.post('/auth/refresh', { refresh_token: owner.refresh_token })).json().data.access_token as string
      const granted = await t.call('PUT', `/auth/organizations/${organization.id}/members/${owner.userId}`, joined, { roles: ['owner', name] })
      assert.equal(granted.statusCode, 200, granted.body)
      const ownerToken = (await t.post('/auth/refresh', { refresh_token: owner.refresh_token })).json().data.access_token as string

      const refused = await as(keys.roles, 'DELETE', `/admin/roles/${name}`)
      assert.equal(refused.statusCode, 409, refused.body)
      assert.equal(code(refused), 'LIMIT_EXCEEDED')
      assert.match(refused.json().error.message, /1 user\(s\) and 1 membership\(s\).*force=true/)
      assert.equal((await role(name)).statusCode, 200, 'still there')
      assert.deepEqual((await userView(holder.userId)).roles, [name, 'viewer'])

      const forced = await as(keys.roles, 'DELETE', `/admin/roles/${name}?force=true`)
      assert.equal(forced.statusCode, 200, forced.body)
      assert.deepEqual(forced.json().data, { name, deleted: true, users: 1, memberships: 1 })
      assert.equal(code(await role(name)), 'NOT_FOUND')
      assert.deepEqual((await userView(holder.userId)).roles, ['viewer'])
      const memberships = (await t.get('/auth/organizations', (await t.post('/auth/refresh', { refresh_token: owner.refresh_token })).json().data.access_token)).json().data.organizations
      assert.deepEqual(memberships.map((m: { roles: string[] }) => m.roles), [['owner']])
      // Both holders' older tokens are out of date; someone who did not hold it is untouched.
      assert.equal(code(await t.get('/auth/me', holder.access_token)), 'TOKEN_EXPIRED')
      assert.equal(code(await t.get('/auth/me', ownerToken)), 'TOKEN_EXPIRED')
      assert.equal((await t.get('/auth/me', bystander.access_token)).statusCode, 200)
    })

    test('PUT /admin/users/{id}/roles sets all the roles, shown in GET /admin/users/{id}; unknown roles and too many change nothing', async () => {
      const user = await registerVerifyLogin(t)
      const before = await userView(user.userId)
      assert.deepEqual(before.roles, [])
      assert.equal(before.app_metadata, null)

      const set = await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: ['viewer', 'operator'] })
      assert.equal(set.statusCode, 200, set.body)
      assert.deepEqual(set.json().data.user.roles, ['operator', 'viewer'])
      assert.equal(set.json().data.user.user_id, user.userId)
      assert.deepEqual((await userView(user.userId)).roles, ['operator', 'viewer'])
      const listed = (await as(keys.users, 'GET', `/admin/users?email=${encodeURIComponent(user.email)}`)).json().data.users[0]
      assert.equal(listed.roles, undefined, 'not in listings')

      const unknown = await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: ['viewer', 'no-such-role'] })
      assert.equal(unknown.statusCode, 400, unknown.body)
      assert.equal(code(unknown), 'VALIDATION_ERROR')
      assert.match(unknown.json().error.details[0].message, /no-such-role/)
      const tooMany = await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: Array.from({ length: 21 }, (_, i) => `role-${i}`) })
      assert.equal(code(tooMany), 'VALIDATION_ERROR')
      assert.equal(code(await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: ['viewer', 'viewer'] })), 'VALIDATION_ERROR')

      // Two roles of 60 permissions each: 120 distinct, over 100.
      const [big1, big2] = [roleName('big'), roleName('big')]
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name: big1, permissions: manyPermissions('p', 60) })).statusCode, 201)
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name: big2, permissions: manyPermissions('q', 60) })).statusCode, 201)
      const over = await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: [big1, big2] })
      assert.equal(over.statusCode, 409, over.body)
      assert.equal(code(over), 'LIMIT_EXCEEDED')
      // Under 100 permissions but too large a token: 60 long ones.
      const wide = roleName('wide')
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name: wide, permissions: manyPermissions('reports', 70, 'x'.repeat(20)) })).statusCode, 201)
      assert.equal(code(await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: [wide] })), 'LIMIT_EXCEEDED')
      assert.deepEqual((await userView(user.userId)).roles, ['operator', 'viewer'], 'nothing changed')
      assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 401, 'the first change did make the token out of date')

      assert.equal(code(await as(keys.users, 'PUT', '/admin/users/not-a-uuid/roles', { roles: [] })), 'NOT_FOUND')
      assert.equal(code(await as(keys.users, 'PUT', '/admin/users/00000000-0000-4000-8000-000000000000/roles', { roles: [] })), 'NOT_FOUND')
      const cleared = await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: [] })
      assert.deepEqual(cleared.json().data.user.roles, [])
      const audited = (await auditTypes(`/admin/events?user_id=${user.userId}&type=user.roles_changed`)).length
      assert.equal(audited, 2, 'one audit event per change that happened')
    })

    test('a role change that would push a holder over the limits is refused and changes nothing', async () => {
      const name = roleName('grows')
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name, permissions: manyPermissions('a', 50) })).statusCode, 201)
      const other = roleName('beside')
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name: other, permissions: manyPermissions('b', 40) })).statusCode, 201)
      const user = await registerVerifyLogin(t)
      assert.equal((await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: [name, other] })).statusCode, 200)
      const refreshed = (await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().data.access_token as string

      const grown = await as(keys.roles, 'PATCH', `/admin/roles/${name}`, { permissions: manyPermissions('a', 70) })
      assert.equal(grown.statusCode, 409, grown.body)
      assert.equal(code(grown), 'LIMIT_EXCEEDED')
      assert.equal(((await role(name)).json().data.role.permissions as string[]).length, 50, 'unchanged')
      assert.equal((await t.get('/auth/me', refreshed)).statusCode, 200, 'and the token stays current')
      // Taking permissions away is never refused.
      const shrunk = await as(keys.roles, 'PATCH', `/admin/roles/${name}`, { permissions: manyPermissions('a', 10) })
      assert.equal(shrunk.statusCode, 200, shrunk.body)
      assert.equal(code(await t.get('/auth/me', refreshed)), 'TOKEN_EXPIRED')
    })

    test('PATCH /admin/users/{id} sets app_metadata (an object of at most 2 KB; null clears), shown to operators and read-only to the user', async () => {
      const user = await registerVerifyLogin(t)
      const set = await as(keys.users, 'PATCH', `/admin/users/${user.userId}`, { app_metadata: { plan: 'pro', seats: 3, flags: { beta: true } } })
      assert.equal(set.statusCode, 200, set.body)
      assert.deepEqual(set.json().data.user.app_metadata, { plan: 'pro', seats: 3, flags: { beta: true } })
      const refreshed = (await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().data.access_token as string
      const me = (await t.get('/auth/me', refreshed)).json().data
      assert.deepEqual(me.app_metadata, { plan: 'pro', seats: 3, flags: { beta: true } })
      assert.equal(me.user_metadata, null)
      // Read-only to the user: PATCH /auth/me does not take it.
      const userTries = await t.call('PATCH', '/auth/me', refreshed, { app_metadata: { plan: 'free' } })
      assert.equal(code(userTries), 'VALIDATION_ERROR')

      for (const value of [[1, 2], 'pro', 3, { big: 'x'.repeat(2040) }]) {
        const refused = await as(keys.users, 'PATCH', `/admin/users/${user.userId}`, { app_metadata: value })
        assert.equal(refused.statusCode, 400, JSON.stringify(value).slice(0, 40))
        assert.equal(code(refused), 'VALIDATION_ERROR')
      }
      assert.equal(code(await as(keys.users, 'PATCH', `/admin/users/${user.userId}`, {})), 'VALIDATION_ERROR')
      // Within 2 KB, but with a role's permissions beside it the token would be too large.
      const wide = roleName('wide-meta')
      assert.equal((await as(keys.roles, 'POST', '/admin/roles', { name: wide, permissions: manyPermissions('reports', 30, 'x'.repeat(20)) })).statusCode, 201)
      assert.equal((await as(keys.users, 'PUT', `/admin/users/${user.userId}/roles`, { roles: [wide] })).statusCode, 200)
      const tooLarge = await as(keys.users, 'PATCH', `/admin/users/${user.userId}`, { app_metadata: { notes: 'y'.repeat(1900) } })
      assert.equal(tooLarge.statusCode, 409, tooLarge.body)
      assert.equal(code(tooLarge), 'LIMIT_EXCEEDED')
      assert.deepEqual((await userView(user.userId)).app_metadata, { plan: 'pro', seats: 3, flags: { beta: true } }, 'unchanged')

      const cleared = await as(keys.users, 'PATCH', `/admin/users/${user.userId}`, { app_metadata: null })
      assert.equal(cleared.json().data.user.app_metadata, null)
      assert.equal(code(await as(keys.users, 'PATCH', '/admin/users/not-a-uuid', { app_metadata: null })), 'NOT_FOUND')
      const audited = await auditTypes(`/admin/events?user_id=${user.userId}&type=user.app_metadata_changed`)
      assert.equal(audited.length, 2)
    })

    test('PATCH /auth/me sets the user\'s own user_metadata (at most 2 KB), never in a token, and leaves the access token current', async () => {
      const user = await registerVerifyLogin(t)
      const set = await t.call('PATCH', '/auth/me', user.access_token, { user_metadata: { theme: 'dark', locale: 'de' } })
      assert.equal(set.statusCode, 200, set.body)
      assert.deepEqual(set.json().data.user_metadata, { theme: 'dark', locale: 'de' })
      assert.equal(set.json().data.full_name, 'Test User', 'the name stays')
      assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200, 'not in a token: the token stays current')
      const refreshed = (await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().data.access_token as string
      assert.equal(Buffer.from(refreshed.split('.')[1]!, 'base64url').toString().includes('dark'), false)
      assert.deepEqual((await userView(user.userId)).app_metadata, null)

      const both = await t.call('PATCH', '/auth/me', user.access_token, { full_name: 'Ada', user_metadata: null })
      assert.equal(both.statusCode, 200, both.body)
      assert.equal(both.json().data.full_name, 'Ada')
      assert.equal(both.json().data.user_metadata, null)
      for (const body of [{}, { user_metadata: [1] }, { user_metadata: { big: 'z'.repeat(2048) } }, { full_name: '', user_metadata: { a: 1 } }]) {
        const refused = await t.call('PATCH', '/auth/me', user.access_token, body)
        assert.equal(code(refused), 'VALIDATION_ERROR', JSON.stringify(body).slice(0, 40))
      }
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.user_metadata, null, 'a refused change changed nothing')
      const audited = (await t.app.services.db.kysely.selectFrom('audit_events').select('type').where('user_id', '=', user.userId).where('type', '=', 'user.user_metadata_changed').execute()).length
      assert.equal(audited, 2)
    })

    test('the CLI: roles add, list, show, remove, and users roles --add/--remove', async () => {
      const env = { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl }
      const cli = async (...argv: string[]) => {
        const out: string[] = []
        const err: string[] = []
        const status = await runCli(argv, env, { out: (line) => out.push(line), err: (line) => err.push(line) })
        return { status, out: out.join('\n'), err: err.join('\n') }
      }
      const name = roleName('cli')
      const added = await cli('roles', 'add', name, '--permissions', 'tickets:read,tickets:write', '--permissions', 'tickets:read', '--description', 'From the CLI')
      assert.equal(added.status, 0, added.err)
      assert.deepEqual(JSON.parse(added.out).role.permissions, ['tickets:read', 'tickets:write'])
      assert.match((await cli('roles', 'list')).out, new RegExp(`${name}\\s+false\\s+tickets:read,tickets:write\\s+From the CLI`))
      assert.equal(JSON.parse((await cli('roles', 'show', name)).out).role.name, name)
      assert.equal((await cli('roles', 'add', roleName('cli'))).status, 2, '--permissions is required')
      assert.equal((await cli('roles', 'add', roleName('cli'), '--permissions', 'bad')).status, 1)

      const user = await registerVerifyLogin(t, uniqueEmail('cli-roles'))
      const granted = await cli('users', 'roles', user.email, '--add', name, '--add', 'viewer')
      assert.equal(granted.status, 0, granted.err)
      assert.equal(granted.out, `${user.email}: roles ${[name, 'viewer'].sort().join(', ')}`)
      assert.deepEqual((await userView(user.userId)).roles, [name, 'viewer'].sort())
      assert.equal(code(await t.get('/auth/me', user.access_token)), 'TOKEN_EXPIRED', 'the CLI moves the claims version too')
      assert.equal((await cli('users', 'roles', user.email, '--add', 'no-such-role')).status, 1)
      assert.equal((await cli('users', 'roles', 'nobody@example.com')).status, 1)

      const inUse = await cli('roles', 'remove', name)
      assert.equal(inUse.status, 1)
      assert.match(inUse.err, /force/)
      assert.equal((await cli('users', 'roles', user.email, '--remove', name)).out, `${user.email}: roles viewer`)
      assert.equal((await cli('roles', 'remove', name)).out, `role ${name}: removed`)
      assert.equal((await cli('roles', 'remove', 'owner')).status, 1, 'never a built-in role')
      assert.equal((await cli('users', 'roles', user.email, '--remove', 'viewer')).out, `${user.email}: no roles`)
    })
  })
}

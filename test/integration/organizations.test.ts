import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import { ENGINES, type EngineName } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { tokenFromMail } from '../helpers/mail.ts'

/**
 * Organisations and their members (shared/API.md, "Roles, permissions and organisations";
 * docs/authorization.md): creation, the listings, who may do what (NOT_FOUND for outsiders,
 * FORBIDDEN for members without the permission, nobody granting what they lack), the last-owner
 * rule (leaving, demotion, the account's own deletion, and an operator's), two owners leaving at the
 * same moment, the claims of removed members, the ORGANIZATIONS modes, and the webhook events,
 * audit records and export that go with every change. Invitations: invitations.test.ts.
 */

type Person = { email: string; userId: string; access_token: string; refresh_token: string }

for (const engine of ENGINES) {
  describe(`organisations on ${engine}`, () => {
    let t: TestApp
    let operatorKey: string
    before(async () => {
      t = await startTestApp(engine)
      operatorKey = (await t.app.services.apiKeys.create({ name: 'organisations', scopes: ['users:read', 'users:write'], expiresAt: null })).key
    })
    after(async () => {
      await t.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const person = (prefix: string): Promise<Person> => registerVerifyLogin(t, uniqueEmail(prefix))
    /**
     * A call as `p`, the way the typed client makes it: an access token made out of date by a change
     * of the person's memberships (TOKEN_EXPIRED) is refreshed once and the call repeated.
     */
    const act = async (p: Person, method: 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT', path: string, body?: unknown) => {
      const first = await t.call(method, path, p.access_token, body)
      if (first.statusCode !== 401 || code(first) !== 'TOKEN_EXPIRED') return first
      const renewed = await t.post('/auth/refresh', { refresh_token: p.refresh_token })
      assert.equal(renewed.statusCode, 200, renewed.body)
      p.access_token = renewed.json().data.access_token
      return t.call(method, path, p.access_token, body)
    }
    const create = async (owner: Person, name = 'Acme Research') => {
      const created = await act(owner, 'POST', '/auth/organizations', { name })
      assert.equal(created.statusCode, 201, created.body)
      return created.json().data.organization as { id: string; name: string; created_at: string }
    }
    /** Adds `member` with `roles` the way an invitation does, through the API. */
    const join = async (owner: Person, organizationId: string, member: Person, roles: string[]) => {
      const invited = await act(owner, 'POST', `/auth/organizations/${organizationId}/invitations`, { email: member.email, roles })
      assert.equal(invited.statusCode, 201, invited.body)
      const accepted = await act(member, 'POST', '/auth/invitations/accept', { token: tokenFromMail(await t.mail.next(member.email)) })
      assert.equal(accepted.statusCode, 200, accepted.body)
    }
    const rolesOf = async (organizationId: string, userId: string) => {
      const row = await t.app.services.db.kysely.selectFrom('memberships').select('roles').where('organization_id', '=', organizationId).where('user_id', '=', userId).executeTakeFirst()
      return row ? row.roles.split(' ') : null
    }
    const audit = async (userId: string) =>
      (await t.app.services.db.kysely.selectFrom('audit_events').select(['type', 'reason', 'actor']).where('user_id', '=', userId).where('type', 'like', 'organization.%').orderBy('id').execute())
    /** A refresh of the person's session (into an organisation, or out of one with null); its access token becomes theirs. */
    const refresh = async (person: Partial<Person> & Pick<Person, 'refresh_token'>, organizationId?: string | null) => {
      const response = await t.post('/auth/refresh', { refresh_token: person.refresh_token, ...(organizationId === undefined ? {} : { organization_id: organizationId }) })
      if (response.statusCode === 200) person.access_token = response.json().data.access_token
      return response
    }
    /** A role of the catalogue made for a test, the way an operator's tool makes one. */
    const makeRole = async (name: string, permissions: string[]) => {
      const now = Date.now()
      await t.app.services.db.kysely.insertInto('roles').values({ name, description: null, permissions: permissions.join(' '), builtin: 0, created_at: now, updated_at: now }).execute()
    }
    const admin = (method: 'POST' | 'DELETE', path: string, body?: unknown, key = operatorKey) =>
      t.app.inject({ method, url: `${t.base}${path}`, headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) })

    test('a user with a confirmed address creates one and is its owner; it is listed with their roles and shown to them', async () => {
      const owner = await person('creator')
      const created = await act(owner, 'POST', '/auth/organizations', { name: '  Acme Research ' })
      assert.equal(created.statusCode, 201, created.body)
      const organization = created.json().data.organization
      assert.deepEqual(Object.keys(organization).sort(), ['created_at', 'id', 'name'])
      assert.equal(organization.name, 'Acme Research')
      assert.equal(organization.created_at, new Date(t.clock.now()).toISOString())

      const listed = await act(owner, 'GET', '/auth/organizations')
      assert.equal(listed.statusCode, 200)
      assert.deepEqual(listed.json().data.organizations, [{ id: organization.id, name: 'Acme Research', roles: ['owner'], joined_at: organization.created_at }])
      assert.deepEqual((await act(owner, 'GET', `/auth/organizations/${organization.id}`)).json().data.organization, organization)
      assert.deepEqual((await audit(owner.userId)).map((e) => [e.type, e.reason]).sort(), [['organization.created', organization.id], ['organization.member_added', organization.id]])

      for (const name of ['', '   ', 'x'.repeat(101), 'tab\there']) {
        const refused = await act(owner, 'POST', '/auth/organizations', { name })
        assert.equal(refused.statusCode, 400, JSON.stringify(name))
        assert.equal(code(refused), 'VALIDATION_ERROR')
      }
      assert.equal(code(await act(owner, 'POST', '/auth/organizations', { name: 'X', owner: 'someone' })), 'VALIDATION_ERROR', 'unknown members refused')
      assert.equal((await t.post('/auth/organizations', { name: 'X' })).statusCode, 401)
      assert.equal((await act(owner, 'GET', '/auth/organizations')).json().data.organizations.length, 1, 'nothing made by the refusals')
    })

    test('outsiders get NOT_FOUND on every route, whatever the id; members without the permission get FORBIDDEN and change nothing', async () => {
      const owner = await person('owner')
      const member = await person('member')
      const outsider = await person('outsider')
      const organization = await create(owner)
      await join(owner, organization.id, member, ['member'])
      const base = `/auth/organizations/${organization.id}`

      for (const id of [organization.id, randomUUID(), 'not-a-uuid']) {
        const at = `/auth/organizations/${id}`
        for (const [method, path, body] of [
          ['GET', at, undefined], ['PATCH', at, { name: 'Mine' }], ['DELETE', at, undefined], ['GET', `${at}/members`, undefined],
          ['PUT', `${at}/members/${owner.userId}`, { roles: ['member'] }], ['DELETE', `${at}/members/${owner.userId}`, undefined],
          ['GET', `${at}/invitations`, undefined], ['POST', `${at}/invitations`, { email: uniqueEmail('x'), roles: ['member'] }],
          ['DELETE', `${at}/invitations/${randomUUID()}`, undefined],
        ] as const) {
          const response = await act(outsider, method, path, body)
          assert.equal(response.statusCode, 404, `${method} ${path}: ${response.body}`)
          assert.equal(code(response), 'NOT_FOUND')
        }
      }

      for (const [method, path, body] of [
        ['PATCH', base, { name: 'Mine' }], ['DELETE', base, undefined],
        ['PUT', `${base}/members/${owner.userId}`, { roles: ['member'] }], ['PUT', `${base}/members/${member.userId}`, { roles: ['admin'] }],
        ['DELETE', `${base}/members/${owner.userId}`, undefined],
        ['GET', `${base}/invitations`, undefined], ['POST', `${base}/invitations`, { email: uniqueEmail('x'), roles: ['member'] }],
      ] as const) {
        const response = await act(member, method, path, body)
        assert.equal(response.statusCode, 403, `${method} ${path}: ${response.body}`)
        assert.equal(code(response), 'FORBIDDEN')
      }
      assert.equal((await act(member, 'GET', base)).json().data.organization.name, 'Acme Research')
      assert.deepEqual(await rolesOf(organization.id, owner.userId), ['owner'])
      assert.deepEqual(await rolesOf(organization.id, member.userId), ['member'])
      // A member id that is not one: NOT_FOUND, for the permitted owner too.
      assert.equal(code(await act(owner, 'PUT', `${base}/members/${outsider.userId}`, { roles: ['member'] })), 'NOT_FOUND')
      assert.equal(code(await act(owner, 'DELETE', `${base}/members/not-an-id`)), 'NOT_FOUND')
    })

    test('members are listed by any member, a keyset page at a time, with a cursor bound to the organisation', async () => {
      const owner = await person('lister')
      const organization = await create(owner)
      const others: Person[] = []
      for (const prefix of ['second', 'third']) {
        const other = await person(prefix)
        await join(owner, organization.id, other, ['member'])
        others.push(other)
      }
      const path = `/auth/organizations/${organization.id}/members`
      const first = await act(others[1]!, 'GET', `${path}?limit=2`)
      assert.equal(first.statusCode, 200, first.body)
      const page1 = first.json().data
      assert.equal(page1.members.length, 2)
      assert.deepEqual(Object.keys(page1.members[0]).sort(), ['email', 'full_name', 'joined_at', 'roles', 'user_id'])
      assert.ok(page1.next_cursor)
      const page2 = (await act(owner, 'GET', `${path}?limit=2&cursor=${encodeURIComponent(page1.next_cursor)}`)).json().data
      assert.equal(page2.members.length, 1)
      assert.equal(page2.next_cursor, null)
      // Every member once, in user-id order (the primary key's, so each page is an index range).
      const everyone = [...page1.members, ...page2.members] as { user_id: string; email: string; full_name: string; roles: string[] }[]
      const expected = [owner, ...others].sort((a, b) => (a.userId < b.userId ? -1 : 1))
      assert.deepEqual(everyone.map((m) => [m.user_id, m.email]), expected.map((p) => [p.userId, p.email]))
      assert.deepEqual(everyone.find((m) => m.user_id === owner.userId)?.roles, ['owner'])
      assert.equal(everyone[0]!.full_name, 'Test User')

      const elsewhere = await create(owner, 'Elsewhere')
      const misplaced = await act(owner, 'GET', `/auth/organizations/${elsewhere.id}/members?cursor=${encodeURIComponent(page1.next_cursor)}`)
      assert.equal(misplaced.statusCode, 400)
      assert.equal(code(misplaced), 'VALIDATION_ERROR', 'a cursor of another organisation')
      assert.equal(code(await act(owner, 'GET', `${path}?cursor=forged.cursor`)), 'VALIDATION_ERROR')
      assert.equal(code(await act(owner, 'GET', `${path}?limit=101`)), 'VALIDATION_ERROR')
    })

    test('roles: the owner sets them; nobody grants, changes or removes a permission they lack; unknown roles and oversized claims are refused unchanged', async () => {
      const owner = await person('granter')
      const admin1 = await person('admin-one')
      const admin2 = await person('admin-two')
      const member = await person('plain')
      const organization = await create(owner)
      for (const p of [admin1, admin2, member]) await join(owner, organization.id, p, ['member'])
      const at = (p: Person) => `/auth/organizations/${organization.id}/members/${p.userId}`

      const promoted = await act(owner, 'PUT', at(admin1), { roles: ['admin'] })
      assert.equal(promoted.statusCode, 200, promoted.body)
      assert.deepEqual(promoted.json().data.member, { ...promoted.json().data.member, user_id: admin1.userId, email: admin1.email, roles: ['admin'] })
      assert.equal((await act(owner, 'PUT', at(admin2), { roles: ['admin', 'member'] })).statusCode, 200)
      assert.ok((await audit(admin1.userId)).some((e) => e.type === 'organization.member_updated' && e.actor === `user:${owner.userId}`), 'the audit names the member who acted')

      // The admin may make a member an admin (it holds every permission of `admin`), but not an owner.
      assert.equal((await act(admin1, 'PUT', at(member), { roles: ['admin'] })).statusCode, 200)
      const noOwner = await act(admin1, 'PUT', at(member), { roles: ['owner'] })
      assert.equal(noOwner.statusCode, 403, noOwner.body)
      assert.equal(code(noOwner), 'FORBIDDEN')
      assert.equal(code(await act(admin1, 'PUT', at(admin1), { roles: ['owner'] })), 'FORBIDDEN', 'nor promote themselves')
      // ...nor change or remove the owner, who holds more than they do.
      assert.equal(code(await act(admin1, 'PUT', at(owner), { roles: ['member'] })), 'FORBIDDEN')
      assert.equal(code(await act(admin1, 'DELETE', at(owner))), 'FORBIDDEN')
      // A custom role with a permission the admin lacks: not theirs to give.
      await makeRole(`exporter-${engine}`, ['reports:export'])
      assert.equal(code(await act(admin1, 'PUT', at(member), { roles: [`exporter-${engine}`] })), 'FORBIDDEN')
      assert.equal((await act(owner, 'PUT', at(member), { roles: ['member', `exporter-${engine}`] })).statusCode, 200, 'organization:* grants it')
      // ...and an admin cannot change a member holding it either.
      assert.equal(code(await act(admin1, 'PUT', at(member), { roles: ['member'] })), 'FORBIDDEN')
      assert.deepEqual(await rolesOf(organization.id, member.userId), ['member', `exporter-${engine}`])

      for (const roles of [['no-such-role'], [], ['member', 'member'], ['Owner']]) {
        const refused = await act(owner, 'PUT', at(admin2), { roles })
        assert.equal(refused.statusCode, 400, JSON.stringify(roles))
        assert.equal(code(refused), 'VALIDATION_ERROR')
      }

      // Over 100 distinct permissions in the organisation, or claims too large for a token: LIMIT_EXCEEDED, nothing changed.
      await makeRole(`wide-${engine}`, Array.from({ length: 101 }, (_, i) => `res${i}:read`))
      const tooMany = await act(owner, 'PUT', at(admin2), { roles: [`wide-${engine}`] })
      assert.equal(tooMany.statusCode, 409, tooMany.body)
      assert.equal(code(tooMany), 'LIMIT_EXCEEDED')
      await makeRole(`long-${engine}`, Array.from({ length: 90 }, (_, i) => `resource${String(i).padStart(20, '0')}:read`))
      const tooLarge = await act(owner, 'PUT', at(admin2), { roles: [`long-${engine}`] })
      assert.equal(code(tooLarge), 'LIMIT_EXCEEDED', 'under 100 permissions, over the claims size')
      assert.deepEqual(await rolesOf(organization.id, admin2.userId), ['admin', 'member'], 'the refused changes changed nothing')

      // An admin removes a member they cover; the member's listing no longer has it.
      const removed = await act(admin1, 'DELETE', at(admin2))
      assert.equal(removed.statusCode, 200, removed.body)
      assert.deepEqual(removed.json().data, { organization_id: organization.id, user_id: admin2.userId, removed: true })
      assert.deepEqual((await act(admin2, 'GET', '/auth/organizations')).json().data.organizations, [])
    })

    test('the last owner of an organisation with other members cannot leave or be demoted; with a second owner they can; the last member leaving takes it along', async () => {
      const owner = await person('last-owner')
      const other = await person('co-member')
      const organization = await create(owner)
      const base = `/auth/organizations/${organization.id}`
      await join(owner, organization.id, other, ['admin'])

      const leave = await act(owner, 'DELETE', `${base}/members/${owner.userId}`)
      assert.equal(leave.statusCode, 409, leave.body)
      assert.equal(code(leave), 'LAST_OWNER')
      assert.equal(code(await act(owner, 'PUT', `${base}/members/${owner.userId}`, { roles: ['admin'] })), 'LAST_OWNER')
      assert.deepEqual(await rolesOf(organization.id, owner.userId), ['owner'])

      // A second owner: now either may step down.
      assert.equal((await act(owner, 'PUT', `${base}/members/${other.userId}`, { roles: ['owner'] })).statusCode, 200)
      const demoted = await act(owner, 'PUT', `${base}/members/${owner.userId}`, { roles: ['admin'] })
      assert.equal(demoted.statusCode, 200, demoted.body)
      const left = await act(owner, 'DELETE', `${base}/members/${owner.userId}`)
      assert.equal(left.statusCode, 200, left.body)
      assert.deepEqual(left.json().data, { organization_id: organization.id, user_id: owner.userId, removed: true })
      assert.equal(code(await act(owner, 'GET', base)), 'NOT_FOUND')

      // The last member leaves, owner or not: the organisation goes, with nobody left to see it.
      const alone = await act(other, 'DELETE', `${base}/members/${other.userId}`)
      assert.equal(alone.statusCode, 200, alone.body)
      assert.equal(await t.app.services.db.kysely.selectFrom('organizations').select('id').where('id', '=', organization.id).executeTakeFirst(), undefined)
      const records = (await audit(other.userId)).map((e) => e.type)
      assert.ok(records.includes('organization.member_removed') && records.includes('organization.deleted'), records.join())
    })

    test('two owners leaving at the same moment: one leaves, the other is the last owner (LAST_OWNER), never none with members left', async () => {
      // Twenty rounds: without the organisation's row lock PostgreSQL lets both leave within a few.
      const first = await person('race-a')
      const second = await person('race-b')
      const member = await person('race-m')
      for (let round = 0; round < 20; round++) {
        const organization = await create(first)
        await join(first, organization.id, second, ['owner'])
        await join(first, organization.id, member, ['member'])
        const base = `/auth/organizations/${organization.id}/members`
        // Current tokens first, so that both requests go straight to their transactions.
        await refresh(first)
        await refresh(second)
        const answers = await Promise.all([
          t.call('DELETE', `${base}/${first.userId}`, first.access_token),
          t.call('DELETE', `${base}/${second.userId}`, second.access_token),
        ])
        assert.deepEqual(answers.map((a) => a.statusCode).sort(), [200, 409], answers.map((a) => a.body).join(' '))
        assert.equal(answers.map(code).filter((c) => c === 'LAST_OWNER').length, 1)
        const owners = await t.app.services.db.kysely.selectFrom('memberships').select('user_id').where('organization_id', '=', organization.id).where('roles', '=', 'owner').execute()
        assert.equal(owners.length, 1, `round ${round}: one owner left`)
      }
    })

    test('a removed member\'s older access token is TOKEN_EXPIRED and the refresh drops the organisation; a refresh into an organisation one is not in is FORBIDDEN', async () => {
      const owner = await person('remover')
      const member = await person('removed')
      const organization = await create(owner)
      await join(owner, organization.id, member, ['admin'])
      const inOrg = await refresh(member, organization.id)
      assert.equal(inOrg.statusCode, 200, inOrg.body)
      const access = inOrg.json().data.access_token as string
      assert.equal(decodeJwt(access).org_id, organization.id)
      assert.deepEqual(decodeJwt(access).org_roles, ['admin'])
      const session = { refresh_token: member.refresh_token }
      assert.equal((await t.get('/auth/me', access)).statusCode, 200)

      assert.equal((await act(owner, 'DELETE', `/auth/organizations/${organization.id}/members/${member.userId}`)).statusCode, 200)
      const stale = await t.get('/auth/me', access)
      assert.equal(stale.statusCode, 401)
      assert.equal(code(stale), 'TOKEN_EXPIRED')
      const after = await refresh(session)
      assert.equal(after.statusCode, 200, after.body)
      const claims = decodeJwt(after.json().data.access_token)
      assert.equal(claims.org_id, undefined, 'no longer in the organisation')
      assert.equal(claims.org_roles, undefined)
      assert.equal((await t.get('/auth/me', after.json().data.access_token)).statusCode, 200)

      const refused = await refresh(session, organization.id)
      assert.equal(refused.statusCode, 403, refused.body)
      assert.equal(code(refused), 'FORBIDDEN')
      assert.equal(code(await refresh(session, randomUUID())), 'FORBIDDEN')
      assert.equal((await refresh(session)).statusCode, 200, 'the session carries on as it was')
    })

    test('cookie mode: a refresh with organization_id switches the session into the organisation, and null clears it', async () => {
      const owner = await person('cookie-owner')
      const organization = await create(owner)
      const login = await t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': 'application/json', 'x-token-transport': 'cookie' }, payload: JSON.stringify({ email: owner.email, password: PASSWORD }) })
      assert.equal(login.statusCode, 200, login.body)
      const cookie = /^(portcullis_refresh=[^;]*);/.exec([login.headers['set-cookie']].flat()[0] ?? '')![1]!
      const cookieRefresh = (body: unknown) => t.app.inject({ method: 'POST', url: `${t.base}/auth/refresh`, headers: { 'content-type': 'application/json', 'x-token-transport': 'cookie', cookie }, payload: JSON.stringify(body) })
      const switched = await cookieRefresh({ organization_id: organization.id })
      assert.equal(switched.statusCode, 200, switched.body)
      assert.equal(switched.json().data.refresh_token, undefined, 'the cookie carries it')
      assert.equal(decodeJwt(switched.json().data.access_token).org_id, organization.id)
      assert.equal(decodeJwt((await cookieRefresh({})).json().data.access_token).org_id, organization.id, 'the session remembers it')
      assert.equal(code(await cookieRefresh({ organization_id: randomUUID() })), 'FORBIDDEN')
      assert.equal(decodeJwt((await cookieRefresh({ organization_id: null })).json().data.access_token).org_id, undefined)
    })

    test('deleting an organisation needs organization:*, takes its memberships along, and expires every member\'s older tokens', async () => {
      const owner = await person('deleter')
      const member = await person('bystander')
      const organization = await create(owner)
      await join(owner, organization.id, member, ['admin'])
      const memberAccess = (await refresh(member, organization.id)).json().data.access_token as string
      assert.equal((await act(member, 'PATCH', `/auth/organizations/${organization.id}`, { name: 'Theirs' })).statusCode, 403)
      const renamed = await act(owner, 'PATCH', `/auth/organizations/${organization.id}`, { name: 'Acme Labs' })
      assert.equal(renamed.statusCode, 200, renamed.body)
      assert.deepEqual(renamed.json().data.organization, { ...organization, name: 'Acme Labs' })

      const deleted = await act(owner, 'DELETE', `/auth/organizations/${organization.id}`)
      assert.equal(deleted.statusCode, 200, deleted.body)
      assert.deepEqual(deleted.json().data, { id: organization.id, deleted: true })
      assert.equal(code(await t.get('/auth/me', memberAccess)), 'TOKEN_EXPIRED')
      assert.deepEqual((await act(member, 'GET', '/auth/organizations')).json().data.organizations, [])
      assert.equal(await rolesOf(organization.id, member.userId), null)
      assert.equal(code(await act(owner, 'DELETE', `/auth/organizations/${organization.id}`)), 'NOT_FOUND')
    })

    test('account deletion: the last owner\'s own is LAST_OWNER and deletes nothing; an operator\'s leaves the organisation to its admins; a sole member\'s takes the organisation along', async () => {
      const owner = await person('sole-owner')
      const adminMember = await person('heir')
      const plain = await person('plain-member')
      const organization = await create(owner)
      await join(owner, organization.id, adminMember, ['admin'])
      await join(owner, organization.id, plain, ['member'])
      const solo = await create(owner, 'Just me')

      const refused = await act(owner, 'DELETE', '/auth/me', { password: PASSWORD })
      assert.equal(refused.statusCode, 409, refused.body)
      assert.equal(code(refused), 'LAST_OWNER')
      assert.equal((await act(owner, 'GET', '/auth/me')).statusCode, 200, 'the account is still there')
      assert.equal((await act(owner, 'GET', `/auth/organizations/${solo.id}`)).statusCode, 200, 'and nothing of it was deleted')

      const deleted = await admin('DELETE', `/admin/users/${owner.userId}`)
      assert.equal(deleted.statusCode, 200, deleted.body)
      assert.deepEqual(await rolesOf(organization.id, adminMember.userId), ['admin', 'owner'], 'the admin inherits it')
      assert.deepEqual(await rolesOf(organization.id, plain.userId), ['member'])
      assert.equal(await rolesOf(organization.id, owner.userId), null)
      assert.equal(code(await t.get('/auth/me', (await refresh(adminMember, organization.id)).json().data.access_token)), undefined)
      assert.equal(await t.app.services.db.kysely.selectFrom('organizations').select('id').where('id', '=', solo.id).executeTakeFirst(), undefined, 'the organisation only they were in went with them')

      // A member deletes their own account: their membership goes; the heir (now an owner) is not the last one of an empty organisation.
      const gone = await act(plain, 'DELETE', '/auth/me', { password: PASSWORD })
      assert.equal(gone.statusCode, 200, gone.body)
      assert.equal(await rolesOf(organization.id, plain.userId), null)
      const heirAlone = await act(adminMember, 'DELETE', '/auth/me', { password: PASSWORD })
      assert.equal(heirAlone.statusCode, 200, heirAlone.body)
      assert.equal(await t.app.services.db.kysely.selectFrom('organizations').select('id').where('id', '=', organization.id).executeTakeFirst(), undefined)
    })

    test('every change is an audit record and a webhook event about the member concerned; the export lists the memberships', async () => {
      const { webhook } = await t.app.services.webhooks.create({ url: 'https://hooks.example.com/organizations', events: ['organization.created', 'organization.updated', 'organization.deleted', 'organization.member_added', 'organization.member_updated', 'organization.member_removed'] })
      try {
        const owner = await person('hooked')
        const member = await person('hooked-member')
        const organization = await create(owner, 'Hooked')
        await join(owner, organization.id, member, ['member'])
        assert.equal((await act(owner, 'PUT', `/auth/organizations/${organization.id}/members/${member.userId}`, { roles: ['admin'] })).statusCode, 200)

        const exported = await act(member, 'GET', '/auth/me/export')
        assert.equal(exported.statusCode, 200, exported.body)
        assert.deepEqual(exported.json().data.organizations.map((o: { id: string; name: string; roles: string[] }) => [o.id, o.name, o.roles]), [[organization.id, 'Hooked', ['admin']]])

        assert.equal((await act(owner, 'PATCH', `/auth/organizations/${organization.id}`, { name: 'Hooked Too' })).statusCode, 200)
        assert.equal((await act(member, 'DELETE', `/auth/organizations/${organization.id}/members/${member.userId}`)).statusCode, 200)
        assert.equal((await act(owner, 'DELETE', `/auth/organizations/${organization.id}`)).statusCode, 200)

        const deliveries = await t.app.services.db.kysely.selectFrom('webhook_deliveries').select(['user_id', 'type', 'payload']).where('endpoint_id', '=', webhook.id).orderBy('user_id').orderBy('sequence').execute()
        const about = (userId: string) => deliveries.filter((d) => d.user_id === userId).map((d) => [d.type, JSON.parse(d.payload ?? "{}").data?.organization_id])
        assert.deepEqual(about(owner.userId), [
          ['organization.created', organization.id], ['organization.member_added', organization.id], ['organization.updated', organization.id], ['organization.deleted', organization.id],
        ])
        assert.deepEqual(about(member.userId), [['organization.member_added', organization.id], ['organization.member_updated', organization.id], ['organization.member_removed', organization.id]])
        // One clock moment for the whole test: the records are compared as sets.
        assert.deepEqual((await audit(member.userId)).map((e) => e.type).sort(), ['organization.invitation_accepted', 'organization.member_added', 'organization.member_removed', 'organization.member_updated'])
        assert.deepEqual((await audit(owner.userId)).map((e) => e.type).sort(), [
          'organization.created', 'organization.deleted', 'organization.invitation_created', 'organization.member_added', 'organization.updated',
        ])
      } finally {
        await t.app.services.webhooks.remove(webhook.id)
      }
    })

  })

  describe(`ORGANIZATIONS modes on ${engine}`, () => {
    const modes: { mode: 'off' | 'admin'; check(t: TestApp, key: string): Promise<void> }[] = [
      {
        mode: 'off',
        async check(t, key) {
          const user = await registerVerifyLogin(t, uniqueEmail('off'))
          for (const [method, path] of [['POST', '/auth/organizations'], ['GET', '/auth/organizations'], ['GET', `/auth/organizations/${randomUUID()}`], ['POST', '/auth/invitations/accept']] as const) {
            const response = await t.call(method, path, user.access_token, method === 'POST' ? { name: 'X', token: 'y' } : undefined)
            assert.equal(response.statusCode, 404, `${method} ${path}: ${response.body}`)
            assert.equal(response.json().error.code, 'NOT_FOUND')
          }
          const adminCreate = await t.app.inject({ method: 'POST', url: `${t.base}/admin/organizations`, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, payload: JSON.stringify({ name: 'X', owner_user_id: user.userId }) })
          assert.equal(adminCreate.statusCode, 404)
          assert.equal((await t.app.inject({ method: 'GET', url: '/accept-invitation?token=x' })).statusCode, 404)
        },
      },
      {
        mode: 'admin',
        async check(t, key) {
          const user = await registerVerifyLogin(t, uniqueEmail('admin-mode'))
          const refused = await t.post('/auth/organizations', { name: 'Mine' }, user.access_token)
          assert.equal(refused.statusCode, 403, refused.body)
          assert.equal(refused.json().error.code, 'FORBIDDEN')
          const send = (apiKey: string, body: unknown) =>
            t.app.inject({ method: 'POST', url: `${t.base}/admin/organizations`, headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) })
          const reader = (await t.app.services.apiKeys.create({ name: 'reader', scopes: ['users:read'], expiresAt: null })).key
          assert.equal((await send(reader, { name: 'Ops', owner_user_id: user.userId })).json().error.code, 'INSUFFICIENT_SCOPE')
          assert.equal((await send(key, { name: 'Ops', owner_user_id: randomUUID() })).json().error.code, 'NOT_FOUND')
          const created = await send(key, { name: 'Ops', owner_user_id: user.userId })
          assert.equal(created.statusCode, 201, created.body)
          const organization = created.json().data.organization
          assert.equal(organization.name, 'Ops')
          const listed = (await t.get('/auth/organizations', (await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().data.access_token)).json().data.organizations
          assert.deepEqual(listed.map((o: { id: string; roles: string[] }) => [o.id, o.roles]), [[organization.id, ['owner']]])
          const audited = await t.app.services.db.kysely.selectFrom('audit_events').select(['type', 'actor']).where('user_id', '=', user.userId).where('type', '=', 'organization.created').execute()
          assert.match(audited[0]!.actor ?? '', /^api_key:/)
          // Everything else works as with `on`: the owner invites.
          const invited = await t.post(`/auth/organizations/${organization.id}/invitations`, { email: uniqueEmail('ops-invitee'), roles: ['member'] }, (await t.post('/auth/login', { email: user.email, password: PASSWORD })).json().data.access_token)
          assert.equal(invited.statusCode, 201, invited.body)
        },
      },
    ]
    for (const { mode, check } of modes) {
      test(`ORGANIZATIONS=${mode}`, async () => {
        const t = await startTestApp(engine as EngineName, { env: { ORGANIZATIONS: mode } })
        try {
          await check(t, (await t.app.services.apiKeys.create({ name: 'ops', scopes: ['users:write'], expiresAt: null })).key)
        } finally {
          await t.close()
        }
      })
    }

    test('an unconfirmed address cannot create an organisation (EMAIL_NOT_VERIFIED)', async () => {
      const t = await startTestApp(engine, { env: { REQUIRE_EMAIL_VERIFICATION: 'false' } })
      try {
        const email = uniqueEmail('unconfirmed')
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'U' })).statusCode, 201)
        const access = (await t.post('/auth/login', { email, password: PASSWORD })).json().data.access_token
        const refused = await t.post('/auth/organizations', { name: 'Mine' }, access)
        assert.equal(refused.statusCode, 403, refused.body)
        assert.equal(refused.json().error.code, 'EMAIL_NOT_VERIFIED')
        assert.equal(await t.app.services.db.kysely.selectFrom('organizations').select('id').executeTakeFirst(), undefined)
      } finally {
        await t.close()
      }
    })
  })
}

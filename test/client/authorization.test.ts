import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { memoryStorage, PortcullisClient, PortcullisError } from '../../packages/client/dist/index.js'
import { claimsChanged } from '../../src/authz/claims.ts'
import { grants } from '../../src/authz/permissions.ts'
import { ENGINES } from '../helpers/db.ts'
import { linkFromMail, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

/**
 * The typed client's side of roles, permissions and organisations (docs/client.md, "What the user
 * may do" and "Organisations"): can() and claims() read the access token the client holds, with
 * the service's own rule; every organisation method against the real server on both engines; a
 * switch of the active organisation in the body and the cookie transport; and the snapshot rule,
 * where a change an operator makes reaches the client at its next call through the refresh it
 * makes on TOKEN_EXPIRED, with nothing for the application to do.
 */

/** The PortcullisError a call fails with; a call that succeeds fails the test. */
async function failure(call: Promise<unknown>): Promise<PortcullisError> {
  const outcome = await call.then(() => null, (error: unknown) => error)
  assert.ok(outcome instanceof PortcullisError, `expected a PortcullisError, got ${String(outcome)}`)
  return outcome
}

/** An access token's shape with these claims and no valid signature: can() never checks one. */
function unsignedToken(claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  return `${part({ alg: 'EdDSA', typ: 'at+jwt' })}.${part({ sub: randomUUID(), sid: randomUUID(), ...claims })}.c2ln`
}

/** A client holding a token with these claims (body transport, nothing sent). */
async function clientWith(claims: Record<string, unknown>): Promise<PortcullisClient> {
  const storage = memoryStorage()
  await storage.save({ accessToken: unsignedToken(claims), refreshToken: 'unused' })
  const client = new PortcullisClient({ baseUrl: 'http://127.0.0.1:9/api/v1', storage })
  assert.equal(await client.restore(), true)
  return client
}

describe('can() and claims(), from the token alone', () => {
  // held global permissions, held organisation permissions (with an active organisation), wanted.
  const cases: { name: string; permissions?: string[]; org?: string[]; wanted: string[]; granted: string[] }[] = [
    { name: 'the same string', permissions: ['watchlists:read'], wanted: ['watchlists:read', 'watchlists:write', 'watchlist:read'], granted: ['watchlists:read'] },
    { name: 'resource:* grants every action of the resource, of no other', permissions: ['reports:*'], wanted: ['reports:export', 'reports:read', 'reporting:export', 'report:export'], granted: ['reports:export', 'reports:read'] },
    { name: 'a * inside an action matches any run of characters', permissions: ['reports:export.*'], wanted: ['reports:export.csv', 'reports:export.', 'reports:export', 'reports:exportxcsv'], granted: ['reports:export.csv', 'reports:export.'] },
    { name: 'dots and dashes in a pattern are themselves', permissions: ['a.b-c:x-*.y'], wanted: ['a.b-c:x-1.y', 'a.b-c:x-.y', 'axb-c:x-1.y', 'a.b-c:xz1.y', 'a.b-c:x-1zy'], granted: ['a.b-c:x-1.y', 'a.b-c:x-.y'] },
    { name: 'two stars', permissions: ['files:r*d*e'], wanted: ['files:rde', 'files:read-write-delete', 'files:rd', 'files:red'], granted: ['files:rde', 'files:read-write-delete'] },
    { name: 'organization:* grants everything in the active organisation', org: ['organization:*'], wanted: ['watchlists:write', 'members:manage', 'reports:export'], granted: ['watchlists:write', 'members:manage', 'reports:export'] },
    { name: 'organization:* held globally is only itself', permissions: ['organization:*'], wanted: ['watchlists:write', 'organization:*', 'organization:delete'], granted: ['organization:*', 'organization:delete'] },
    { name: 'organisation permissions and global ones together', permissions: ['console:read'], org: ['watchlists:read'], wanted: ['console:read', 'watchlists:read', 'watchlists:write', 'console:write'], granted: ['console:read', 'watchlists:read'] },
    { name: 'nothing held grants nothing', wanted: ['watchlists:read'], granted: [] },
  ]

  for (const { name, permissions, org, wanted, granted } of cases) {
    test(`${name}; the service's grants() answers the same`, async () => {
      const organization = org ? randomUUID() : undefined
      const client = await clientWith({ ...(permissions ? { permissions } : {}), ...(org ? { org_id: organization, org_roles: ['custom'], org_permissions: org } : {}) })
      for (const permission of wanted) {
        const server = grants(permissions ?? [], permission, false) || (org !== undefined && grants(org, permission, true))
        assert.equal(client.can(permission), granted.includes(permission), `can('${permission}')`)
        assert.equal(client.can(permission), server, `can('${permission}') as the service's grants() says`)
      }
    })
  }

  test('organisation permissions without an active organisation (no org_id) grant nothing', async () => {
    const client = await clientWith({ org_roles: ['owner'], org_permissions: ['organization:*'] })
    assert.equal(client.can('watchlists:read'), false)
    assert.deepEqual(client.claims(), { roles: [], permissions: [], app_metadata: null, org_id: null, org_roles: [], org_permissions: [] })
  })

  test('claims() decodes roles, permissions, UTF-8 app_metadata and the organisation; null and false without a token', async () => {
    const org = randomUUID()
    const client = await clientWith({ roles: ['support'], permissions: ['tickets:*'], app_metadata: { plan: 'Großkunde ✓' }, org_id: org, org_roles: ['admin'], org_permissions: ['members:invite'] })
    assert.deepEqual(client.claims(), { roles: ['support'], permissions: ['tickets:*'], app_metadata: { plan: 'Großkunde ✓' }, org_id: org, org_roles: ['admin'], org_permissions: ['members:invite'] })
    const none = new PortcullisClient({ baseUrl: 'http://127.0.0.1:9/api/v1' })
    assert.equal(none.claims(), null)
    assert.equal(none.can('watchlists:read'), false)
  })

  test('a string that is not resource:action is a programming error (TypeError), not a silent false', async () => {
    const client = await clientWith({ permissions: ['watchlists:read'] })
    for (const malformed of ['watchlists.read', 'watchlists', ':read', 'Watchlists:read', 'watchlists:read ']) {
      assert.throws(() => client.can(malformed), TypeError, malformed)
    }
  })
})

/** A fetch with one cookie jar, as a browser keeps for the service: the cookie transport in Node. */
function cookieJarFetch(sent: string[]): typeof fetch {
  const jar = new Map<string, string>()
  return async (input, init) => {
    const headers = new Headers(init?.headers)
    if (jar.size > 0) headers.set('cookie', [...jar].map(([name, value]) => `${name}=${value}`).join('; '))
    sent.push(new URL(String(input)).pathname)
    const response = await fetch(input, { ...init, headers })
    for (const cookie of response.headers.getSetCookie()) {
      const [pair = ''] = cookie.split(';')
      const [name = '', value = ''] = pair.split('=')
      if (/max-age=0|expires=thu, 01 jan 1970/i.test(cookie)) jar.delete(name)
      else jar.set(name, value)
    }
    return response
  }
}

for (const engine of ENGINES) {
  describe(`organisations and permissions through the client on ${engine}`, () => {
    let t: TestApp
    let baseUrl: string
    const sent: string[] = []
    const countingFetch: typeof fetch = (input, init) => {
      sent.push(new URL(String(input)).pathname)
      return fetch(input, init)
    }
    const refreshes = (from = 0) => sent.slice(from).filter((p) => p.endsWith('/auth/refresh')).length
    type Options = Partial<ConstructorParameters<typeof PortcullisClient>[0]>

    before(async () => {
      t = await startTestApp(engine)
      await t.app.listen({ port: 0, host: '127.0.0.1' })
      baseUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}${t.base}`
    })
    after(async () => {
      await t.close()
    })

    /** A registered, confirmed, signed-in user and their client. */
    async function person(prefix: string, options: Options = {}) {
      const client = new PortcullisClient({ baseUrl, fetch: countingFetch, ...options })
      const email = uniqueEmail(prefix)
      const { user_id: userId } = await client.register({ email, password: PASSWORD, full_name: `${prefix} person` })
      await client.verifyEmail(tokenFromMail(await t.mail.next(email)))
      await client.login({ email, password: PASSWORD })
      return { client, email, userId }
    }

    /** What an operator's tool does to a user's global roles: one transaction, the claims moved, the feed told. */
    async function grantGlobalRole(userId: string, role: string, permissions: string[]) {
      const { db, feed } = t.app.services
      const now = Date.now()
      const changes = await db.kysely.transaction().execute(async (trx) => {
        await trx.insertInto('roles').values({ name: role, description: 'A role of the test', permissions: permissions.join(' '), builtin: 0, created_at: now, updated_at: now }).execute()
        await trx.insertInto('user_roles').values({ user_id: userId, role, created_at: now }).execute()
        return claimsChanged(trx, [userId])
      })
      feed.applyLocally(changes)
    }

    test('the snapshot rule: after an operator grants a role, the next call refreshes once and repeats, and can() says yes', async () => {
      const { client, email, userId } = await person('snapshot')
      assert.equal(client.can('reports:export'), false)
      assert.deepEqual(client.claims()?.roles, [])
      const older = await client.getAccessToken()

      await grantGlobalRole(userId, `reporter-${engine}`, ['reports:*'])
      // The token the client holds still says what it said at its issue, and the service now refuses it...
      assert.equal(client.can('reports:export'), false, 'a snapshot, until the next call')
      const refused = await t.get('/auth/me', older!)
      assert.equal(refused.statusCode, 401)
      assert.equal(refused.json().error.code, 'TOKEN_EXPIRED')

      // ...so the next call of the client refreshes once, repeats, and succeeds.
      const from = sent.length
      assert.equal((await client.me()).email, email)
      assert.deepEqual(sent.slice(from).map((p) => p.slice(t.base.length)), ['/auth/me', '/auth/refresh', '/auth/me'])
      assert.equal(client.can('reports:export'), true)
      assert.equal(client.can('reports:read'), true)
      assert.equal(client.can('console:read'), false)
      assert.deepEqual(client.claims()?.roles, [`reporter-${engine}`])
      assert.deepEqual(client.claims()?.permissions, ['reports:*'])
      assert.notEqual(await client.getAccessToken(), older)
    })

    test('the snapshot rule through the admin API: a new role and app_metadata reach the client at its next call, by one refresh', async () => {
      const { client, userId } = await person('admin-api')
      const { key } = await t.app.services.apiKeys.create({ name: `operator ${engine}`, scopes: ['roles:write', 'users:write'], expiresAt: null })
      const role = `auditor-${engine}`
      assert.equal((await t.call('POST', '/admin/roles', key, { name: role, permissions: ['audit:read', 'exports:*'] })).statusCode, 201)
      assert.equal((await t.call('PUT', `/admin/users/${userId}/roles`, key, { roles: [role] })).statusCode, 200)
      assert.equal((await t.call('PATCH', `/admin/users/${userId}`, key, { app_metadata: { plan: 'pro' } })).statusCode, 200)
      assert.equal(client.can('exports:csv'), false, 'a snapshot, until the next call')

      const from = sent.length
      await client.listOrganizations()
      assert.equal(refreshes(from), 1)
      assert.equal(client.can('exports:csv'), true)
      assert.equal(client.can('audit:read'), true)
      assert.equal(client.can('audit:write'), false)
      assert.deepEqual(client.claims()?.roles, [role])
      assert.deepEqual(client.claims()?.app_metadata, { plan: 'pro' })

      // Taken away the same way.
      assert.equal((await t.call('PUT', `/admin/users/${userId}/roles`, key, { roles: [] })).statusCode, 200)
      await client.me()
      assert.equal(client.can('exports:csv'), false)
      assert.deepEqual(client.claims()?.roles, [])
    })

    test('switchOrganization to an organisation the user is not in: FORBIDDEN, and the session carries on as it was', async () => {
      const ended: string[] = []
      const { client, email } = await person('stranger', { onSessionEnd: ({ reason }) => ended.push(reason) })
      const refused = await failure(client.switchOrganization(randomUUID()))
      assert.equal(refused.code, 'FORBIDDEN')
      assert.equal(refused.status, 403)
      assert.equal((await client.me()).email, email)
      assert.equal(client.claims()?.org_id, null)
      assert.deepEqual(ended, [], 'not a session that ended')
      const loginRefused = await failure(new PortcullisClient({ baseUrl }).login({ email, password: PASSWORD, organization_id: randomUUID() }))
      assert.equal(loginRefused.code, 'FORBIDDEN')
    })

    test('every organisation method: create, list, get, rename, invite, accept, switch, members, roles, leave, delete', async () => {
      const owner = await person('owner')
      const organization = await owner.client.createOrganization('Acme Research')
      assert.equal(organization.name, 'Acme Research')
      assert.deepEqual((await owner.client.listOrganizations()).map((o) => [o.id, o.roles]), [[organization.id, ['owner']]])
      assert.equal((await owner.client.getOrganization(organization.id)).name, 'Acme Research')
      assert.equal((await owner.client.updateOrganization(organization.id, { name: 'Acme' })).name, 'Acme')

      // The owner's token has no active organisation yet; switching brings organization:*.
      assert.equal(owner.client.can('watchlists:write'), false)
      await owner.client.switchOrganization(organization.id)
      assert.deepEqual(owner.client.claims()?.org_roles, ['owner'])
      assert.equal(owner.client.claims()?.org_id, organization.id)
      assert.equal(owner.client.can('watchlists:write'), true)
      assert.equal(owner.client.can('members:invite'), true)
      const shared = await owner.client.createWatchlist({ name: 'Team semis', symbols: ['nvda', 'amd'], organization_id: organization.id })

      // The invited person has an account with a confirmed address first.
      const invitee = await person('invitee')
      const invitation = await owner.client.invite(organization.id, { email: invitee.email, roles: ['member'] })
      assert.equal(invitation.email, invitee.email)
      assert.deepEqual(invitation.roles, ['member'])
      assert.deepEqual((await owner.client.listInvitations(organization.id)).map((i) => i.id), [invitation.id])
      const link = new URL(linkFromMail(await t.mail.next(invitee.email)))
      assert.equal(link.pathname, '/accept-invitation')
      const token = link.searchParams.get('token')!

      // Someone else's account cannot use the link; the invitation stays.
      const other = await person('other')
      assert.equal((await failure(other.client.acceptInvitation(token))).code, 'FORBIDDEN')
      const accepted = await invitee.client.acceptInvitation(token)
      assert.deepEqual([accepted.organization.id, accepted.roles], [organization.id, ['member']])
      assert.deepEqual((await invitee.client.listOrganizations()).map((o) => [o.id, o.roles]), [[organization.id, ['member']]])
      assert.deepEqual(await owner.client.listInvitations(organization.id), [], 'spent')
      assert.equal((await failure(invitee.client.acceptInvitation(token))).code, 'NOT_FOUND', 'a link is good once')

      // The member switches to the organisation and sees the shared list; reads, but may not change it.
      assert.equal(invitee.client.can('watchlists:read'), false)
      await invitee.client.switchOrganization(organization.id)
      assert.equal(invitee.client.can('watchlists:read'), true)
      assert.equal(invitee.client.can('watchlists:write'), false)
      const lists = await invitee.client.listWatchlists({ organization_id: organization.id })
      assert.deepEqual(lists.watchlists.map((w) => [w.id, w.name, w.symbols]), [[shared.id, 'Team semis', ['NVDA', 'AMD']]])
      assert.equal((await failure(invitee.client.addWatchlistSymbol(shared.id, 'tsm'))).code, 'FORBIDDEN')
      assert.equal((await failure(other.client.getWatchlist(shared.id))).code, 'NOT_FOUND', 'invisible to others')

      // Members, a page at a time.
      const first = await invitee.client.listMembers(organization.id, { limit: 1 })
      assert.equal(first.members.length, 1)
      assert.ok(first.next_cursor)
      const second = await invitee.client.listMembers(organization.id, { limit: 1, cursor: first.next_cursor! })
      const everyone = [...first.members, ...second.members]
      assert.deepEqual(everyone.map((m) => m.email).sort(), [owner.email, invitee.email].sort())
      assert.deepEqual(everyone.find((m) => m.user_id === invitee.userId)?.roles, ['member'])

      // The owner makes the member an admin: the member's next call refreshes by itself, and can() follows.
      const promoted = await owner.client.updateMember(organization.id, invitee.userId, ['admin'])
      assert.deepEqual(promoted.roles, ['admin'])
      assert.equal(invitee.client.can('watchlists:write'), false, 'the token is a snapshot')
      const from = sent.length
      assert.deepEqual((await invitee.client.addWatchlistSymbol(shared.id, 'tsm')).symbols, ['NVDA', 'AMD', 'TSM'])
      assert.equal(refreshes(from), 1, 'one refresh on TOKEN_EXPIRED, then the call repeated')
      assert.equal(invitee.client.can('watchlists:write'), true)
      assert.deepEqual(invitee.client.claims()?.org_roles, ['admin'])

      // An admin invites and withdraws; a member without members:manage is FORBIDDEN.
      const pending = await invitee.client.invite(organization.id, { email: uniqueEmail('later'), roles: ['member'] })
      await invitee.client.revokeInvitation(organization.id, pending.id)
      assert.deepEqual(await invitee.client.listInvitations(organization.id), [])
      assert.equal((await failure(owner.client.updateMember(organization.id, owner.userId, ['member']))).code, 'LAST_OWNER')
      assert.equal((await failure(other.client.getOrganization(organization.id))).code, 'NOT_FOUND')

      // Leaving the active organisation: the client refreshes at once, so can() no longer answers for it.
      await invitee.client.leaveOrganization(organization.id)
      assert.equal(invitee.client.claims()?.org_id, null)
      assert.equal(invitee.client.can('watchlists:read'), false)
      assert.deepEqual(await invitee.client.listOrganizations(), [])
      assert.equal((await failure(invitee.client.getWatchlist(shared.id))).code, 'NOT_FOUND')

      // The owner removes nobody else, then deletes the organisation.
      await owner.client.deleteOrganization(organization.id)
      assert.deepEqual(await owner.client.listOrganizations(), [])
      assert.equal((await failure(owner.client.getOrganization(organization.id))).code, 'NOT_FOUND')
    })

    test('cookie transport: switchOrganization sends organization_id with the cookie, keeps the new token, and null clears it', async () => {
      const jarSent: string[] = []
      const owner = await person('cookie-owner', { transport: 'cookie', fetch: cookieJarFetch(jarSent) })
      const organization = await owner.client.createOrganization('Household')
      const switched = await owner.client.switchOrganization(organization.id)
      assert.equal(switched.expires_in, 15 * 60)
      assert.equal(await owner.client.getAccessToken(), switched.access_token)
      assert.equal(owner.client.claims()?.org_id, organization.id)
      assert.equal(owner.client.can('anything:at-all'), true, 'organization:* in the active organisation')

      // The session remembers it: a plain refresh (as after a reload) stays in the organisation.
      await owner.client.refresh()
      assert.equal(owner.client.claims()?.org_id, organization.id)
      await owner.client.switchOrganization(null)
      assert.equal(owner.client.claims()?.org_id, null)
      await owner.client.refresh()
      assert.equal(owner.client.claims()?.org_id, null)
      assert.equal(owner.client.can('anything:at-all'), false)
    })

    test('login with organization_id starts the session in it; updateMe sets user_metadata, which no token carries', async () => {
      const owner = await person('login-org')
      const organization = await owner.client.createOrganization('Login Org')
      const client = new PortcullisClient({ baseUrl })
      await client.login({ email: owner.email, password: PASSWORD, organization_id: organization.id })
      assert.equal(client.claims()?.org_id, organization.id)
      assert.deepEqual(client.claims()?.org_roles, ['owner'])

      const me = await client.updateMe({ user_metadata: { theme: 'dark' } })
      assert.deepEqual(me.user_metadata, { theme: 'dark' })
      assert.equal(JSON.stringify(client.claims()).includes('dark'), false)
      await client.refresh()
      const token = (await client.getAccessToken())!
      assert.equal(Buffer.from(token.split('.')[1]!, 'base64url').toString().includes('theme'), false, 'never in a token')
    })
  })
}

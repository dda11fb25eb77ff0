import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { CLI_CONTEXT } from '../../src/audit/events.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, headingOf, OpBrowser, type Page } from '../helpers/op-browser.ts'
import { oathtool } from '../helpers/totp.ts'

/**
 * Three areas of the operators' console (docs/console.md): audit events, organisations, roles. Each
 * page shows what the services hold; each change goes through the admin services and is audited as
 * the operator (`actor: user:{id}`); a destructive one asks first and does nothing until confirmed;
 * a viewer reads every page, sees no change form, and is refused (403) a POST; input that cannot be
 * used answers a page saying what is wrong. The operator and the viewer sign in as in
 * test/integration/console.test.ts (a TOTP factor, the role, the provider's pages).
 */

type User = Awaited<ReturnType<typeof registerVerifyLogin>>
type Signed = { browser: OpBrowser; user: User }

const suffix = () => randomBytes(3).toString('hex')
/** The forms of a page that change something: every form but the sign-out, and GET filters. */
const changeForms = (page: Page) => formsOf(page).filter((form) => !form.action.endsWith('/sign-out') && !new URL(form.action).pathname.endsWith('/events'))

for (const engine of ENGINES) {
  describe(`the console's events, organisations and roles on ${engine}`, () => {
    let t: TestApp
    let origin: string
    let operator: Signed
    let viewer: Signed
    before(async () => {
      const port = await freePort()
      origin = `http://localhost:${port}`
      t = await startTestApp(engine, { env: { PUBLIC_URL: origin } })
      await t.app.listen({ port, host: '127.0.0.1' })
      operator = await signIn(await person('operator'))
      viewer = await signIn(await person('viewer'))
    })
    after(async () => {
      await t?.close()
    })

    /** A user with a confirmed TOTP factor and, when given, a global role (as console.test.ts makes them). */
    async function person(role?: 'operator' | 'viewer'): Promise<User & { secret: string }> {
      const user = await registerVerifyLogin(t)
      const started = (await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)).json().data as { factor_id: string; secret: string }
      const confirmed = await t.post(`/auth/mfa/totp/${started.factor_id}/confirm`, { code: oathtool(started.secret, t.clock.now()) }, user.access_token)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      t.clock.advance(30)
      if (role) await t.app.services.roles.setUserRoles(user.userId, [role], CLI_CONTEXT)
      return { ...user, secret: started.secret }
    }

    /** The whole sign-in as a browser: the console sends it to the provider, password, code, and back. */
    async function signIn(user: User & { secret: string }): Promise<Signed> {
      const browser = new OpBrowser(origin)
      let page = await browser.go(`${origin}/console/users`)
      page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      page = await browser.submit(formOf(page, { actionEndsWith: '/mfa' }), { code: oathtool(user.secret, t.clock.now()) })
      t.clock.advance(30)
      assert.equal(page.status, 200, page.body.slice(0, 500))
      return { browser, user }
    }

    const events = (query: Parameters<TestApp['app']['services']['admin']['events']>[0]) => t.app.services.admin.events(query).then((page) => page.events)
    const rowsOf = (page: Page) => [...page.body.matchAll(/<tr><td>/g)].length

    // ---- Audit events ----

    test('events: newest first, filtered by address, id, type and days, 50 a page with a next page; each row links its user', async () => {
      const target = await registerVerifyLogin(t)
      t.clock.advance(1)
      // 52 role changes: more than a page of one type for one user.
      for (let i = 0; i < 52; i++) await t.app.services.roles.setUserRoles(target.userId, i % 2 === 0 ? ['viewer'] : [], CLI_CONTEXT)
      const day = (await events({ user_id: target.userId, limit: 1 }))[0]!.at.slice(0, 10)
      const next = new Date(Date.parse(day) + 86_400_000).toISOString().slice(0, 10)
      const previous = new Date(Date.parse(day) - 86_400_000).toISOString().slice(0, 10)

      const byAddress = await operator.browser.go(`${origin}/console/events?${new URLSearchParams({ user: target.email.toUpperCase(), type: 'login.succeeded' })}`)
      assert.equal(byAddress.status, 200, byAddress.body.slice(0, 800))
      assert.equal(rowsOf(byAddress), 1, 'the one sign-in of the user')
      assert.match(byAddress.body, new RegExp(`<a href="/console/users/${target.userId}"><code>${target.userId}</code></a>`))
      assert.match(byAddress.body, /<td>login\.succeeded<\/td>/)
      assert.match(byAddress.body, /<option value="login\.succeeded" selected>/)

      const first = await operator.browser.go(`${origin}/console/events?${new URLSearchParams({ user: target.userId, type: 'user.roles_changed', since: day, until: day })}`)
      assert.equal(first.status, 200)
      assert.equal(rowsOf(first), 50)
      assert.doesNotMatch(first.body, /<td>login\.succeeded<\/td>/)
      assert.match(first.body, /<td>cli<\/td>/, 'the actor of each change')
      const nextLink = /<a href="([^"]+)">Next page<\/a>/.exec(first.body)?.[1]?.replace(/&amp;/g, '&')
      assert.ok(nextLink, 'a next page')
      const second = await operator.browser.go(`${origin}${nextLink}`)
      assert.equal(rowsOf(second), 2)
      assert.doesNotMatch(second.body, /Next page/)

      // The user's whole trail, newest first: 50 role changes, then the other two, then what registering and signing in recorded a second earlier.
      const whole = await operator.browser.go(`${origin}/console/events?${new URLSearchParams({ user: target.userId })}`)
      const rest = await operator.browser.go(`${origin}${/<a href="([^"]+)">Next page<\/a>/.exec(whole.body)![1]!.replace(/&amp;/g, '&')}`)
      const types = [...rest.body.matchAll(/<tr><td>[^<]*<\/td><td>([^<]+)<\/td>/g)].map((match) => match[1])
      assert.deepEqual(types.slice(0, 2), ['user.roles_changed', 'user.roles_changed'], types.join(' '))
      assert.ok(types.length > 2 && !types.slice(2).includes('user.roles_changed'), types.join(' '))
      assert.ok(types.includes('account.registered') && types.includes('login.succeeded'), types.join(' '))

      const tomorrow = await operator.browser.go(`${origin}/console/events?${new URLSearchParams({ user: target.userId, since: next })}`)
      assert.match(tomorrow.body, /No event matches\./)
      const yesterday = await operator.browser.go(`${origin}/console/events?${new URLSearchParams({ user: target.userId, until: previous })}`)
      assert.match(yesterday.body, /No event matches\./)
    })

    test('events: an operator\'s change shows them as its actor, linked to their page', async () => {
      const target = await registerVerifyLogin(t)
      let page = await operator.browser.go(`${origin}/console/users/${target.userId}`)
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/revoke-sessions' }))
      await operator.browser.submit(formOf(page, { actionEndsWith: '/revoke-sessions' }))
      page = await operator.browser.go(`${origin}/console/events?${new URLSearchParams({ user: target.email, type: 'sessions.revoked_by_operator' })}`)
      assert.equal(rowsOf(page), 1)
      assert.match(page.body, new RegExp(`<a href="/console/users/${operator.user.userId}">user:${operator.user.userId}</a>`))
    })

    test('events: filters that cannot be used answer 400 with what is wrong, and no events', async () => {
      const cases: [Record<string, string>, RegExp][] = [
        [{ user: uniqueEmail('nobody') }, /No account has this address\./],
        [{ user: 'not an address' }, /Give a user id or an address\./],
        [{ type: 'login.stolen' }, /Choose a type from the list\./],
        [{ since: '2024-02-30' }, /Give a day as YYYY-MM-DD\./],
        [{ until: 'yesterday' }, /Give a day as YYYY-MM-DD\./],
        [{ cursor: 'forged.cursor' }, /This page link no longer fits the filters/],
      ]
      for (const [query, message] of cases) {
        const page = await operator.browser.go(`${origin}/console/events?${new URLSearchParams(query)}`)
        assert.equal(page.status, 400, JSON.stringify(query))
        assert.match(page.body, message, JSON.stringify(query))
        assert.equal(rowsOf(page), 0)
        assert.equal(headingOf(page), 'Audit events')
      }
    })

    // ---- Organisations ----

    test('organisations: the list shows each with its member count, and its page its members and their roles', async () => {
      const owner = await registerVerifyLogin(t)
      const member = await registerVerifyLogin(t)
      const name = `Acme ${suffix()}`
      const organization = await t.app.services.organizations.createByOperator(owner.userId, name, CLI_CONTEXT)
      await t.app.services.organizations.change((trx, changes) =>
        t.app.services.organizations.addMember(trx, changes, organization.id, { id: member.userId, email: member.email }, ['member'], CLI_CONTEXT))

      const list = await operator.browser.go(`${origin}/console/organizations`)
      assert.equal(list.status, 200)
      assert.match(list.body, new RegExp(`<tr><td><a href="/console/organizations/${organization.id}">${name}</a></td><td>2</td>`))

      const page = await operator.browser.go(`${origin}/console/organizations/${organization.id}`)
      assert.equal(page.status, 200)
      assert.equal(headingOf(page), name)
      assert.match(page.body, new RegExp(`<a href="/console/users/${owner.userId}">${owner.email}</a></td><td>Test User</td><td>owner</td>`))
      assert.match(page.body, new RegExp(`<a href="/console/users/${member.userId}">${member.email}</a></td><td>Test User</td><td>member</td>`))
      assert.match(page.body, /<dt>Members<\/dt><dd>2<\/dd>/)
    })

    test('organisations: an operator makes one for an account named by its address; audited as the operator', async () => {
      const owner = await registerVerifyLogin(t)
      const name = `Globex ${suffix()}`
      const list = await operator.browser.go(`${origin}/console/organizations`)
      const page = await operator.browser.submit(formOf(list, { actionEndsWith: '/console/organizations' }), { name, owner: owner.email })
      assert.equal(page.status, 200, page.body.slice(0, 800))
      assert.equal(headingOf(page), name)
      assert.match(page.body, /Saved\./)
      assert.match(page.body, new RegExp(`${owner.email}</a></td><td>Test User</td><td>owner</td>`))
      const [membership] = await t.app.services.organizations.membershipsOf(owner.userId)
      assert.equal(membership?.name, name)
      assert.deepEqual(membership?.roles, ['owner'])
      const [created] = await events({ user_id: owner.userId, type: 'organization.created' })
      assert.equal(created?.actor, `user:${operator.user.userId}`)
      assert.equal(created?.reason, membership?.id)
    })

    test('organisations: a form that cannot be used is shown again with what is wrong (400), and an unknown id is a 404 page', async () => {
      const owner = await registerVerifyLogin(t)
      const unverified = uniqueEmail('unverified')
      assert.equal((await t.post('/auth/register', { email: unverified, password: PASSWORD, full_name: 'Not Yet' })).statusCode, 201)
      const cases: [Record<string, string>, RegExp][] = [
        [{ name: '   ', owner: owner.email }, /Give the organisation a name\./],
        [{ name: 'x'.repeat(101), owner: owner.email }, /The name must be at most 100 characters/],
        [{ name: 'Initech', owner: uniqueEmail('nobody') }, /No account has this address\./],
        [{ name: 'Initech', owner: crypto.randomUUID() }, /No account has this id\./],
        [{ name: 'Initech', owner: unverified }, /The owner must be an active account with a confirmed address\./],
      ]
      for (const [typed, message] of cases) {
        const page = await operator.browser.go(`${origin}/console/organizations`, { method: 'POST', form: typed })
        assert.equal(page.status, 400, JSON.stringify(typed))
        assert.match(page.body, message, JSON.stringify(typed))
        assert.equal(formOf(page, { actionEndsWith: '/console/organizations' }).action, `${origin}/console/organizations`, 'the form again')
        assert.match(page.body, new RegExp(`name="owner" type="text" autocomplete="off" value="${typed.owner}"`), 'what was typed kept')
      }
      assert.deepEqual(await t.app.services.organizations.membershipsOf(owner.userId), [], 'nothing made')
      const missing = await operator.browser.go(`${origin}/console/organizations/${crypto.randomUUID()}`)
      assert.equal(missing.status, 404)
      assert.match(missing.body, /No organisation has this id/)
      assert.equal((await operator.browser.go(`${origin}/console/organizations/not-an-id`)).status, 404)
    })

    // ---- Roles ----

    test('roles: the catalogue shows each role\'s description, permissions and whether it is built in; a role\'s page shows it', async () => {
      const name = `auditor-${suffix()}`
      await t.app.services.roles.create({ name, description: 'Reads the trail', permissions: ['audit:read', 'users:read'] }, CLI_CONTEXT)
      const list = await operator.browser.go(`${origin}/console/roles`)
      assert.equal(list.status, 200)
      assert.match(list.body, /<tr><td><a href="\/console\/roles\/operator">operator<\/a><\/td><td>[^<]*<\/td><td><code>[^<]*console:read console:write[^<]*<\/code><\/td><td>yes<\/td><\/tr>/)
      assert.match(list.body, new RegExp(`<tr><td><a href="/console/roles/${name}">${name}</a></td><td>Reads the trail</td><td><code>audit:read users:read</code></td><td>no</td></tr>`))
      const page = await operator.browser.go(`${origin}/console/roles/${name}`)
      assert.equal(headingOf(page), `Role ${name}`)
      assert.match(page.body, /<dt>Built-in<\/dt><dd>no<\/dd>/)
      assert.match(page.body, /<textarea id="permissions" name="permissions">audit:read\nusers:read<\/textarea>/)
      const builtin = await operator.browser.go(`${origin}/console/roles/operator`)
      assert.match(builtin.body, /A built-in role can be changed, not removed\./)
      assert.equal(formsOf(builtin).filter((form) => form.action.endsWith('/remove')).length, 0)
    })

    test('roles: an operator creates a role and edits its description and permissions; each audited as the operator', async () => {
      const name = `support-${suffix()}`
      const list = await operator.browser.go(`${origin}/console/roles`)
      let page = await operator.browser.submit(formOf(list, { actionEndsWith: '/console/roles' }), { name, description: 'Answers tickets', permissions: 'users:read\nusers:write' })
      assert.equal(page.status, 200, page.body.slice(0, 800))
      assert.equal(headingOf(page), `Role ${name}`)
      assert.match(page.body, /Saved\./)
      assert.deepEqual((await t.app.services.roles.get(name)).permissions, ['users:read', 'users:write'])
      page = await operator.browser.submit(formOf(page, { actionEndsWith: `/roles/${name}` }), { description: 'Reads users only', permissions: 'users:read, audit:read' })
      assert.equal(page.status, 200)
      const role = await t.app.services.roles.get(name)
      assert.equal(role.description, 'Reads users only')
      assert.deepEqual(role.permissions, ['audit:read', 'users:read'])
      for (const type of ['role.created', 'role.updated'] as const) {
        const event = (await events({ type })).find((candidate) => candidate.reason === name)
        assert.equal(event?.actor, `user:${operator.user.userId}`, type)
      }
    })

    test('roles: removal asks first; a role someone holds is refused (409) with the offer to remove it anyway, which takes it from them', async () => {
      const unused = `temp-${suffix()}`
      await t.app.services.roles.create({ name: unused, permissions: ['reports:read'] }, CLI_CONTEXT)
      let page = await operator.browser.go(`${origin}/console/roles/${unused}`)
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
      assert.equal(page.status, 200)
      assert.equal(headingOf(page), `Remove the role ${unused}?`)
      assert.equal((await t.app.services.roles.get(unused)).name, unused, 'asking removes nothing')
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
      assert.equal(page.status, 200)
      assert.equal(headingOf(page), 'Roles')
      assert.match(page.body, /Removed\./)
      await assert.rejects(t.app.services.roles.get(unused), { code: 'NOT_FOUND' })
      assert.equal((await events({ type: 'role.removed' })).find((event) => event.reason === unused)?.actor, `user:${operator.user.userId}`)

      const held = `held-${suffix()}`
      await t.app.services.roles.create({ name: held, permissions: ['reports:read'] }, CLI_CONTEXT)
      const holder = await registerVerifyLogin(t)
      await t.app.services.roles.setUserRoles(holder.userId, [held], CLI_CONTEXT)
      page = await operator.browser.go(`${origin}/console/roles/${held}`)
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
      assert.equal(page.status, 409)
      assert.match(page.body, /The role is in use: held by 1 user\(s\) and 0 membership\(s\)\./)
      assert.match(page.body, /Remove anyway \(force\)/)
      assert.deepEqual(await t.app.services.roles.rolesOf(holder.userId), [held], 'refused: nothing changed')
      const force = formOf(page, { actionEndsWith: '/remove' })
      assert.deepEqual(force.fields, { force: 'yes', confirm: 'yes' })
      page = await operator.browser.submit(force)
      assert.equal(page.status, 200)
      assert.match(page.body, /Removed\./)
      assert.deepEqual(await t.app.services.roles.rolesOf(holder.userId), [])
      await assert.rejects(t.app.services.roles.get(held), { code: 'NOT_FOUND' })
      assert.equal((await events({ type: 'role.removed' })).find((event) => event.reason === held)?.actor, `user:${operator.user.userId}`)
    })

    test('roles: a form that cannot be used is shown again with what is wrong (400); a built-in role is not removed; an unknown one is a 404 page', async () => {
      const taken = `taken-${suffix()}`
      await t.app.services.roles.create({ name: taken, permissions: [] }, CLI_CONTEXT)
      const cases: [Record<string, string>, RegExp][] = [
        [{ name: 'Bad Name', permissions: 'users:read' }, /A role&#39;s name is 2 to 40 lower-case letters/],
        [{ name: taken, permissions: 'users:read' }, /The name is the name of a role already\./],
        [{ name: `fine-${suffix()}`, permissions: 'users:read\nnot a permission' }, /“not” is not a permission: write each as resource:action/],
        [{ name: `fine-${suffix()}`, description: 'x'.repeat(201), permissions: '' }, /The description must be at most 200 characters/],
      ]
      for (const [typed, message] of cases) {
        const page = await operator.browser.go(`${origin}/console/roles`, { method: 'POST', form: typed })
        assert.equal(page.status, 400, JSON.stringify(typed))
        assert.match(page.body, message, JSON.stringify(typed))
        assert.match(page.body, new RegExp(`<textarea id="permissions" name="permissions"[^>]*>${typed.permissions}</textarea>`), 'what was typed kept')
      }
      const edit = await operator.browser.go(`${origin}/console/roles/${taken}`, { method: 'POST', form: { permissions: 'users:READ' } })
      assert.equal(edit.status, 400)
      assert.match(edit.body, /“users:READ” is not a permission/)
      assert.deepEqual((await t.app.services.roles.get(taken)).permissions, [], 'nothing changed')

      const builtin = await operator.browser.go(`${origin}/console/roles/viewer/remove`, { method: 'POST', form: { confirm: 'yes', force: 'yes' } })
      assert.equal(builtin.status, 400)
      assert.match(builtin.body, /A built-in role can be changed, not removed\./)
      assert.equal((await t.app.services.roles.get('viewer')).builtin, true)
      const unknown = await operator.browser.go(`${origin}/console/roles/no-such-role`)
      assert.equal(unknown.status, 404)
      assert.match(unknown.body, /No role has this name/)
    })

    // ---- A viewer ----

    test('a viewer reads the events, organisations and roles pages without a change form, and their POSTs are 403 with nothing changed', async () => {
      const owner = await registerVerifyLogin(t)
      const organization = await t.app.services.organizations.createByOperator(owner.userId, `Viewed ${suffix()}`, CLI_CONTEXT)
      const name = `viewed-${suffix()}`
      await t.app.services.roles.create({ name, permissions: ['reports:read'] }, CLI_CONTEXT)
      for (const path of ['/console/events', '/console/organizations', `/console/organizations/${organization.id}`, '/console/roles', `/console/roles/${name}`]) {
        const page = await viewer.browser.go(`${origin}${path}`)
        assert.equal(page.status, 200, path)
        assert.match(page.body, /reading only/, path)
        assert.deepEqual(changeForms(page), [], path)
      }
      const roles = await viewer.browser.go(`${origin}/console/roles`)
      assert.match(roles.body, new RegExp(`<a href="/console/roles/${name}">${name}</a>`), 'the data is shown')

      const posts: [string, Record<string, string>][] = [
        ['/console/organizations', { name: 'By a viewer', owner: owner.email }],
        ['/console/roles', { name: `viewer-made-${suffix()}`, permissions: '' }],
        [`/console/roles/${name}`, { description: 'changed', permissions: '' }],
        [`/console/roles/${name}/remove`, { confirm: 'yes', force: 'yes' }],
      ]
      for (const [path, form] of posts) assert.equal((await viewer.browser.request(`${origin}${path}`, { method: 'POST', form })).status, 403, path)
      assert.equal((await t.app.services.organizations.membershipsOf(owner.userId)).length, 1)
      const role = await t.app.services.roles.get(name)
      assert.equal(role.description, null)
      assert.deepEqual(role.permissions, ['reports:read'])
    })
  })
}

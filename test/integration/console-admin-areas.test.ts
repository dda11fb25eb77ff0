import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { iso } from '../../src/console/views.ts'
import { AppError } from '../../src/errors.ts'
import { escapeHtml } from '../../src/html.ts'
import { CONSOLE_CLIENT_ID } from '../../src/provider/clients.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, headingOf, OpBrowser, type Page } from '../helpers/op-browser.ts'
import { oathtool } from '../helpers/totp.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

/**
 * The console's admin areas (docs/console.md): OAuth clients, resources, webhooks and API keys, over
 * HTTP as a browser uses them (test/helpers/op-browser.ts), signed in as test/integration/console.test.ts
 * does it. For each area: its pages show the data, each change goes through the service and is
 * audited as `user:{id}`, a destructive change is asked first and done only when confirmed, a secret is
 * shown on the page answering its making and on no page after, a viewer sees no change form and is
 * refused (403) when posting one anyway, and bad input is answered with a page naming the problem.
 */

type User = Awaited<ReturnType<typeof registerVerifyLogin>>
type Person = User & { secret: string | null }
type Session = { browser: OpBrowser; user: Person }

const CLI = { ip: null, userAgent: null, requestId: null, actor: 'cli' }
// A failed delivery is tried again an hour later (of the test clock, which these tests move by
// minutes at most): a delivery's attempts change only when a test sends it again.
const QUEUE = { pollMs: 50, retryBaseMs: 3_600_000 }

/** Polls until `check` holds (the delivery queue works beside the test), or fails naming `what`. */
async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const started = Date.now(); !(await check()); ) {
    if (Date.now() - started > 5000) assert.fail(`not within 5 s: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** The secret a page shows (in its `secret` paragraph). */
function secretOn(page: Page): string {
  const match = /<p class="secret">([^<]+)<\/p>/.exec(page.body)
  assert.ok(match, `no secret on ${page.url}:\n${page.body.slice(0, 1500)}`)
  return match[1]!
}

/** The forms of a page other than the header's sign-out. */
const changeForms = (page: Page) => formsOf(page).filter((form) => !new URL(form.action).pathname.endsWith('/sign-out'))

for (const engine of ENGINES) {
  describe(`the console's clients, resources, webhooks and API keys on ${engine}`, () => {
    let t: TestApp
    let origin: string
    let operator: Session
    let viewer: Session
    const receivers: WebhookReceiver[] = []

    /** A user with a confirmed TOTP factor and, when given, a global role (as console.test.ts). */
    async function person(role?: 'operator' | 'viewer'): Promise<Person> {
      const user = await registerVerifyLogin(t)
      const started = (await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)).json().data as { factor_id: string; secret: string }
      const confirmed = await t.post(`/auth/mfa/totp/${started.factor_id}/confirm`, { code: oathtool(started.secret, t.clock.now()) }, user.access_token)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      t.clock.advance(30)
      if (role) await t.app.services.roles.setUserRoles(user.userId, [role], CLI)
      return { ...user, secret: started.secret }
    }

    /** The whole sign-in as a browser: the console sends it to the provider, password, code, and back. */
    async function signIn(user: Person): Promise<Session> {
      const browser = new OpBrowser(origin)
      let page = await browser.go(`${origin}/console/users`)
      page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      page = await browser.submit(formOf(page, { actionEndsWith: '/mfa' }), { code: oathtool(user.secret!, t.clock.now()) })
      t.clock.advance(30)
      assert.equal(page.status, 200, page.body.slice(0, 500))
      return { browser, user }
    }

    const open = async (session: Session, path: string) => {
      const page = await session.browser.go(`${origin}/console${path}`)
      assert.equal(page.status, 200, `${path}: ${page.body.slice(0, 1500)}`)
      return page
    }

    /** The actor of the audit event of this type about this object (its id in `reason`). */
    async function actorOf(type: string, reason: string): Promise<string | null | undefined> {
      const { events } = await t.app.services.admin.events({ type, limit: 100 })
      return events.find((event) => event.reason === reason)?.actor
    }

    /** The pages a secret could leak onto after it was shown: none of them may hold it. */
    async function assertNowhere(secret: string, paths: string[]): Promise<void> {
      for (const path of paths) {
        const page = await open(operator, path)
        assert.ok(!page.body.includes(secret), `the secret is on ${path}`)
      }
    }

    /** A viewer's attempt: refused with 403, whatever it posts. */
    async function assertViewerRefused(path: string, form: Record<string, string>): Promise<void> {
      const refused = await viewer.browser.request(`${origin}/console${path}`, { method: 'POST', form })
      assert.equal(refused.status, 403, `${path}: ${refused.body.slice(0, 300)}`)
      assert.match(refused.body, /Your role lets you read the console, not change anything\./)
    }

    async function receiver(status: number): Promise<WebhookReceiver> {
      const started = await startWebhookReceiver()
      started.answer = () => status
      receivers.push(started)
      return started
    }

    before(async () => {
      const port = await freePort()
      origin = `http://localhost:${port}`
      t = await startTestApp(engine, { env: { PUBLIC_URL: origin }, overrides: { webhooks: { queue: QUEUE, timeoutMs: 2000 } } })
      await t.app.listen({ port, host: '127.0.0.1' })
      operator = await signIn(await person('operator'))
      viewer = await signIn(await person('viewer'))
    })
    after(async () => {
      for (const hook of await t.app.services.webhooks.list()) await t.app.services.webhooks.remove(hook.id)
      for (const started of receivers) await started.close()
      await t?.close()
    })

    describe('OAuth clients', () => {
      test('the list shows every client (the built-in one too) and a client\'s page its whole registration', async () => {
        const { client } = await t.app.services.clients.create({ name: 'Ledger app', type: 'confidential', redirect_uris: ['https://ledger.example.com/cb'], first_party: true, scopes: ['openid', 'email'] }, CLI)
        const list = await open(operator, '/clients')
        assert.match(list.body, new RegExp(`<a href="/console/clients/${client.client_id}">Ledger app</a>`))
        assert.match(list.body, new RegExp(`<code>${client.client_id}</code></td><td>confidential</td><td>yes</td><td>no</td><td>${iso(client.created_at)}</td><td>—</td>`))
        assert.match(list.body, /Portcullis console<\/a> <span class="muted">\(built-in\)<\/span>/)
        const page = await open(operator, `/clients/${client.client_id}`)
        assert.equal(headingOf(page), 'Ledger app')
        assert.match(page.body, /<dt>Redirect URIs<\/dt><dd><code>https:\/\/ledger\.example\.com\/cb<\/code><\/dd>/)
        assert.match(page.body, /<dt>Scopes<\/dt><dd>openid email<\/dd>/)
        assert.match(page.body, /<dt>Grant types<\/dt><dd><code>authorization_code<\/code><br><code>refresh_token<\/code><\/dd>/)
        assert.match(page.body, /<dt>Token endpoint authentication<\/dt><dd>client_secret_basic<\/dd>/)
        assert.match(page.body, /<dt>PKCE required<\/dt><dd>yes<\/dd>/)
      })

      test('an operator registers a confidential client; its secret is on the answering page only, and it is audited as the operator', async () => {
        const list = await open(operator, '/clients')
        const page = await operator.browser.submit(formOf(list, { actionEndsWith: '/console/clients' }), {
          name: 'Billing', type: 'confidential', redirect_uris: 'https://billing.example.com/cb\r\n\r\nhttps://billing.example.com/cb2\r\n',
          first_party: 'on', 'scope:openid': 'on', 'scope:profile': 'on', 'grant:authorization_code': 'on', 'grant:client_credentials': 'on',
        })
        assert.equal(page.status, 200, page.body.slice(0, 1500))
        const secret = secretOn(page)
        const clientId = /<dt>Client id<\/dt><dd><code>([^<]+)<\/code>/.exec(page.body)![1]!
        const client = await t.app.services.clients.get(clientId)
        assert.equal(client.name, 'Billing')
        assert.equal(client.type, 'confidential')
        assert.equal(client.first_party, true)
        assert.deepEqual(client.redirect_uris, ['https://billing.example.com/cb', 'https://billing.example.com/cb2'])
        assert.deepEqual(client.scopes, ['openid', 'profile'])
        assert.deepEqual(client.grant_types, ['authorization_code', 'client_credentials'])
        assert.equal((await t.app.services.clients.findForLibrary(clientId))!.client_secret, secret, 'the secret shown is the client\'s')
        assert.equal(await actorOf('client.created', clientId), `user:${operator.user.userId}`)
        await assertNowhere(secret, ['/clients', `/clients/${clientId}`])
      })

      test('an edit is saved and audited; rotating the secret is asked first, then shows the new one once', async () => {
        const { client, client_secret } = await t.app.services.clients.create({ name: 'Reports', type: 'confidential', redirect_uris: ['https://reports.example.com/cb'] }, CLI)
        const id = client.client_id
        let page = await open(operator, `/clients/${id}`)
        page = await operator.browser.submit(formOf(page, { actionEndsWith: `/clients/${id}` }), {
          name: 'Reports v2', redirect_uris: 'https://reports.example.com/new', 'scope:openid': 'on', 'grant:authorization_code': 'on',
        })
        assert.equal(page.status, 200)
        assert.match(page.body, /<p class="notice" role="status">Saved\.<\/p>/)
        const edited = await t.app.services.clients.get(id)
        assert.equal(edited.name, 'Reports v2')
        assert.deepEqual(edited.redirect_uris, ['https://reports.example.com/new'])
        assert.deepEqual(edited.scopes, ['openid'])
        assert.equal(edited.first_party, false, 'an unticked box is false')
        assert.equal(await actorOf('client.updated', id), `user:${operator.user.userId}`)

        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/rotate-secret' }))
        assert.equal(headingOf(page), 'Rotate the secret of Reports v2?')
        assert.equal((await t.app.services.clients.findForLibrary(id))!.client_secret, client_secret, 'asking changes nothing')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/rotate-secret' }))
        const rotated = secretOn(page)
        assert.notEqual(rotated, client_secret)
        assert.equal((await t.app.services.clients.findForLibrary(id))!.client_secret, rotated)
        assert.equal(await actorOf('client.secret_rotated', id), `user:${operator.user.userId}`)
        await assertNowhere(rotated, ['/clients', `/clients/${id}`])
      })

      test('removing is asked first and done when confirmed; the console\'s own client is not removed or edited, and the page says why', async () => {
        const { client } = await t.app.services.clients.create({ name: 'Old app', type: 'public', redirect_uris: ['https://old.example.com/cb'] }, CLI)
        let page = await open(operator, `/clients/${client.client_id}`)
        assert.equal(formsOf(page).filter((form) => form.action.endsWith('/rotate-secret')).length, 0, 'a public client has no secret to rotate')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
        assert.equal(headingOf(page), 'Remove Old app?')
        assert.equal((await t.app.services.clients.get(client.client_id)).name, 'Old app', 'asking changes nothing')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
        assert.equal(headingOf(page), 'OAuth clients')
        assert.match(page.body, /Removed\./)
        await assert.rejects(t.app.services.clients.get(client.client_id), (error: unknown) => error instanceof AppError && error.code === 'NOT_FOUND')
        assert.equal(await actorOf('client.removed', client.client_id), `user:${operator.user.userId}`)

        const own = await open(operator, `/clients/${CONSOLE_CLIENT_ID}`)
        assert.equal(changeForms(own).length, 0, 'no change offered for the console\'s own client')
        assert.match(own.body, /the console signs operators in through it/)
        for (const [path, form] of [[`/clients/${CONSOLE_CLIENT_ID}/remove`, { confirm: 'yes' }], [`/clients/${CONSOLE_CLIENT_ID}`, { name: 'Renamed' }]] as const) {
          const refused = await operator.browser.request(`${origin}/console${path}`, { method: 'POST', form })
          assert.equal(refused.status, 409)
          assert.match(refused.body, /Portcullis writes it again at every start/)
          assert.match(refused.body, /Nothing was changed\./)
        }
        assert.equal((await t.app.services.clients.get(CONSOLE_CLIENT_ID)).name, 'Portcullis console')
      })

      test('bad input shows the form again with every problem in its words, as typed; nothing is registered', async () => {
        const before = (await t.app.services.clients.list()).length
        const list = await open(operator, '/clients')
        const page = await operator.browser.submit(formOf(list, { actionEndsWith: '/console/clients' }), {
          name: '', type: 'confidential', redirect_uris: 'http://evil.example.com/cb', 'grant:authorization_code': 'on',
        })
        assert.equal(page.status, 400)
        assert.equal(headingOf(page), 'OAuth clients')
        assert.match(page.body, /Name: is required\./)
        assert.match(page.body, /Redirect URIs \(http:\/\/evil\.example\.com\/cb\): must be https/)
        assert.match(page.body, /Scopes: must name at least one scope\./)
        assert.match(page.body, /<textarea id="redirect_uris" name="redirect_uris">http:\/\/evil\.example\.com\/cb<\/textarea>/, 'what was typed is kept')
        assert.equal((await t.app.services.clients.list()).length, before)
      })

      test('a viewer reads the clients and is offered no change; a viewer\'s post is refused (403)', async () => {
        const { client } = await t.app.services.clients.create({ name: 'Viewed app', type: 'confidential', redirect_uris: ['https://viewed.example.com/cb'] }, CLI)
        const list = await open(viewer, '/clients')
        assert.match(list.body, /Viewed app/)
        assert.equal(changeForms(list).length, 0)
        const page = await open(viewer, `/clients/${client.client_id}`)
        assert.match(page.body, /https:\/\/viewed\.example\.com\/cb/)
        assert.equal(changeForms(page).length, 0)
        await assertViewerRefused('/clients', { name: 'Sneaky', type: 'public', redirect_uris: 'https://sneaky.example.com/cb', 'scope:openid': 'on', 'grant:authorization_code': 'on' })
        await assertViewerRefused(`/clients/${client.client_id}/remove`, { confirm: 'yes' })
        await assertViewerRefused(`/clients/${client.client_id}/rotate-secret`, { confirm: 'yes' })
        assert.equal((await t.app.services.clients.get(client.client_id)).name, 'Viewed app')
        assert.ok(!(await t.app.services.clients.list()).some((candidate) => candidate.name === 'Sneaky'))
      })
    })

    describe('resources', () => {
      test('the list and a resource\'s page show it with its scopes', async () => {
        const resource = await t.app.services.resources.create({ uri: 'https://orders.example.com/api', name: 'Orders API', scopes: [{ name: 'orders:read', description: 'Read your orders' }, { name: 'orders:write', description: 'Place orders' }] }, CLI)
        const list = await open(operator, '/resources')
        assert.match(list.body, new RegExp(`<a href="/console/resources/${resource.id}">Orders API</a></td><td><code>https://orders.example.com/api</code></td><td>orders:read orders:write</td>`))
        const page = await open(operator, `/resources/${resource.id}`)
        assert.equal(headingOf(page), 'Orders API')
        assert.match(page.body, /<td><code>orders:read<\/code><\/td><td>Read your orders<\/td>/)
        assert.match(page.body, /<textarea id="scopes" name="scopes">orders:read=Read your orders\norders:write=Place orders<\/textarea>/)
      })

      test('an operator registers a resource (one scope a line), audited as the operator', async () => {
        const list = await open(operator, '/resources')
        const page = await operator.browser.submit(formOf(list, { actionEndsWith: '/console/resources' }), {
          uri: 'https://stock.example.com/v1', name: 'Stock', scopes: 'stock:read = Read the stock levels\r\n\r\nstock:write=Change them',
        })
        assert.equal(page.status, 200, page.body.slice(0, 1500))
        assert.match(page.body, /Saved\./)
        const resource = (await t.app.services.resources.find('https://stock.example.com/v1'))!
        assert.equal(resource.name, 'Stock')
        assert.deepEqual(resource.scopes, [{ name: 'stock:read', description: 'Read the stock levels' }, { name: 'stock:write', description: 'Change them' }])
        assert.equal(headingOf(page), 'Stock')
        assert.equal(await actorOf('resource.created', resource.id), `user:${operator.user.userId}`)
      })

      test('an edit of the name and scopes is saved and audited as the operator', async () => {
        const resource = await t.app.services.resources.create({ uri: 'https://mail.example.com/api', name: 'Mail', scopes: [{ name: 'mail:read', description: 'Read mail' }] }, CLI)
        const page = await operator.browser.submit(formOf(await open(operator, `/resources/${resource.id}`), { actionEndsWith: `/resources/${resource.id}` }), {
          name: 'Mail API', scopes: 'mail:send=Send mail for you',
        })
        assert.match(page.body, /Saved\./)
        const edited = await t.app.services.resources.get(resource.id)
        assert.equal(edited.name, 'Mail API')
        assert.equal(edited.uri, 'https://mail.example.com/api')
        assert.deepEqual(edited.scopes, [{ name: 'mail:send', description: 'Send mail for you' }])
        assert.equal(await actorOf('resource.updated', resource.id), `user:${operator.user.userId}`)
      })

      test('removing is asked first and done when confirmed, audited as the operator', async () => {
        const resource = await t.app.services.resources.create({ uri: 'https://gone.example.com/api', name: 'Gone soon', scopes: [] }, CLI)
        let page = await operator.browser.submit(formOf(await open(operator, `/resources/${resource.id}`), { actionEndsWith: '/remove' }))
        assert.equal(headingOf(page), 'Remove Gone soon?')
        assert.equal((await t.app.services.resources.get(resource.id)).name, 'Gone soon', 'asking changes nothing')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
        assert.match(page.body, /Removed\./)
        assert.equal(await t.app.services.resources.find('https://gone.example.com/api'), null)
        assert.equal(await actorOf('resource.removed', resource.id), `user:${operator.user.userId}`)
      })

      test('bad input shows the form again naming each problem by its line; nothing is registered', async () => {
        const before = (await t.app.services.resources.list()).length
        const form = formOf(await open(operator, '/resources'), { actionEndsWith: '/console/resources' })
        let page = await operator.browser.submit(form, { uri: 'https://bad.example.com', name: 'Bad', scopes: 'bad:read=Fine\nno equals sign here' })
        assert.equal(page.status, 400)
        assert.match(page.body, /Scopes, line 2: write it as name=description\./)
        page = await operator.browser.submit(form, { uri: 'ftp://bad.example.com', name: 'Bad', scopes: 'bad:read=Fine\n\nopenid=Sign in' })
        assert.equal(page.status, 400)
        assert.match(page.body, /URI: must be https:\/\//)
        assert.match(page.body, /Scopes, line 3: the name is an OpenID Connect scope\./)
        assert.match(page.body, /<input id="uri" name="uri" type="text" autocomplete="off" value="ftp:\/\/bad\.example\.com">/)
        assert.equal((await t.app.services.resources.list()).length, before)
      })

      test('a viewer reads the resources and is offered no change; a viewer\'s post is refused (403)', async () => {
        const resource = await t.app.services.resources.create({ uri: 'https://viewed.example.com/api', name: 'Viewed API', scopes: [{ name: 'v:read', description: 'Read' }] }, CLI)
        const list = await open(viewer, '/resources')
        assert.match(list.body, /Viewed API/)
        assert.equal(changeForms(list).length, 0)
        const page = await open(viewer, `/resources/${resource.id}`)
        assert.match(page.body, /<td><code>v:read<\/code><\/td><td>Read<\/td>/)
        assert.equal(changeForms(page).length, 0)
        await assertViewerRefused('/resources', { uri: 'https://sneaky.example.com/api', name: 'Sneaky', scopes: '' })
        await assertViewerRefused(`/resources/${resource.id}/remove`, { confirm: 'yes' })
        assert.equal(await t.app.services.resources.find('https://sneaky.example.com/api'), null)
        assert.equal((await t.app.services.resources.get(resource.id)).name, 'Viewed API')
      })
    })

    describe('webhooks', () => {
      /** An endpoint for user.created at a receiver answering 500, with one failed delivery for each of `users` new accounts. */
      async function failingEndpoint(users: number) {
        const target = await receiver(500)
        const { webhook } = await t.app.services.webhooks.create({ url: target.url, events: ['user.created'], description: 'Failing on purpose' }, CLI)
        for (let i = 0; i < users; i++) {
          await registerVerifyLogin(t)
          t.clock.advance(1)
        }
        const log = () => t.app.services.webhooks.deliveries(webhook.id, { limit: 100 })
        await eventually('every delivery tried once', async () => (await log()).deliveries.filter((delivery) => delivery.last_status === 500).length === users)
        const { deliveries } = await log()
        return { webhook, deliveries, target }
      }

      test('the list shows each endpoint, and its page the deliveries newest first with status, attempts and last error', async () => {
        const { webhook, deliveries } = await failingEndpoint(2)
        const list = await open(operator, '/webhooks')
        assert.match(list.body, new RegExp(`<a href="/console/webhooks/${webhook.id}">${webhook.url}</a></td><td>Failing on purpose</td><td>user.created</td><td>yes</td><td>—</td>`))
        const page = await open(operator, `/webhooks/${webhook.id}`)
        const [newer, older] = deliveries as [typeof deliveries[0], typeof deliveries[0]]
        assert.ok(newer.created_at > older.created_at, 'the service lists newest first')
        const at = (delivery: typeof newer) => page.body.indexOf(`<code>${delivery.webhook_id}</code>`)
        assert.ok(at(newer) > 0 && at(older) > at(newer), 'the newest delivery comes first')
        for (const delivery of deliveries) {
          assert.equal(delivery.last_status, 500)
          assert.ok(delivery.attempts >= 1)
          assert.match(page.body, new RegExp(`<td>user\\.created</td><td><code>${delivery.webhook_id}</code></td><td>waiting: next attempt [^<]+</td><td>${delivery.attempts}</td><td>500</td><td>${escapeHtml(delivery.last_error!)}</td>`))
        }
      })

      test('an operator adds an endpoint; its signing secret is on the answering page only, signs its deliveries, and it is audited as the operator', async () => {
        const target = await receiver(200)
        const list = await open(operator, '/webhooks')
        const page = await operator.browser.submit(formOf(list, { actionEndsWith: '/console/webhooks' }), { url: target.url, description: 'Signed', 'event:user.created': 'on', 'event:user.deleted': 'on' })
        assert.equal(page.status, 200, page.body.slice(0, 1500))
        const secret = secretOn(page)
        assert.match(secret, /^whsec_/)
        const webhook = (await t.app.services.webhooks.list()).find((candidate) => candidate.url === target.url)!
        assert.deepEqual(webhook.events, ['user.created', 'user.deleted'])
        assert.equal(webhook.description, 'Signed')
        assert.equal(await actorOf('webhook.created', webhook.id), `user:${operator.user.userId}`)
        target.secrets = [secret]
        await registerVerifyLogin(t)
        const [delivery] = await target.waitFor(1)
        assert.equal(delivery!.verified, true, 'the secret shown is the one that signs')
        await assertNowhere(secret, ['/webhooks', `/webhooks/${webhook.id}`])
      })

      test('disabling is asked first and done when confirmed (the reason shown); enabling is immediate; both audited as the operator', async () => {
        const target = await receiver(200)
        const { webhook } = await t.app.services.webhooks.create({ url: target.url, events: ['*'] }, CLI)
        let page = await operator.browser.submit(formOf(await open(operator, `/webhooks/${webhook.id}`), { actionEndsWith: '/disable' }))
        assert.equal(headingOf(page), `Disable ${webhook.url}?`)
        assert.equal((await t.app.services.webhooks.get(webhook.id)).enabled, true, 'asking changes nothing')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/disable' }))
        assert.match(page.body, /<dt>Enabled<\/dt><dd>no<\/dd>/)
        assert.match(page.body, /<dt>Disabled because<\/dt><dd>operator: turned off by hand<\/dd>/)
        assert.equal((await t.app.services.webhooks.get(webhook.id)).disabled_reason, 'operator')
        assert.equal(await actorOf('webhook.updated', webhook.id), `user:${operator.user.userId}`)
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/enable' }))
        assert.match(page.body, /<dt>Enabled<\/dt><dd>yes<\/dd>/)
        assert.equal((await t.app.services.webhooks.get(webhook.id)).enabled, true)
        const { events } = await t.app.services.admin.events({ type: 'webhook.updated', limit: 100 })
        assert.equal(events.filter((event) => event.reason === webhook.id && event.actor === `user:${operator.user.userId}`).length, 2)
      })

      test('rotating the signing secret shows the new one once, audited as the operator; it signs from then on', async () => {
        const target = await receiver(200)
        const { webhook, secret: first } = await t.app.services.webhooks.create({ url: target.url, events: ['user.created'] }, CLI)
        const page = await operator.browser.submit(formOf(await open(operator, `/webhooks/${webhook.id}`), { actionEndsWith: '/rotate-secret' }))
        assert.equal(page.status, 200)
        const rotated = secretOn(page)
        assert.notEqual(rotated, first)
        assert.match(page.body, /The previous secret keeps signing beside it for 24 hours\./)
        assert.equal(await actorOf('webhook.secret_rotated', webhook.id), `user:${operator.user.userId}`)
        target.secrets = [rotated]
        await registerVerifyLogin(t)
        const [delivery] = await target.waitFor(1)
        assert.equal(delivery!.verified, true)
        await assertNowhere(rotated, ['/webhooks', `/webhooks/${webhook.id}`])
      })

      test('a delivery is sent again from its endpoint\'s page', async () => {
        const { webhook, deliveries, target } = await failingEndpoint(1)
        const delivery = deliveries[0]!
        const received = target.deliveries.length
        const page = await operator.browser.submit(formOf(await open(operator, `/webhooks/${webhook.id}`), { actionEndsWith: `/deliveries/${delivery.id}/retry` }))
        assert.match(page.body, /The delivery is queued again\./)
        await target.waitFor(received + 1)
        await eventually('the attempt recorded', async () => (await t.app.services.webhooks.deliveries(webhook.id, { limit: 100 })).deliveries[0]!.attempts > delivery.attempts)
        const again = (await t.app.services.webhooks.deliveries(webhook.id, { limit: 100 })).deliveries[0]!
        assert.equal(again.attempts, delivery.attempts + 1)
        assert.equal(target.deliveries.at(-1)!.headers['webhook-id'], delivery.webhook_id, 'the same event, sent again')
        assert.equal(await actorOf('webhook.delivery_retried', `${webhook.id} ${delivery.id}`), `user:${operator.user.userId}`, 'the retry is audited with the operator')
        const gone = await operator.browser.request(`${origin}/console/webhooks/${webhook.id}/deliveries/00000000-0000-4000-8000-000000000000/retry`, { method: 'POST', form: {} })
        assert.equal(gone.status, 404)
        assert.match(gone.body, /There is no such delivery of this endpoint\. Nothing was queued\./)
      })

      test('removing is asked first and done when confirmed, audited as the operator', async () => {
        const { webhook } = await t.app.services.webhooks.create({ url: 'https://hooks.example.com/remove-me', events: ['user.deleted'] }, CLI)
        let page = await operator.browser.submit(formOf(await open(operator, `/webhooks/${webhook.id}`), { actionEndsWith: '/remove' }))
        assert.equal(headingOf(page), 'Remove https://hooks.example.com/remove-me?')
        assert.equal((await t.app.services.webhooks.get(webhook.id)).id, webhook.id, 'asking changes nothing')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/remove' }))
        assert.match(page.body, /Removed\./)
        await assert.rejects(t.app.services.webhooks.get(webhook.id), (error: unknown) => error instanceof AppError && error.code === 'NOT_FOUND')
        assert.equal(await actorOf('webhook.removed', webhook.id), `user:${operator.user.userId}`)
      })

      test('bad input shows the form again with the problems; nothing is added', async () => {
        const before = (await t.app.services.webhooks.list()).length
        const page = await operator.browser.submit(formOf(await open(operator, '/webhooks'), { actionEndsWith: '/console/webhooks' }), { url: 'not a url', description: 'Broken' })
        assert.equal(page.status, 400)
        assert.match(page.body, /URL: must be an http\(s\) URL without credentials or fragment\./)
        assert.match(page.body, /Events: must name at least one event, or \*\./)
        assert.match(page.body, /<input id="url" name="url" type="text" autocomplete="off" value="not a url">/)
        assert.equal((await t.app.services.webhooks.list()).length, before)
      })

      test('a viewer reads the endpoints and their deliveries and is offered no change; a viewer\'s post is refused (403)', async () => {
        const { webhook, deliveries } = await failingEndpoint(1)
        const list = await open(viewer, '/webhooks')
        assert.match(list.body, new RegExp(`<a href="/console/webhooks/${webhook.id}">`))
        assert.equal(changeForms(list).length, 0)
        const page = await open(viewer, `/webhooks/${webhook.id}`)
        assert.match(page.body, new RegExp(`<code>${deliveries[0]!.webhook_id}</code>`))
        assert.equal(changeForms(page).length, 0)
        await assertViewerRefused('/webhooks', { url: 'https://sneaky.example.com/hook', 'event:*': 'on' })
        await assertViewerRefused(`/webhooks/${webhook.id}/rotate-secret`, {})
        await assertViewerRefused(`/webhooks/${webhook.id}/disable`, { confirm: 'yes' })
        await assertViewerRefused(`/webhooks/${webhook.id}/deliveries/${deliveries[0]!.id}/retry`, {})
        assert.equal((await t.app.services.webhooks.get(webhook.id)).enabled, true)
        assert.ok(!(await t.app.services.webhooks.list()).some((candidate) => candidate.url === 'https://sneaky.example.com/hook'))
      })
    })

    describe('API keys', () => {
      test('the list shows each key: id, name, scopes, times, and whether it is revoked', async () => {
        const expiresAt = t.clock.now() + 90 * 86_400_000
        const { summary } = await t.app.services.apiKeys.create({ name: 'CI deploy', scopes: ['users:read', 'audit:read'], expiresAt }, CLI)
        const { summary: old } = await t.app.services.apiKeys.create({ name: 'Old script', scopes: ['roles:read'], expiresAt: null }, CLI)
        await t.app.services.apiKeys.revoke(old.id, CLI)
        const page = await open(operator, '/api-keys')
        const day = (ms: number) => iso(new Date(ms).toISOString())
        assert.match(page.body, new RegExp(`<code>${summary.id}</code></td><td>CI deploy</td><td>users:read audit:read</td><td>${day(summary.created_at)}</td><td>—</td><td>${day(expiresAt)}</td><td>active</td>`))
        assert.match(page.body, new RegExp(`<code>${old.id}</code></td><td>Old script</td><td>roles:read</td><td>[^<]+</td><td>—</td><td>—</td><td>revoked [^<]+</td><td></td>`))
      })

      test('an operator creates a key; it is on the answering page only, works, and is audited as the operator', async () => {
        const page = await operator.browser.submit(formOf(await open(operator, '/api-keys'), { actionEndsWith: '/console/api-keys' }), {
          name: 'Support tool', 'scope:users:read': 'on', 'scope:webhooks:write': 'on', expires: '90d',
        })
        assert.equal(page.status, 200, page.body.slice(0, 1500))
        const key = secretOn(page)
        const principal = await t.app.services.apiKeys.authenticate(key)
        assert.ok(principal, 'the key shown works')
        assert.equal(principal.name, 'Support tool')
        assert.deepEqual(principal.scopes, ['users:read', 'webhooks:write'])
        const summary = (await t.app.services.apiKeys.list()).find((candidate) => candidate.id === principal.id)!
        assert.equal(summary.expires_at, t.clock.now() + 90 * 86_400_000)
        assert.equal(await actorOf('api_key.created', principal.id), `user:${operator.user.userId}`)
        await assertNowhere(key, ['/api-keys'])
      })

      test('revoking is asked first and done when confirmed, audited as the operator', async () => {
        const { key, summary } = await t.app.services.apiKeys.create({ name: 'To revoke', scopes: ['clients:read'], expiresAt: null }, CLI)
        let page = await operator.browser.submit(formOf(await open(operator, '/api-keys'), { actionEndsWith: `/api-keys/${summary.id}/revoke` }))
        assert.equal(headingOf(page), 'Revoke the key To revoke?')
        assert.ok(await t.app.services.apiKeys.authenticate(key), 'asking changes nothing')
        page = await operator.browser.submit(formOf(page, { actionEndsWith: '/revoke' }))
        assert.match(page.body, /Revoked\./)
        assert.equal(await t.app.services.apiKeys.authenticate(key), null)
        assert.equal(await actorOf('api_key.revoked', summary.id), `user:${operator.user.userId}`)
        const again = await operator.browser.request(`${origin}/console/api-keys/${summary.id}/revoke`, { method: 'POST', form: { confirm: 'yes' } })
        assert.equal(again.status, 404)
        assert.match(again.body, /it is revoked already/)
      })

      test('bad input shows the form again with every problem; no key is made', async () => {
        const before = (await t.app.services.apiKeys.list()).length
        const page = await operator.browser.submit(formOf(await open(operator, '/api-keys'), { actionEndsWith: '/console/api-keys' }), { name: '  ', expires: 'soon' })
        assert.equal(page.status, 400)
        assert.match(page.body, /Name: is required\./)
        assert.match(page.body, /Scopes: choose at least one\./)
        assert.match(page.body, /Expires after: write a duration such as 30m, 24h or 90d/)
        assert.match(page.body, /value="soon"/)
        assert.equal((await t.app.services.apiKeys.list()).length, before)
      })

      test('a viewer reads the keys and is offered no change; a viewer\'s post is refused (403)', async () => {
        const { key, summary } = await t.app.services.apiKeys.create({ name: 'Viewed key', scopes: ['audit:read'], expiresAt: null }, CLI)
        const page = await open(viewer, '/api-keys')
        assert.match(page.body, new RegExp(`<code>${summary.id}</code></td><td>Viewed key</td>`))
        assert.equal(changeForms(page).length, 0)
        await assertViewerRefused('/api-keys', { name: 'Sneaky', 'scope:users:write': 'on' })
        await assertViewerRefused(`/api-keys/${summary.id}/revoke`, { confirm: 'yes' })
        assert.ok(await t.app.services.apiKeys.authenticate(key))
        assert.ok(!(await t.app.services.apiKeys.list()).some((candidate) => candidate.name === 'Sneaky'))
      })
    })
  })
}

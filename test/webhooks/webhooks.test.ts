import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, afterEach, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { Webhook, WebhookVerificationError } from 'standardwebhooks'
import { AppError } from '../../src/errors.ts'
import type { DeliveryView } from '../../src/webhooks/service.ts'
import { ENGINES, type EngineName } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { tokenFromMail } from '../helpers/mail.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'
import { oathtool } from '../helpers/totp.ts'
import { signedWith, startWebhookReceiver, verifyError, type ReceivedDelivery, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

// Webhooks (docs/webhooks.md) end to end: the service sends to real HTTP receivers on loopback
// (test/helpers/webhook-receiver.ts) that verify every delivery with the `standardwebhooks` library,
// as an application would. Retries are driven by the test clock and `webhooks.flush()`, never by
// sleeping; the queue polls every 50 ms and a first retry comes after about 1 s of that clock.

const PUBLIC_URL = 'http://localhost:4000'
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`
const PARTNER_CB = `${PUBLIC_URL}/partner/cb`
const QUEUE = { pollMs: 50, retryBaseMs: 1000 }
const CHANGED_PASSWORD = 'a changed passphrase for webhooks'
const RESET_PASSWORD = 'a reset passphrase for webhooks'
const PRODUCTION = { NODE_ENV: 'production', TRUST_PROXY: '127.0.0.1', PUBLIC_URL: 'https://auth.example.com', KEY_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64') }
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000'
const FORM = 'application/x-www-form-urlencoded'

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE'
const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined

/** The deliveries of one user's events (of one type, if given), in arrival order. */
const about = (receiver: WebhookReceiver, userId: string, type?: string) =>
  receiver.where((d) => d.payload?.data.user_id === userId && (type === undefined || d.payload.type === type))

/** Each user's sequences in arrival order must rise strictly. */
function assertRising(deliveries: ReceivedDelivery[], label: string): void {
  const sequences = deliveries.map((d) => d.payload!.data.sequence)
  for (let i = 1; i < sequences.length; i++) assert.ok(sequences[i]! > sequences[i - 1]!, `${label}: sequence ${sequences[i]} arrived after ${sequences[i - 1]} (${sequences.join(', ')})`)
}

/**
 * One app with its admin keys, and what a test makes on it (endpoints, receivers), removed after
 * each test so that the next one starts with no endpoint taking its events.
 */
class Harness {
  t!: TestApp
  hooksKey = ''
  usersKey = ''
  auditKey = ''
  private receivers: WebhookReceiver[] = []
  private endpoints: string[] = []

  async start(engine: EngineName, options: Parameters<typeof startTestApp>[1] = {}): Promise<this> {
    this.t = await startTestApp(engine, { ...options, overrides: { webhooks: { queue: QUEUE, timeoutMs: 2000 }, ...options.overrides } })
    const keys = this.t.app.services.apiKeys
    this.hooksKey = (await keys.create({ name: 'webhooks', scopes: ['webhooks:read', 'webhooks:write'], expiresAt: null })).key
    this.usersKey = (await keys.create({ name: 'users', scopes: ['users:write'], expiresAt: null })).key
    this.auditKey = (await keys.create({ name: 'audit', scopes: ['audit:read'], expiresAt: null })).key
    return this
  }

  /** An admin call with the webhooks key, another key, or (null) none. */
  admin(method: Method, path: string, body?: unknown, key: string | null = this.hooksKey) {
    return this.t.call(method, path, key ?? undefined, body)
  }

  async receiver(): Promise<WebhookReceiver> {
    const receiver = await startWebhookReceiver()
    this.receivers.push(receiver)
    return receiver
  }

  /** An endpoint for `receiver` made through the admin API; the receiver verifies with its secret. */
  async endpoint(receiver: WebhookReceiver, events: string[] = ['*']): Promise<{ id: string; secret: string }> {
    const created = await this.admin('POST', '/admin/webhooks', { url: receiver.url, events })
    assert.equal(created.statusCode, 201, created.body)
    const { webhook, secret } = created.json().data as { webhook: { id: string }; secret: string }
    this.endpoints.push(webhook.id)
    receiver.secrets = [secret]
    return { id: webhook.id, secret }
  }

  /** The endpoint's deliveries log (one page). */
  async log(id: string, query = 'limit=100') {
    const response = await this.admin('GET', `/admin/webhooks/${id}/deliveries?${query}`)
    assert.equal(response.statusCode, 200, response.body)
    return response.json().data as { deliveries: DeliveryView[]; next_cursor: string | null }
  }

  /** Every delivery due now tried once more. */
  flush(): Promise<void> {
    return this.t.app.services.webhooks.flush()
  }

  /** Sets the clock to `ms` (forward only), then tries what is due. */
  async at(ms: number): Promise<void> {
    assert.ok(ms >= this.t.clock.ms, 'the clock only moves forward')
    this.t.clock.ms = ms
    await this.flush()
  }

  /** Until the next test: every endpoint removed (with its deliveries) and every receiver closed. */
  async clean(): Promise<void> {
    if (!this.t) return
    for (const receiver of this.receivers) receiver.release(200)
    for (const id of this.endpoints.splice(0)) await this.t.app.services.webhooks.remove(id).catch((error: unknown) => assert.ok(error instanceof AppError && error.code === 'NOT_FOUND'))
    await this.flush()
    for (const receiver of this.receivers.splice(0)) await receiver.close()
  }

  async close(): Promise<void> {
    await this.clean()
    await this.t?.close()
  }
}

for (const engine of ENGINES) {
  describe(`webhooks on ${engine}`, () => {
    const h = new Harness()
    let provider: TestProvider
    before(async () => {
      provider = await startTestProvider({ redirectUris: [CALLBACK] })
      await h.start(engine, {
        env: {
          PUBLIC_URL,
          APP_URL: `${APP}/`,
          CORS_ORIGINS: APP,
          OIDC_PROVIDERS: 'test',
          OIDC_TEST_ISSUER: provider.issuer,
          OIDC_TEST_CLIENT_ID: provider.clientId,
          OIDC_TEST_CLIENT_SECRET: provider.clientSecret,
          OIDC_TEST_LABEL: 'Test ID',
        },
      })
    })
    afterEach(() => h.clean())
    after(async () => {
      await h.close()
      await provider?.close()
    })

    /** The next mail to `to` that carries a one-time token (notices carry none), and the token. */
    const mailedToken = async (to: string): Promise<string> => {
      for (let i = 0; i < 10; i++) {
        const mail = await h.t.mail.next(to)
        try {
          return tokenFromMail(mail)
        } catch {
          // A security notice: read on.
        }
      }
      throw new Error(`no token mailed to ${to}`)
    }
    const login = async (email: string, password: string) => {
      const response = await h.t.post('/auth/login', { email, password })
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data as { access_token: string; refresh_token: string }
    }
    const confirmPage = (token: string) =>
      h.t.app.inject({ method: 'POST', url: '/confirm-email-change', headers: { 'content-type': FORM }, payload: `token=${encodeURIComponent(token)}` })

    /**
     * A grant to a confidential client through the provider's pages, as a browser would go (the
     * cookies carried by hand, like test/integration/query-plans.test.ts): authorize, sign in, consent.
     */
    const grantApp = async (email: string, password: string) => {
      const { client, client_secret } = await h.t.app.services.clients.create({ name: 'Partner app', type: 'confidential', redirect_uris: [PARTNER_CB] } as Parameters<typeof h.t.app.services.clients.create>[0])
      const jar = new Map<string, string>()
      const hop = async (method: 'GET' | 'POST', url: string, form?: Record<string, string>) => {
        const target = new URL(url, PUBLIC_URL)
        const response = await h.t.app.inject({
          method,
          url: `${target.pathname}${target.search}`,
          headers: { cookie: [...jar].map(([name, value]) => `${name}=${value}`).join('; '), 'sec-fetch-site': 'same-origin', ...(form ? { 'content-type': FORM } : {}) },
          ...(form ? { payload: new URLSearchParams(form).toString() } : {}),
        })
        const cookies = response.headers['set-cookie']
        for (const cookie of Array.isArray(cookies) ? cookies : cookies ? [cookies] : []) {
          const [pair] = cookie.split(';')
          const at = pair!.indexOf('=')
          jar.set(pair!.slice(0, at), pair!.slice(at + 1))
        }
        return response
      }
      const verifier = randomBytes(32).toString('base64url')
      const query = new URLSearchParams({
        client_id: client.client_id, response_type: 'code', redirect_uri: PARTNER_CB, scope: 'openid email', prompt: 'consent', state: 's', nonce: 'n',
        code_challenge: createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256',
      })
      let response = await hop('GET', `/oauth/authorize?${query}`)
      const interaction = String(response.headers.location)
      assert.equal((await hop('GET', interaction)).statusCode, 200)
      response = await hop('POST', `${interaction}/login`, { email, password })
      response = await hop('GET', String(response.headers.location))
      response = await hop('POST', `${String(response.headers.location)}/consent`, {})
      response = await hop('GET', String(response.headers.location))
      assert.ok(new URL(String(response.headers.location)).searchParams.get('code'), `a code: ${response.statusCode} ${response.headers.location}`)
      return { clientId: client.client_id, clientSecret: client_secret! }
    }

    test('every event type fires with its payload, signed and verified, in sequence, with no password, token, code or secret in it', async () => {
      const receiver = await h.receiver()
      const hook = await h.endpoint(receiver)
      const t = h.t
      // Everything secret the user's life below handles: none of it may reach a payload.
      const secrets: string[] = [PASSWORD, CHANGED_PASSWORD, RESET_PASSWORD, hook.secret, hook.secret.slice('whsec_'.length), h.hooksKey, h.usersKey]
      const tokens = (data: { access_token: string; refresh_token: string }) => {
        secrets.push(data.access_token, data.refresh_token)
        return data
      }

      // Registration and verification (user.created, user.verified).
      const email = uniqueEmail('life')
      const registered = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Test User' })
      assert.equal(registered.statusCode, 201, registered.body)
      const userId = registered.json().data.user_id as string
      const verifyToken = await mailedToken(email)
      secrets.push(verifyToken)
      assert.equal((await t.post('/auth/verify-email', { token: verifyToken })).statusCode, 200)
      let session = tokens(await login(email, PASSWORD))

      // The name, then the address through the confirm page (user.updated twice).
      assert.equal((await t.call('PATCH', '/auth/me', session.access_token, { full_name: 'Ada Renamed' })).statusCode, 200)
      const newEmail = uniqueEmail('life-moved')
      assert.equal((await t.post('/auth/me/email', { new_email: newEmail, password: PASSWORD }, session.access_token)).statusCode, 202)
      const changeToken = await mailedToken(newEmail)
      secrets.push(changeToken)
      assert.equal((await confirmPage(changeToken)).statusCode, 200)

      // The password: changed, then reset (user.password_changed by change, by reset).
      const changed = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: CHANGED_PASSWORD }, session.access_token)
      assert.equal(changed.statusCode, 200, changed.body)
      assert.equal((await t.post('/auth/forgot-password', { email: newEmail })).statusCode, 202)
      const resetToken = await mailedToken(newEmail)
      secrets.push(resetToken)
      assert.equal((await t.post('/auth/reset-password', { token: resetToken, password: RESET_PASSWORD })).statusCode, 200)
      session = tokens(await login(newEmail, RESET_PASSWORD))

      // An authenticator app, enrolled then removed (user.mfa_enabled, user.mfa_disabled).
      const started = await t.post('/auth/mfa/totp', { name: 'Phone' }, session.access_token)
      assert.equal(started.statusCode, 201, started.body)
      const { factor_id: factorId, secret: totpSecret } = started.json().data as { factor_id: string; secret: string }
      const totpCode = oathtool(totpSecret, t.clock.now())
      const confirmed = await t.post(`/auth/mfa/totp/${factorId}/confirm`, { code: totpCode }, session.access_token)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      secrets.push(totpSecret, ...(confirmed.json().data.recovery_codes as string[]))
      assert.equal((await t.call('DELETE', `/auth/mfa/factors/${factorId}`, session.access_token)).statusCode, 200)

      // Logout-all (session.revoked_all by user), then an operator's disable, enable and revocation.
      assert.equal((await t.post('/auth/logout-all', undefined, session.access_token)).statusCode, 200)
      assert.equal((await h.admin('POST', `/admin/users/${userId}/disable`, { reason: 'suspended' }, h.usersKey)).statusCode, 200)
      assert.equal((await h.admin('POST', `/admin/users/${userId}/enable`, undefined, h.usersKey)).statusCode, 200)
      tokens(await login(newEmail, RESET_PASSWORD))
      assert.equal((await h.admin('POST', `/admin/users/${userId}/revoke-sessions`, undefined, h.usersKey)).statusCode, 200)
      session = tokens(await login(newEmail, RESET_PASSWORD))

      // An identity linked from the provider on loopback, then unlinked.
      const who = { sub: `sub-${randomBytes(4).toString('hex')}`, email: uniqueEmail('life-idp'), email_verified: true, name: 'Ada Elsewhere' }
      provider.addAccount(who)
      const linking = await t.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, session.access_token)
      assert.equal(linking.statusCode, 200, linking.body)
      const flowCookie = /portcullis_oidc=([^;]+)/.exec(String(linking.headers['set-cookie']))![1]!
      const back = new URL(await provider.signIn(linking.json().data.authorization_url as string, who.sub))
      const linked = await t.app.inject({ method: 'GET', url: `${back.pathname}${back.search}`, headers: { cookie: `portcullis_oidc=${flowCookie}` } })
      assert.equal(linked.headers.location, `${APP}/settings?linked=test`, linked.body)
      const identity = (await t.get('/auth/me/identities', session.access_token)).json().data.identities[0] as { id: string }
      assert.equal((await t.call('DELETE', `/auth/me/identities/${identity.id}`, session.access_token)).statusCode, 200)

      // An app the user approved through the provider, taken back (oauth.grant_revoked).
      const app = await grantApp(newEmail, RESET_PASSWORD)
      secrets.push(app.clientSecret)
      assert.deepEqual((await t.get('/auth/me/apps', session.access_token)).json().data.apps.map((a: { client_id: string }) => a.client_id), [app.clientId])
      assert.equal((await t.call('DELETE', `/auth/me/apps/${app.clientId}`, session.access_token)).statusCode, 200)

      // The account deleted by its owner (user.deleted, without an address).
      assert.equal((await t.call('DELETE', '/auth/me', session.access_token, { password: RESET_PASSWORD })).statusCode, 200)

      const expected: [string, Record<string, unknown>][] = [
        ['user.created', { email, full_name: 'Test User', email_verified: false, method: 'password' }],
        ['user.verified', { email }],
        ['user.updated', { email, full_name: 'Ada Renamed' }],
        ['user.updated', { email: newEmail, previous_email: email }],
        ['user.password_changed', { email: newEmail, by: 'change' }],
        ['user.password_changed', { email: newEmail, by: 'reset' }],
        ['user.mfa_enabled', { email: newEmail, method: 'totp' }],
        ['user.mfa_disabled', { email: newEmail, by: 'user' }],
        ['session.revoked_all', { email: newEmail, by: 'user' }],
        ['user.disabled', { email: newEmail, reason: 'suspended' }],
        ['user.enabled', { email: newEmail }],
        ['session.revoked_all', { email: newEmail, by: 'operator' }],
        ['user.identity_linked', { email: newEmail, provider: 'test' }],
        ['user.identity_unlinked', { email: newEmail, provider: 'test' }],
        ['oauth.grant_revoked', { email: newEmail, client_id: app.clientId }],
        ['user.deleted', { by: 'user' }],
      ]
      const got = await receiver.waitFor(expected.length, { match: (d) => d.payload?.data.user_id === userId })
      await h.flush()
      assert.equal(about(receiver, userId).length, expected.length, 'each event once, nothing more')
      assert.deepEqual(got.map((d) => d.payload!.type), expected.map(([type]) => type))
      got.forEach((delivery, index) => {
        const [type, data] = expected[index]!
        assert.equal(delivery.verified, true, `${type}: ${delivery.error}`)
        assert.deepEqual(Object.keys(delivery.payload!).sort(), ['data', 'timestamp', 'type'], type)
        assert.equal(new Date(delivery.payload!.timestamp).toISOString(), delivery.payload!.timestamp, type)
        // The account had no event before this endpoint existed: its numbers start at 1, one per event.
        assert.deepEqual(delivery.payload!.data, { user_id: userId, sequence: index + 1, ...data }, type)
        assert.equal(delivery.headers['content-type'], 'application/json', type)
        assert.match(delivery.headers['webhook-id']!, /^msg_[A-Za-z0-9_-]{22}$/, type)
        assert.match(delivery.headers['webhook-signature']!, /^v1,[A-Za-z0-9+/]{43}=$/, type)
      })
      assert.ok(!('email' in got.at(-1)!.payload!.data), 'user.deleted carries no address')
      assert.equal(new Set(got.map((d) => d.headers['webhook-id'])).size, got.length, 'one webhook-id per event')

      // No field is named like a credential, and no credential used above appears anywhere in a body.
      const names = (value: unknown): string[] => (value && typeof value === 'object' ? Object.entries(value).flatMap(([key, inner]) => [key, ...names(inner)]) : [])
      for (const delivery of got) {
        assert.deepEqual(names(delivery.payload).filter((name) => /password|token|code|secret/i.test(name)), [], delivery.payload!.type)
        for (const secret of secrets) assert.ok(!delivery.body.includes(secret), `${delivery.payload!.type} carries a secret`)
        assert.ok(!delivery.body.includes(totpCode), 'nor the TOTP code')
      }
    })

    test('a forged or stale signature is refused by the receiver; the original is accepted', async () => {
      const receiver = await h.receiver()
      const hook = await h.endpoint(receiver, ['user.created'])
      const email = uniqueEmail('forged')
      assert.equal((await h.t.post('/auth/register', { email, password: PASSWORD, full_name: 'Forged' })).statusCode, 201)
      const [real] = await receiver.waitFor(1)
      assert.equal(real!.verified, true, real!.error ?? '')
      const library = new Webhook(hook.secret)
      assert.deepEqual(library.verify(real!.body, real!.headers), JSON.parse(real!.body), 'the original verifies, and is the payload')

      const refusals: [string, () => unknown, RegExp][] = [
        ['the body changed', () => library.verify(real!.body.replace(email, uniqueEmail('other')), real!.headers), /No matching signature/],
        ['another secret', () => new Webhook(`whsec_${randomBytes(32).toString('base64')}`).verify(real!.body, real!.headers), /No matching signature/],
        ['a timestamp 10 minutes old', () => library.verify(real!.body, { ...real!.headers, 'webhook-timestamp': String(Number(real!.headers['webhook-timestamp']) - 600) }), /too old/],
        ['another webhook-id', () => library.verify(real!.body, { ...real!.headers, 'webhook-id': 'msg_forged' }), /No matching signature/],
      ]
      for (const [what, call, message] of refusals) assert.throws(call, (error: unknown) => error instanceof WebhookVerificationError && message.test(error.message), what)
    })

    test('order per user holds under concurrent changes: sequences rise in arrival order, and the last full_name delivered is the final state', async () => {
      const receiver = await h.receiver()
      await h.endpoint(receiver, ['user.updated'])
      const [ada, bob] = [await registerVerifyLogin(h.t, uniqueEmail('order-a')), await registerVerifyLogin(h.t, uniqueEmail('order-b'))]
      const COUNT = 20
      // The two users' changes interleaved, all in flight at once.
      const renames = Array.from({ length: COUNT }, (_, i) => [
        h.t.call('PATCH', '/auth/me', ada.access_token, { full_name: `Ada ${i}` }),
        h.t.call('PATCH', '/auth/me', bob.access_token, { full_name: `Bob ${i}` }),
      ]).flat()
      for (const response of await Promise.all(renames)) assert.equal(response.statusCode, 200, response.body)

      for (const user of [ada, bob]) {
        const got = await receiver.waitFor(COUNT, { match: (d) => d.payload?.data.user_id === user.userId, timeoutMs: 15_000 })
        assert.equal(got.length, COUNT)
        assert.ok(got.every((d) => d.verified), 'every delivery verifies')
        assertRising(got, user.email)
        const final = (await h.t.get('/auth/me', user.access_token)).json().data.full_name
        assert.equal(got.at(-1)!.payload!.data.full_name, final, 'the last delivered is the state the account ended in')
      }
    })

    test('a receiver that answers 500 three times then 200 gets the event 4 times with one webhook-id; retries only once the clock passes each delay', async () => {
      const receiver = await h.receiver()
      const hook = await h.endpoint(receiver, ['user.updated'])
      const user = await registerVerifyLogin(h.t, uniqueEmail('retry'))
      receiver.next.push(500, 500, 500)
      assert.equal((await h.t.call('PATCH', '/auth/me', user.access_token, { full_name: 'Retried' })).statusCode, 200)
      await receiver.waitFor(1)
      await h.flush()

      for (let attempt = 1; attempt <= 3; attempt++) {
        const [row] = (await h.log(hook.id)).deliveries
        assert.deepEqual([row!.attempts, row!.last_status, row!.delivered_at], [attempt, 500, null])
        // A doubling delay from 1 s, ±20% jitter, counted from the failed attempt (the clock stood still since).
        const due = Date.parse(row!.next_attempt_at!)
        const delay = due - h.t.clock.now()
        assert.ok(delay >= 0.8 * 1000 * 2 ** (attempt - 1) - 1 && delay <= 1.2 * 1000 * 2 ** (attempt - 1) + 1, `attempt ${attempt}: a retry ${delay} ms on`)
        await h.at(due - 1)
        assert.equal(receiver.deliveries.length, attempt, 'not before the delay has passed')
        await h.at(due)
        assert.equal(receiver.deliveries.length, attempt + 1, 'once it has passed')
      }

      assert.deepEqual(receiver.deliveries.map((d) => d.answer), [500, 500, 500, 200])
      assert.equal(new Set(receiver.deliveries.map((d) => d.headers['webhook-id'])).size, 1, 'the same webhook-id on every attempt')
      assert.equal(new Set(receiver.deliveries.map((d) => d.body)).size, 1, 'and the same body')
      assert.ok(receiver.deliveries.every((d) => d.verified), 'each attempt signed afresh and verified')
      const [row] = (await h.log(hook.id)).deliveries
      assert.equal(row!.webhook_id, receiver.deliveries[0]!.headers['webhook-id'])
      assert.deepEqual([row!.attempts, row!.last_status, row!.next_attempt_at, row!.failed_at], [4, 200, null, null])
      assert.ok(row!.delivered_at)
    })

    test("a failing event holds back its user's later events for at most a minute; another user's events are not held", async () => {
      const receiver = await h.receiver()
      const hook = await h.endpoint(receiver, ['user.updated'])
      const [stuck, free] = [await registerVerifyLogin(h.t, uniqueEmail('held')), await registerVerifyLogin(h.t, uniqueEmail('free'))]
      receiver.answer = (d) => (d.payload?.data.full_name === 'Poison' ? 500 : 200)

      assert.equal((await h.t.call('PATCH', '/auth/me', stuck.access_token, { full_name: 'Poison' })).statusCode, 200)
      await receiver.waitFor(1)
      await h.flush()
      const poison = (await h.log(hook.id)).deliveries[0]!
      const bornAt = Date.parse(poison.created_at)
      assert.equal(poison.last_status, 500)

      assert.equal((await h.t.call('PATCH', '/auth/me', stuck.access_token, { full_name: 'Later' })).statusCode, 200)
      assert.equal((await h.t.call('PATCH', '/auth/me', free.access_token, { full_name: 'Other' })).statusCode, 200)
      await receiver.waitFor(1, { match: (d) => d.payload?.data.user_id === free.userId })
      await h.flush()
      assert.deepEqual(about(receiver, stuck.userId).map((d) => d.payload!.data.full_name), ['Poison'], 'the later event waits behind the failing one')

      await h.at(bornAt + 30_000)
      await h.at(bornAt + 59_999)
      assert.deepEqual(about(receiver, stuck.userId).map((d) => d.payload!.data.full_name).filter((name) => name !== 'Poison'), [], 'still waiting within the first minute')

      await h.at(bornAt + 60_001)
      await receiver.waitFor(1, { match: (d) => d.payload?.data.full_name === 'Later' })
      const stuckEvents = about(receiver, stuck.userId)
      assert.equal(stuckEvents.filter((d) => d.payload!.data.full_name === 'Later').length, 1)
      const log = (await h.log(hook.id)).deliveries
      assert.equal(log.find((d) => d.webhook_id === poison.webhook_id)!.delivered_at, null, 'the failing event is still failing')
    })

    test('a receiver that hangs holds up neither another endpoint nor a login', async () => {
      const slow = await h.receiver()
      const fast = await h.receiver()
      slow.answer = () => 'hang'
      const slowHook = await h.endpoint(slow, ['user.updated'])
      await h.endpoint(fast, ['user.updated'])
      const user = await registerVerifyLogin(h.t, uniqueEmail('hang'))
      for (const name of ['One', 'Two', 'Three']) assert.equal((await h.t.call('PATCH', '/auth/me', user.access_token, { full_name: name })).statusCode, 200)

      await slow.waitForHeld(1)
      const got = await fast.waitFor(3)
      assert.equal(slow.held, 1, 'the slow endpoint still hangs on its first event while the other got all three')
      assert.deepEqual(slow.deliveries.map((d) => d.payload!.data.full_name), ['One'], 'and was sent nothing more meanwhile')
      assert.deepEqual(got.map((d) => d.payload!.data.full_name), ['One', 'Two', 'Three'])
      const signedIn = await h.t.post('/auth/login', { email: user.email, password: PASSWORD })
      assert.equal(signedIn.statusCode, 200, signedIn.body)
      assert.equal(slow.held, 1, 'the login answered while the receiver hung')

      // Released, the slow endpoint gets all three in order (a first attempt that timed out meanwhile
      // is retried once the clock passes its delay).
      slow.answer = () => 200
      slow.release(200)
      const delivered = async () => (await h.log(slowHook.id)).deliveries.filter((d) => d.delivered_at !== null).length
      for (let step = 0; (await delivered()) < 3 && step < 10; step++) await h.at(h.t.clock.now() + 2000)
      assert.equal(await delivered(), 3)
      const names = about(slow, user.userId).map((d) => d.payload!.data.full_name)
      assert.deepEqual(names.filter((name, i) => names.indexOf(name) === i), ['One', 'Two', 'Three'])
    })

    test('the admin API: scopes, validation, the event filter, DELETE, unknown ids, the deliveries log paged newest first', async () => {
      const keys = h.t.app.services.apiKeys
      const readOnly = (await keys.create({ name: 'read only', scopes: ['webhooks:read'], expiresAt: null })).key
      const writeOnly = (await keys.create({ name: 'write only', scopes: ['webhooks:write'], expiresAt: null })).key
      const receiver = await h.receiver()
      const witness = await h.receiver()
      const only = await h.endpoint(receiver, ['user.created'])
      const all = await h.endpoint(witness, ['*'])

      // Scopes.
      for (const path of ['/admin/webhooks', `/admin/webhooks/${only.id}`, `/admin/webhooks/${only.id}/deliveries`]) {
        for (const key of [writeOnly, h.usersKey]) {
          const refused = await h.admin('GET', path, undefined, key)
          assert.deepEqual([refused.statusCode, code(refused)], [403, 'INSUFFICIENT_SCOPE'], `GET ${path}`)
        }
        const anonymous = await h.admin('GET', path, undefined, null)
        assert.deepEqual([anonymous.statusCode, code(anonymous)], [401, 'AUTH_REQUIRED'], `GET ${path}`)
        assert.equal((await h.admin('GET', path, undefined, readOnly)).statusCode, 200, `GET ${path}`)
      }
      const writes: [Method, string, unknown?][] = [
        ['POST', '/admin/webhooks', { url: receiver.url, events: ['*'] }],
        ['PATCH', `/admin/webhooks/${only.id}`, { description: 'x' }],
        ['DELETE', `/admin/webhooks/${only.id}`],
        ['POST', `/admin/webhooks/${only.id}/secret`],
        ['POST', `/admin/webhooks/${only.id}/deliveries/${UNKNOWN_ID}/retry`],
      ]
      for (const [method, path, body] of writes) {
        const refused = await h.admin(method, path, body, readOnly)
        assert.deepEqual([refused.statusCode, code(refused)], [403, 'INSUFFICIENT_SCOPE'], `${method} ${path}`)
        const anonymous = await h.admin(method, path, body, null)
        assert.deepEqual([anonymous.statusCode, code(anonymous)], [401, 'AUTH_REQUIRED'], `${method} ${path}`)
      }

      // Validation names the field; `*` is accepted (and alone stands for everything).
      const invalid: [unknown, string][] = [
        [{ url: 'not a url', events: ['*'] }, 'url'],
        [{ url: 'ftp://hooks.example.com/x', events: ['*'] }, 'url'],
        [{ url: 'https://user:pass@hooks.example.com/x', events: ['*'] }, 'url'],
        [{ url: receiver.url, events: ['user.nope'] }, 'events'],
        [{ url: receiver.url, events: [] }, 'events'],
      ]
      for (const [body, field] of invalid) {
        const refused = await h.admin('POST', '/admin/webhooks', body)
        assert.deepEqual([refused.statusCode, code(refused)], [400, 'VALIDATION_ERROR'], JSON.stringify(body))
        assert.ok((refused.json().error.details as { field: string }[]).some((detail) => detail.field === field), `${JSON.stringify(body)}: ${refused.body}`)
      }
      const patched = await h.admin('PATCH', `/admin/webhooks/${only.id}`, { events: ['user.nope'] })
      assert.deepEqual([patched.statusCode, code(patched), patched.json().error.details[0].field], [400, 'VALIDATION_ERROR', 'events'])
      const star = await h.admin('POST', '/admin/webhooks', { url: `${receiver.url}?star`, events: ['user.created', '*'] })
      assert.equal(star.statusCode, 201, star.body)
      assert.deepEqual(star.json().data.webhook.events, ['*'])
      assert.equal((await h.admin('DELETE', `/admin/webhooks/${star.json().data.webhook.id}`)).statusCode, 200)

      // The event filter: the user.created endpoint hears the registration only.
      const user = await registerVerifyLogin(h.t, uniqueEmail('filter'))
      assert.equal((await h.t.call('PATCH', '/auth/me', user.access_token, { full_name: 'Filtered' })).statusCode, 200)
      await witness.waitFor(1, { match: (d) => d.payload?.data.user_id === user.userId && d.payload.type === 'user.updated' })
      await h.flush()
      assert.deepEqual(about(witness, user.userId).map((d) => d.payload!.type), ['user.created', 'user.verified', 'user.updated'])
      assert.deepEqual(about(receiver, user.userId).map((d) => d.payload!.type), ['user.created'])

      // The deliveries log: newest first, keyset-paged; a cursor of another endpoint is refused.
      for (let i = 0; i < 4; i++) {
        h.t.clock.advance(1)
        assert.equal((await h.t.call('PATCH', '/auth/me', user.access_token, { full_name: `Paged ${i}` })).statusCode, 200)
      }
      await witness.waitFor(4, { match: (d) => d.payload?.data.user_id === user.userId && String(d.payload.data.full_name).startsWith('Paged') })
      await h.flush()
      const whole = (await h.log(all.id)).deliveries
      const times = whole.map((d) => Date.parse(d.created_at))
      assert.deepEqual(times, [...times].sort((a, b) => b - a), 'newest first')
      // The renames were a second apart; registration and verification share one millisecond of the
      // test clock, and rows of one millisecond come in id order, which says nothing of their age.
      assert.deepEqual(whole.slice(0, 4).map((d) => d.sequence), [7, 6, 5, 4], 'the renames, newest first')
      assert.deepEqual(whole.map((d) => d.sequence).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7], "the user's seven events")
      const paged: string[] = []
      let page = await h.log(all.id, 'limit=3')
      paged.push(...page.deliveries.map((d) => d.id))
      const firstCursor = page.next_cursor!
      assert.ok(firstCursor)
      while (page.next_cursor) {
        page = await h.log(all.id, `limit=3&cursor=${encodeURIComponent(page.next_cursor)}`)
        assert.ok(page.deliveries.length <= 3)
        paged.push(...page.deliveries.map((d) => d.id))
      }
      assert.deepEqual(paged, whole.map((d) => d.id), 'the pages together are the whole log, once each')
      for (const cursor of [firstCursor, `${firstCursor}x`]) {
        const foreign = await h.admin('GET', `/admin/webhooks/${only.id}/deliveries?cursor=${encodeURIComponent(cursor)}`)
        assert.deepEqual([foreign.statusCode, code(foreign)], [400, 'VALIDATION_ERROR'], foreign.body)
      }

      // Unknown ids are 404, of an endpoint or of a delivery.
      for (const id of [UNKNOWN_ID, 'not-a-uuid']) {
        for (const [method, path, body] of [['GET', `/admin/webhooks/${id}`], ['PATCH', `/admin/webhooks/${id}`, { description: 'x' }], ['DELETE', `/admin/webhooks/${id}`], ['POST', `/admin/webhooks/${id}/secret`], ['GET', `/admin/webhooks/${id}/deliveries`], ['POST', `/admin/webhooks/${id}/deliveries/${whole[0]!.id}/retry`], ['POST', `/admin/webhooks/${all.id}/deliveries/${id}/retry`]] as [Method, string, unknown?][]) {
          const missing = await h.admin(method, path, body)
          assert.deepEqual([missing.statusCode, code(missing)], [404, 'NOT_FOUND'], `${method} ${path}`)
        }
      }

      // DELETE removes the endpoint and its deliveries.
      const removed = await h.admin('DELETE', `/admin/webhooks/${all.id}`)
      assert.equal(removed.statusCode, 200, removed.body)
      assert.deepEqual(removed.json().data, { id: all.id, deleted: true })
      assert.equal(code(await h.admin('GET', `/admin/webhooks/${all.id}`)), 'NOT_FOUND')
      assert.equal(code(await h.admin('GET', `/admin/webhooks/${all.id}/deliveries`)), 'NOT_FOUND')
      assert.ok(!(await h.admin('GET', '/admin/webhooks')).json().data.webhooks.some((w: { id: string }) => w.id === all.id))
      const left = await h.t.app.services.db.kysely.selectFrom('webhook_deliveries').select('id').where('endpoint_id', '=', all.id).execute()
      assert.deepEqual(left, [])
    })

    test('an endpoint an operator disables gives up its waiting deliveries; enabled again, it does not send them', async () => {
      const receiver = await h.receiver()
      receiver.next.push(500)
      const hook = await h.endpoint(receiver, ['user.updated'])
      const user = await registerVerifyLogin(h.t, uniqueEmail('paused'))
      assert.equal((await h.t.call('PATCH', '/auth/me', user.access_token, { full_name: 'Before the pause' })).statusCode, 200)
      await receiver.waitFor(1)
      await h.flush()
      const [waiting] = (await h.log(hook.id)).deliveries
      assert.deepEqual([waiting!.last_status, waiting!.failed_at], [500, null], 'failed once, waiting for its retry')

      const paused = (await h.admin('PATCH', `/admin/webhooks/${hook.id}`, { enabled: false })).json().data.webhook
      assert.deepEqual([paused.enabled, paused.disabled_reason], [false, 'operator'])
      const [after] = (await h.log(hook.id)).deliveries
      assert.ok(after!.failed_at !== null && after!.next_attempt_at === null, `given up when the endpoint was disabled: ${JSON.stringify(after)}`)

      assert.equal((await h.admin('PATCH', `/admin/webhooks/${hook.id}`, { enabled: true })).statusCode, 200)
      await h.at(Date.parse(waiting!.next_attempt_at!) + 1)
      assert.equal(receiver.deliveries.length, 1, 'the given-up delivery is not sent after the endpoint is enabled again')
    })

    test('a rolled-back change sends nothing: EMAIL_EXISTS, a race for one address, the 409 confirm page, and an outbox write in a transaction that fails', async () => {
      const receiver = await h.receiver()
      await h.endpoint(receiver, ['*'])
      const holder = await registerVerifyLogin(h.t, uniqueEmail('taken'))
      const mover = await registerVerifyLogin(h.t, uniqueEmail('mover'))
      const t = h.t

      // An address that exists: EMAIL_EXISTS, and no second user.created for it.
      const again = await t.post('/auth/register', { email: holder.email, password: PASSWORD, full_name: 'Again' })
      assert.deepEqual([again.statusCode, code(again)], [409, 'EMAIL_EXISTS'])
      // Five registrations of one new address at once: one account, one user.created.
      const contested = uniqueEmail('race')
      const race = await Promise.all(Array.from({ length: 5 }, () => t.post('/auth/register', { email: contested, password: PASSWORD, full_name: 'Racer' })))
      assert.deepEqual(race.map((r) => r.statusCode).sort(), [201, 409, 409, 409, 409])

      // An address change whose link meets an address taken meanwhile: the 409 page, no user.updated.
      const asked = await t.post('/auth/me/email', { new_email: holder.email, password: PASSWORD }, mover.access_token)
      assert.equal(asked.statusCode, 202)
      assert.equal((await confirmPage(await mailedToken(holder.email))).statusCode, 409)

      // The outbox's own guarantee: an event written in a transaction that then fails is gone with it.
      await assert.rejects(
        t.app.services.db.kysely.transaction().execute(async (trx) => {
          await t.app.services.webhooks.outbox.emit(trx, 'user.updated', { id: mover.userId, email: mover.email }, { full_name: 'Rolled back' })
          throw new Error('the change fails after its event was written')
        }),
        /the change fails/,
      )

      // A later change of each account, as a witness: events of one user go in order, so anything
      // written before it would have arrived first.
      for (const user of [holder, mover]) assert.equal((await t.call('PATCH', '/auth/me', user.access_token, { full_name: 'Witness' })).statusCode, 200)
      for (const user of [holder, mover]) await receiver.waitFor(1, { match: (d) => d.payload?.data.user_id === user.userId && d.payload.data.full_name === 'Witness' })
      await h.flush()
      assert.deepEqual(receiver.where((d) => d.payload?.type === 'user.created' && d.payload.data.email === holder.email).length, 1)
      assert.deepEqual(receiver.where((d) => d.payload?.type === 'user.created' && d.payload.data.email === contested).length, 1)
      for (const user of [holder, mover]) assert.deepEqual(about(receiver, user.userId).map((d) => d.payload!.type), ['user.created', 'user.verified', 'user.updated'], user.email)
      assert.equal(about(receiver, mover.userId, 'user.updated')[0]!.payload!.data.full_name, 'Witness')
      // The rolled-back event took no sequence number either: the witness follows verified directly.
      assert.deepEqual(about(receiver, mover.userId).map((d) => d.payload!.data.sequence), [1, 2, 3])
    })
  })

  describe(`webhooks with the clock moved by days on ${engine}`, () => {
    test('rotation: two signatures for 24 hours, each secret verifying alone; then the new one only; the secret is shown once and stored sealed', async () => {
      const h = await new Harness().start(engine)
      try {
        const receiver = await h.receiver()
        const hook = await h.endpoint(receiver, ['user.created'])
        const register = async (prefix: string) => {
          assert.equal((await h.t.post('/auth/register', { email: uniqueEmail(prefix), password: PASSWORD, full_name: 'Rotated' })).statusCode, 201)
          await h.flush()
          return receiver.deliveries.at(-1)!
        }
        const before = await register('before')
        assert.equal(before.headers['webhook-signature']!.split(' ').length, 1)
        assert.equal(before.verified, true, before.error ?? '')

        // Shown once: not in GET or the list; sealed in the database.
        const shown = JSON.stringify([(await h.admin('GET', `/admin/webhooks/${hook.id}`)).json(), (await h.admin('GET', '/admin/webhooks')).json()])
        assert.ok(!shown.includes('whsec_') && !shown.includes(hook.secret.slice('whsec_'.length)) && !shown.includes('"secret"'))
        const rotated = await h.admin('POST', `/admin/webhooks/${hook.id}/secret`)
        assert.equal(rotated.statusCode, 200, rotated.body)
        const fresh = rotated.json().data.secret as string
        assert.match(fresh, /^whsec_[A-Za-z0-9+/]{43}=$/)
        assert.notEqual(fresh, hook.secret)
        const stored = await h.t.app.services.db.kysely.selectFrom('webhook_endpoints').select(['secret', 'previous_secret']).where('id', '=', hook.id).executeTakeFirstOrThrow()
        for (const secret of [hook.secret, fresh]) {
          for (const column of [stored.secret, stored.previous_secret!]) {
            assert.ok(!column.includes('whsec_') && !column.includes(secret.slice('whsec_'.length)), 'the raw column holds no secret')
          }
        }

        // Within the 24 hours: both sign; a receiver with either secret alone verifies.
        const during = await register('during')
        assert.equal(during.headers['webhook-signature']!.split(' ').length, 2)
        assert.equal(verifyError(hook.secret, during.body, during.headers), null, 'the old secret alone verifies')
        assert.equal(verifyError(fresh, during.body, during.headers), null, 'the new secret alone verifies')
        assert.match(verifyError(`whsec_${randomBytes(32).toString('base64')}`, during.body, during.headers)!, /No matching signature/)

        // 24 hours on, the new one only. (The library's 5-minute window against real time refuses a
        // timestamp a day ahead, so the signatures are compared with its `sign`.)
        h.t.clock.advance(24 * 3600 + 1)
        const later = await register('later')
        assert.equal(later.headers['webhook-signature']!.split(' ').length, 1)
        assert.equal(signedWith(fresh, later), true)
        assert.equal(signedWith(hook.secret, later), false)
        assert.match(later.error!, /too new/)
      } finally {
        await h.close()
      }
    })

    test('an endpoint failing for 3 days is disabled, with a webhook.disabled audit event; enabling it by PATCH clears that; a retry by hand sends a given-up delivery again with the same webhook-id', async () => {
      const h = await new Harness().start(engine)
      try {
        const receiver = await h.receiver()
        receiver.answer = () => 500
        const user = await registerVerifyLogin(h.t, uniqueEmail('down'))
        const hook = await h.endpoint(receiver, ['user.updated'])
        const start = h.t.clock.now()
        assert.equal((await h.t.call('PATCH', '/auth/me', user.access_token, { full_name: 'Never delivered' })).statusCode, 200)
        await receiver.waitFor(1)
        await h.flush()
        const first = (await h.log(hook.id)).deliveries[0]!

        await h.at(start + 2 * 86_400_000)
        assert.equal((await h.admin('GET', `/admin/webhooks/${hook.id}`)).json().data.webhook.enabled, true, 'two days of failures: still enabled')

        await h.at(start + 3 * 86_400_000 + 60_000)
        const disabled = (await h.admin('GET', `/admin/webhooks/${hook.id}`)).json().data.webhook
        assert.deepEqual([disabled.enabled, disabled.disabled_reason], [false, 'failing'])
        const audit = await h.admin('GET', '/admin/events?type=webhook.disabled', undefined, h.auditKey)
        assert.equal(audit.statusCode, 200, audit.body)
        assert.deepEqual(audit.json().data.events.map((e: { type: string; reason: string }) => [e.type, e.reason]), [['webhook.disabled', hook.id]])
        const givenUp = (await h.log(hook.id)).deliveries[0]!
        assert.ok(givenUp.failed_at !== null && givenUp.next_attempt_at === null && givenUp.delivered_at === null, JSON.stringify(givenUp))
        const sent = receiver.deliveries.length
        await h.at(h.t.clock.now() + 3600_000)
        assert.equal(receiver.deliveries.length, sent, 'a disabled endpoint is sent nothing')

        // Enabled again: a fresh start. The given-up delivery goes again by hand, with its webhook-id.
        const enabled = (await h.admin('PATCH', `/admin/webhooks/${hook.id}`, { enabled: true })).json().data.webhook
        assert.deepEqual([enabled.enabled, enabled.disabled_reason], [true, null])
        const row = await h.t.app.services.db.kysely.selectFrom('webhook_endpoints').select('failing_since').where('id', '=', hook.id).executeTakeFirstOrThrow()
        assert.equal(row.failing_since, null, 'the run of failures is forgotten')
        receiver.answer = () => 200
        const retried = await h.admin('POST', `/admin/webhooks/${hook.id}/deliveries/${first.id}/retry`)
        assert.equal(retried.statusCode, 202, retried.body)
        const audited = (await h.t.app.services.admin.events({ type: 'webhook.delivery_retried', limit: 10 })).events
        assert.deepEqual(audited.map((event) => [event.reason, event.actor?.startsWith('api_key:')]), [[`${hook.id} ${first.id}`, true]], 'the retry is audited with the API key')
        await h.flush()
        assert.equal(receiver.deliveries.length, sent + 1)
        const last = receiver.deliveries.at(-1)!
        assert.deepEqual([last.answer, last.headers['webhook-id'], last.payload!.data.full_name], [200, first.webhook_id, 'Never delivered'])
        const after = (await h.log(hook.id)).deliveries[0]!
        assert.ok(after.delivered_at !== null && after.failed_at === null, JSON.stringify(after))
      } finally {
        await h.close()
      }
    })

    test('an endpoint disabled after 3 days of failures gives up its waiting deliveries at once, not at their next attempt', async () => {
      // One row per claim, so a pass takes the due rows in next_attempt_at order: the younger event
      // (its first retry sooner) is tried first, fails, and disables the endpoint; the older one is
      // then refused. The younger one must not stay waiting.
      const h = await new Harness().start(engine, { overrides: { webhooks: { queue: { ...QUEUE, batch: 1 }, timeoutMs: 2000 } } })
      try {
        const receiver = await h.receiver()
        receiver.answer = () => 500
        const hook = await h.endpoint(receiver, ['user.created'])
        const start = h.t.clock.now()
        const register = async (prefix: string) => assert.equal((await h.t.post('/auth/register', { email: uniqueEmail(prefix), password: PASSWORD, full_name: 'Down' })).statusCode, 201)
        await register('down-first')
        await receiver.waitFor(1)
        await h.flush()
        await h.at(start + 2 * 86_400_000)
        await register('down-second')
        await receiver.waitFor(3)
        await h.flush()

        await h.at(start + 3 * 86_400_000 + 60_000)
        assert.equal((await h.admin('GET', `/admin/webhooks/${hook.id}`)).json().data.webhook.disabled_reason, 'failing')
        const waiting = (await h.log(hook.id)).deliveries.filter((row) => row.failed_at === null)
        assert.deepEqual(waiting.map((row) => ({ sequence: row.sequence, next_attempt_at: row.next_attempt_at })), [], 'no delivery of the disabled endpoint is left waiting')
      } finally {
        await h.close()
      }
    })

    test('production refuses an http URL (https is fine)', async () => {
      const t = await startTestApp(engine, { env: PRODUCTION })
      try {
        await assert.rejects(t.app.services.webhooks.create({ url: 'http://hooks.example.com/portcullis', events: ['*'] }), (error: unknown) => {
          assert.ok(error instanceof AppError)
          assert.equal(error.code, 'VALIDATION_ERROR')
          assert.deepEqual(error.details, [{ field: 'url', message: 'must be https in production' }])
          return true
        })
        const { webhook } = await t.app.services.webhooks.create({ url: 'https://hooks.example.com/portcullis', events: ['*'] })
        assert.equal(webhook.url, 'https://hooks.example.com/portcullis')
      } finally {
        await t.close()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { PortcullisClient, PortcullisError } from '../../packages/client/dist/index.js'
import type { PasswordHasher } from '../../src/auth/passwords.ts'
import { widgetSources } from '../../src/captcha/widget.ts'
import { ConfigError, loadConfig } from '../../src/config.ts'
import { providerPageCsp } from '../../src/pages/provider.ts'
import { PAGE_CSP } from '../../src/pages/style.ts'
import type { ClientCreate } from '../../src/provider/schemas.ts'
import { ENGINES } from '../helpers/db.ts'
import { mailText } from '../helpers/mail.ts'
import { formOf, headingOf, OpBrowser } from '../helpers/op-browser.ts'
import { fastHasher, PASSWORD, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { Siteverify } from '../helpers/siteverify.ts'

/**
 * Bot protection (docs/SECURITY.md, "Bot protection"; shared/API.md, "Abuse limits"): register,
 * forgot-password, resend-verification and the e-mailed sign-in's start need a captcha token the
 * server checks with the provider's siteverify API, here a real HTTP stand-in on loopback.
 */

const SECRET = `0x4AAA-test-secret-${randomBytes(6).toString('hex')}`
const SITE_KEY = '0x4AAAAAAAtestsitekey'
/** The one token the stand-in accepts. */
const GOOD = `good.${randomBytes(16).toString('base64url')}`
const BAD = 'XXXX.DUMMY.TOKEN.XXXX'
const FORM = 'application/x-www-form-urlencoded'
/** The client address the inject requests come from: what the provider must be told. */
const CLIENT_IP = '203.0.113.7'

/** The fast test hasher, counting the password work it is asked for. */
function countingHasher(): PasswordHasher & { calls: number } {
  const counter = {
    calls: 0,
    hash: (password: string) => (counter.calls++, fastHasher.hash(password)),
    verify: (hash: string, password: string) => (counter.calls++, fastHasher.verify(hash, password)),
    verifyDummy: (password: string) => (counter.calls++, fastHasher.verifyDummy(password)),
    needsRehash: (hash: string) => fastHasher.needsRehash(hash),
  }
  return counter as PasswordHasher & { calls: number }
}

const captchaEnv = (provider: 'turnstile' | 'hcaptcha', url: string) => ({
  CAPTCHA_PROVIDER: provider,
  CAPTCHA_SECRET: SECRET,
  CAPTCHA_SITE_KEY: SITE_KEY,
  CAPTCHA_VERIFY_URL: url,
  // A provider that holds the request is given up on after a second here (5 s by default).
  CAPTCHA_TIMEOUT_SECONDS: '1',
})

function isCaptchaRefusal(response: LightMyRequestResponse): void {
  assert.equal(response.statusCode, 400, response.body)
  const { error } = response.json()
  assert.equal(error.code, 'VALIDATION_ERROR')
  assert.deepEqual(error.details.map((detail: { field: string }) => detail.field), ['captcha'])
}

function isUnavailable(response: LightMyRequestResponse): void {
  assert.equal(response.statusCode, 503, response.body)
  assert.equal(response.json().error.code, 'SERVICE_UNAVAILABLE')
}

/** What each route may leave behind: accounts, mailed links, e-mailed sign-ins, queued mail. */
async function footprint(t: TestApp) {
  await t.app.services.background.drain()
  const { kysely } = t.app.services.db
  const count = async (table: 'users' | 'one_time_tokens' | 'email_sign_ins' | 'mail_outbox') =>
    Number((await kysely.selectFrom(table).select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n)
  return { users: await count('users'), links: await count('one_time_tokens'), signIns: await count('email_sign_ins'), mail: await count('mail_outbox') }
}

for (const engine of ENGINES) {
  describe(`bot protection (Turnstile) on ${engine}`, () => {
    let provider: Siteverify
    let t: TestApp
    const hasher = countingHasher()
    before(async () => {
      provider = await new Siteverify(SECRET, GOOD).start()
      t = await startTestApp(engine, { env: { ...captchaEnv('turnstile', provider.url), EMAIL_SIGNUP: 'true' }, overrides: { hasher } })
    })
    after(async () => {
      await t?.close()
      await provider?.close()
    })

    const post = (path: string, body: Record<string, unknown>) =>
      t.app.inject({ method: 'POST', url: t.base + path, remoteAddress: CLIENT_IP, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(body) })
    const register = (email: string, token?: string) => post('/auth/register', { email, password: PASSWORD, full_name: 'Bot Check', ...(token === undefined ? {} : { captcha_token: token }) })
    /** Waits for the next mail to `to` and returns its text. */
    const mailTo = async (to: string) => mailText(await t.mail.next(to))

    test('register: no token or a refused one is 400 on captcha with no password work and no account; the right one registers, and the provider was sent secret, response and remoteip', async () => {
      provider.mode = 'judge'
      const email = uniqueEmail('reg')
      const before = await footprint(t)
      const hashes = hasher.calls
      const asked = provider.received.length

      isCaptchaRefusal(await register(email))
      assert.equal(provider.received.length, asked, 'a missing token costs no call to the provider')
      isCaptchaRefusal(await register(email, ''))
      isCaptchaRefusal(await register(email, BAD))
      assert.equal(provider.received.at(-1)!.form.response, BAD, 'the refused token was the provider\'s to judge')
      assert.equal(hasher.calls, hashes, 'no password was hashed before the check')
      assert.deepEqual(await footprint(t), before, 'no account, no mail')

      const registered = await register(email, GOOD)
      assert.equal(registered.statusCode, 201, registered.body)
      const sent = provider.received.at(-1)!
      assert.equal(sent.path, '/siteverify')
      assert.match(sent.contentType, /^application\/x-www-form-urlencoded\b/)
      assert.deepEqual(sent.form, { secret: SECRET, response: GOOD, remoteip: CLIENT_IP }, 'Turnstile is sent exactly these')
      assert.match(await mailTo(email), /verify-email\?token=/)
    })

    test('register: a provider that cannot be asked (connection closed, no answer, 5xx, garbage, our secret refused) is 503 and nothing happens', async () => {
      for (const mode of ['close', 'hang', 'error', 'garbage', 'secret-refused'] as const) {
        provider.mode = mode
        const email = uniqueEmail(`down-${mode}`)
        const before = await footprint(t)
        const hashes = hasher.calls
        const asked = provider.received.length
        isUnavailable(await register(email, GOOD))
        assert.equal(provider.received.length, asked + 1, `${mode}: the provider was asked`)
        assert.equal(hasher.calls, hashes, `${mode}: no password work`)
        assert.deepEqual(await footprint(t), before, `${mode}: no account made, no mail queued`)
      }
      provider.mode = 'judge'
      assert.equal((await register(uniqueEmail('back'), GOOD)).statusCode, 201, 'once the provider answers again, the right token registers')
    })

    test('forgot-password and resend-verification: the same refusal for a known and an unknown address; the right token mails; an unreachable provider is 503 and mails nothing', async () => {
      provider.mode = 'judge'
      const known = uniqueEmail('known')
      assert.equal((await register(known, GOOD)).statusCode, 201)
      await mailTo(known)
      const unknown = uniqueEmail('nobody')
      for (const path of ['/auth/forgot-password', '/auth/resend-verification']) {
        const before = await footprint(t)
        for (const token of [undefined, BAD]) {
          const body = (email: string) => ({ email, ...(token === undefined ? {} : { captcha_token: token }) })
          const forKnown = await post(path, body(known))
          const forUnknown = await post(path, body(unknown))
          isCaptchaRefusal(forKnown)
          assert.equal(forKnown.body, forUnknown.body, `${path}: the refusal says nothing about the address`)
        }
        provider.mode = 'close'
        isUnavailable(await post(path, { email: known, captcha_token: GOOD }))
        provider.mode = 'judge'
        assert.deepEqual(await footprint(t), before, `${path}: no link made, no mail queued`)

        const accepted = await post(path, { email: known, captcha_token: GOOD })
        assert.equal(accepted.statusCode, 202, accepted.body)
        assert.match(await mailTo(known), path === '/auth/forgot-password' ? /reset-password\?token=/ : /verify-email\?token=/)
      }
    })

    test('the e-mailed sign-in\'s start: 400 on captcha without the right token, 503 when the provider answers garbage, and nothing is started or mailed; the right token mails the code', async () => {
      provider.mode = 'judge'
      const email = uniqueEmail('code')
      const before = await footprint(t)
      isCaptchaRefusal(await post('/auth/email/start', { email }))
      isCaptchaRefusal(await post('/auth/email/start', { email, captcha_token: BAD }))
      provider.mode = 'garbage'
      isUnavailable(await post('/auth/email/start', { email, captcha_token: GOOD }))
      provider.mode = 'judge'
      assert.deepEqual(await footprint(t), before, 'no sign-in started, no mail queued')

      const started = await post('/auth/email/start', { email, captcha_token: GOOD })
      assert.equal(started.statusCode, 202, started.body)
      assert.match(await mailTo(email), /sign-in\/email\?token=/)
      assert.equal(provider.received.at(-1)!.form.remoteip, CLIENT_IP)
    })

    test('the forgot-password page shows the widget under a policy that allows only its provider; a post without the widget\'s token gets the form back, with it the mail goes, a provider down is a 503 page', async () => {
      provider.mode = 'judge'
      const email = uniqueEmail('page')
      assert.equal((await register(email, GOOD)).statusCode, 201)
      await mailTo(email)

      const shown = await t.app.inject({ method: 'GET', url: '/forgot-password' })
      assert.equal(shown.statusCode, 200)
      assert.match(shown.body, new RegExp(`<div class="cf-turnstile" data-sitekey="${SITE_KEY}"></div>`))
      assert.match(shown.body, /<script src="https:\/\/challenges\.cloudflare\.com\/turnstile\/v0\/api\.js" async defer><\/script>/)
      const csp = String(shown.headers['content-security-policy'])
      assert.match(csp, /script-src https:\/\/challenges\.cloudflare\.com;/)
      assert.match(csp, /frame-src https:\/\/challenges\.cloudflare\.com;/)
      assert.match(csp, /default-src 'none'/)
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/)
      // A dead link's page offers the form again, with its widget and its policy.
      const dead = await t.app.inject({ method: 'GET', url: '/reset-password?token=no-such-token' })
      assert.equal(dead.statusCode, 400)
      assert.match(dead.body, /class="cf-turnstile"/)
      assert.equal(dead.headers['content-security-policy'], csp)

      const submit = (fields: Record<string, string>) =>
        t.app.inject({ method: 'POST', url: '/forgot-password', remoteAddress: CLIENT_IP, headers: { 'content-type': FORM, 'sec-fetch-site': 'same-origin' }, payload: new URLSearchParams(fields).toString() })
      const before = await footprint(t)
      for (const fields of [{ email }, { email, 'cf-turnstile-response': BAD }] as Record<string, string>[]) {
        const refused = await submit(fields)
        assert.equal(refused.statusCode, 400)
        assert.match(refused.body, /<p class="error" id="captcha-error">/)
        assert.ok(refused.body.includes(`value="${email}"`), 'the address is kept')
        assert.match(String(refused.headers['content-security-policy']), /script-src https:\/\/challenges\.cloudflare\.com/)
      }
      provider.mode = 'hang'
      const down = await submit({ email, 'cf-turnstile-response': GOOD })
      assert.equal(down.statusCode, 503)
      assert.match(down.body, /<h1>Busy right now<\/h1>/)
      assert.equal(down.headers['content-security-policy'], PAGE_CSP)
      provider.mode = 'judge'
      assert.deepEqual(await footprint(t), before, 'nothing mailed')

      const sent = await submit({ email, 'cf-turnstile-response': GOOD })
      assert.equal(sent.statusCode, 200)
      assert.match(sent.body, /<h1>Check your mail<\/h1>/)
      assert.equal(sent.headers['content-security-policy'], PAGE_CSP)
      assert.equal(provider.received.at(-1)!.form.response, GOOD)
      assert.match(await mailTo(email), /reset-password\?token=/)
    })
    test('the OpenID provider\'s sign-in: the e-mailed code\'s address form shows the widget under a policy that allows its provider; sending it without the token gets the form back and mails nothing, a provider down is a 503 page, with the token the code is mailed', async () => {
      provider.mode = 'judge'
      if (!t.app.server.listening) await t.app.listen({ port: 0, host: '127.0.0.1' })
      const origin = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`
      const redirectUri = 'https://rp.example/cb'
      const { client } = await t.app.services.clients.create({ name: 'Guarded app', type: 'public', redirect_uris: [redirectUri] } as ClientCreate)
      const verifier = randomBytes(32).toString('base64url')
      const authorize = `${origin}/oauth/authorize?${new URLSearchParams({
        client_id: client.client_id, redirect_uri: redirectUri, response_type: 'code', scope: 'openid', state: 'state', nonce: 'nonce',
        code_challenge: createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256',
      })}`
      const browser = new OpBrowser(origin)
      const signIn = await browser.go(authorize)
      assert.equal(signIn.status, 200, signIn.body)
      assert.equal(headingOf(signIn), 'Sign in to continue to Guarded app')
      const providerPolicy = String(signIn.headers.get('content-security-policy'))
      assert.doesNotMatch(providerPolicy, /cloudflare|frame-src/, 'the sign-in page itself keeps its policy')

      // "E-mail me a code instead": the address form, with the widget and a policy for it; showing it asks no provider.
      const asked = provider.received.length
      const addressPage = await browser.submit(formOf(signIn, { actionEndsWith: '/email' }))
      assert.equal(addressPage.status, 200, addressPage.body)
      assert.equal(provider.received.length, asked)
      assert.match(addressPage.body, new RegExp(`<div class="cf-turnstile" data-sitekey="${SITE_KEY}"></div>`))
      assert.match(addressPage.body, /<script src="https:\/\/challenges\.cloudflare\.com\/turnstile\/v0\/api\.js" async defer><\/script>/)
      const widgetPolicy = String(addressPage.headers.get('content-security-policy'))
      assert.match(widgetPolicy, /script-src 'sha256-[^']+' https:\/\/challenges\.cloudflare\.com;/, 'the passkey script\'s hash and the provider\'s script')
      assert.match(widgetPolicy, /frame-src https:\/\/challenges\.cloudflare\.com;/)
      assert.match(widgetPolicy, /default-src 'none'/)
      assert.match(widgetPolicy, /frame-ancestors 'none'/)
      assert.doesNotMatch(widgetPolicy, /unsafe-inline|unsafe-eval/)
      const addressForm = formOf(addressPage, { actionEndsWith: '/email' })
      assert.equal(addressForm.fields.step, 'send')

      const email = uniqueEmail('op-code')
      const before = await footprint(t)
      for (const token of [undefined, BAD]) {
        const sentBefore = provider.received.length
        const refused = await browser.submit(addressForm, { email, ...(token === undefined ? {} : { 'cf-turnstile-response': token }) })
        assert.equal(refused.status, 400, refused.body)
        assert.equal(headingOf(refused), 'Sign in to continue to Guarded app')
        assert.match(refused.body, /<p class="error" id="captcha-error">/)
        assert.match(refused.body, /class="cf-turnstile"/)
        assert.ok(refused.body.includes(`value="${email}"`), 'the address is kept')
        assert.equal(refused.headers.get('content-security-policy'), widgetPolicy)
        assert.equal(provider.received.length, sentBefore + (token === undefined ? 0 : 1), 'a missing token costs no call to the provider; a wrong one is the provider\'s to judge')
      }
      provider.mode = 'close'
      const down = await browser.submit(addressForm, { email, 'cf-turnstile-response': GOOD })
      provider.mode = 'judge'
      assert.equal(down.status, 503, down.body)
      assert.equal(headingOf(down), 'Busy right now')
      assert.equal(down.headers.get('retry-after'), '5')
      assert.doesNotMatch(String(down.headers.get('content-security-policy')), /cloudflare/)
      assert.deepEqual(await footprint(t), before, 'no sign-in started, no mail queued')
      await assert.rejects(t.mail.next(email, 1000), /no mail/, 'and none arrives')

      const sent = await browser.submit(addressForm, { email, 'cf-turnstile-response': GOOD })
      assert.equal(sent.status, 200, sent.body)
      assert.equal(headingOf(sent), 'Enter the code from the mail')
      assert.equal(provider.received.at(-1)!.form.response, GOOD)
      const codePolicy = String(sent.headers.get('content-security-policy'))
      assert.doesNotMatch(codePolicy, /cloudflare|frame-src/, 'the code page keeps the provider pages\' policy')
      assert.match(codePolicy, /form-action 'self' https:\/\/rp\.example;/)
      assert.match(await mailTo(email), /^\d{6}$/m)
    })

    test('the typed client sends captchaToken as captcha_token on the four calls, and surfaces a refusal as VALIDATION_ERROR on captcha', async () => {
      provider.mode = 'judge'
      if (!t.app.server.listening) await t.app.listen({ port: 0, host: '127.0.0.1' })
      const client = new PortcullisClient({ baseUrl: `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}${t.base}` })
      const email = uniqueEmail('client')
      const refusal = await client.register({ email, password: PASSWORD, full_name: 'Client' }).then(() => null, (error: unknown) => error)
      assert.ok(refusal instanceof PortcullisError, String(refusal))
      assert.deepEqual([refusal.code, refusal.details?.map((detail) => detail.field)], ['VALIDATION_ERROR', ['captcha']])

      const asked = provider.received.length
      assert.equal((await client.register({ email, password: PASSWORD, full_name: 'Client' }, { captchaToken: GOOD })).email, email)
      await client.resendVerification(email, { captchaToken: GOOD })
      await client.forgotPassword(email, { captchaToken: GOOD })
      await client.startEmailSignIn(email, undefined, { captchaToken: GOOD })
      assert.deepEqual(provider.received.slice(asked).map((sent) => sent.form.response), [GOOD, GOOD, GOOD, GOOD])
      client.close()
    })
  })

  describe(`bot protection (hCaptcha) and without it on ${engine}`, () => {
    let provider: Siteverify
    let hcaptcha: TestApp
    let off: TestApp
    before(async () => {
      provider = await new Siteverify(SECRET, GOOD).start()
      hcaptcha = await startTestApp(engine, { env: captchaEnv('hcaptcha', provider.url) })
      off = await startTestApp(engine)
    })
    after(async () => {
      await hcaptcha?.close()
      await off?.close()
      await provider?.close()
    })

    test('hCaptcha: the server also sends the site key; its pages render its widget under its policy; the page form posts h-captcha-response', async () => {
      const email = uniqueEmail('hc')
      isCaptchaRefusal(await hcaptcha.post('/auth/register', { email, password: PASSWORD, full_name: 'H', captcha_token: BAD }))
      const registered = await hcaptcha.post('/auth/register', { email, password: PASSWORD, full_name: 'H', captcha_token: GOOD })
      assert.equal(registered.statusCode, 201, registered.body)
      assert.deepEqual(provider.received.at(-1)!.form, { secret: SECRET, response: GOOD, remoteip: '127.0.0.1', sitekey: SITE_KEY })

      const shown = await hcaptcha.app.inject({ method: 'GET', url: '/forgot-password' })
      assert.match(shown.body, new RegExp(`<div class="h-captcha" data-sitekey="${SITE_KEY}"></div>`))
      assert.match(shown.body, /<script src="https:\/\/js\.hcaptcha\.com\/1\/api\.js" async defer>/)
      const csp = String(shown.headers['content-security-policy'])
      for (const directive of ['script-src', 'frame-src', 'connect-src']) assert.match(csp, new RegExp(`${directive} https://hcaptcha\\.com https://\\*\\.hcaptcha\\.com`))
      assert.match(csp, /style-src 'sha256-[^']+' https:\/\/hcaptcha\.com/)

      const posted = await hcaptcha.app.inject({ method: 'POST', url: '/resend-verification', headers: { 'content-type': FORM }, payload: new URLSearchParams({ email, 'h-captcha-response': GOOD }).toString() })
      assert.equal(posted.statusCode, 200, posted.body)
      assert.equal(provider.received.at(-1)!.form.response, GOOD)
    })

    test('off: every route works without a token, and a token sent anyway is accepted and ignored; the pages load no script', async () => {
      const asked = provider.received.length
      const email = uniqueEmail('off')
      assert.equal((await off.post('/auth/register', { email, password: PASSWORD, full_name: 'Off' })).statusCode, 201)
      assert.equal((await off.post('/auth/register', { email: uniqueEmail('off'), password: PASSWORD, full_name: 'Off', captcha_token: 'anything' })).statusCode, 201)
      for (const path of ['/auth/forgot-password', '/auth/resend-verification', '/auth/email/start']) {
        assert.equal((await off.post(path, { email })).statusCode, 202, path)
        assert.equal((await off.post(path, { email, captcha_token: 'anything' })).statusCode, 202, path)
      }
      assert.equal(provider.received.length, asked, 'no provider is asked')
      const shown = await off.app.inject({ method: 'GET', url: '/forgot-password' })
      assert.equal(shown.headers['content-security-policy'], PAGE_CSP)
      assert.doesNotMatch(shown.body, /<script/)
    })
  })
}

describe('the OpenID provider pages\' policy with a widget', () => {
  test('hCaptcha\'s sources are added to the provider pages\' own (the passkey script, connect-src \'self\'), and nothing is added without a widget', () => {
    const csp = providerPageCsp([], widgetSources({ provider: 'hcaptcha', siteKey: SITE_KEY }))
    assert.match(csp, /style-src 'sha256-[^']+' https:\/\/hcaptcha\.com https:\/\/\*\.hcaptcha\.com;/)
    assert.match(csp, /script-src 'sha256-[^']+' https:\/\/hcaptcha\.com https:\/\/\*\.hcaptcha\.com;/)
    assert.match(csp, /frame-src https:\/\/hcaptcha\.com https:\/\/\*\.hcaptcha\.com;/)
    assert.match(csp, /connect-src 'self' https:\/\/hcaptcha\.com https:\/\/\*\.hcaptcha\.com;/)
    assert.match(csp, /form-action 'self';/)
    assert.doesNotMatch(providerPageCsp(['https://rp.example']), /hcaptcha|cloudflare|frame-src/)
  })
})

describe('bot protection settings are checked at start', () => {
  const base = { NODE_ENV: 'test', DATA_DIR: '/tmp/portcullis-captcha-config' }
  const refused = (env: Record<string, string>, variable: string) =>
    assert.throws(() => loadConfig({ ...base, ...env }), (error: unknown) => error instanceof ConfigError && error.message.startsWith(`Invalid configuration: ${variable} `), variable)

  test('a provider needs its secret and site key; a secret or site key without a provider is refused; the verify URL is https (loopback http outside production)', () => {
    refused({ CAPTCHA_PROVIDER: 'turnstile' }, 'CAPTCHA_SECRET')
    refused({ CAPTCHA_PROVIDER: 'hcaptcha', CAPTCHA_SECRET: 's' }, 'CAPTCHA_SITE_KEY')
    refused({ CAPTCHA_SECRET: 's' }, 'CAPTCHA_PROVIDER')
    refused({ CAPTCHA_SITE_KEY: 'k' }, 'CAPTCHA_PROVIDER')
    refused({ CAPTCHA_PROVIDER: 'recaptcha', CAPTCHA_SECRET: 's', CAPTCHA_SITE_KEY: 'k' }, 'CAPTCHA_PROVIDER')
    refused({ CAPTCHA_PROVIDER: 'turnstile', CAPTCHA_SECRET: 's', CAPTCHA_SITE_KEY: 'k', CAPTCHA_VERIFY_URL: 'http://verify.example.com/siteverify' }, 'CAPTCHA_VERIFY_URL')
    refused({ CAPTCHA_PROVIDER: 'turnstile', CAPTCHA_SECRET: 's', CAPTCHA_SITE_KEY: 'k', CAPTCHA_TIMEOUT_SECONDS: '0' }, 'CAPTCHA_TIMEOUT_SECONDS')

    assert.equal(loadConfig(base).captcha, null)
    assert.deepEqual(loadConfig({ ...base, CAPTCHA_PROVIDER: 'turnstile', CAPTCHA_SECRET: 's', CAPTCHA_SITE_KEY: 'k' }).captcha, {
      provider: 'turnstile', secret: 's', siteKey: 'k', verifyUrl: 'https://challenges.cloudflare.com/turnstile/v0/siteverify', timeoutMs: 5000,
    })
    assert.equal(loadConfig({ ...base, CAPTCHA_PROVIDER: 'hcaptcha', CAPTCHA_SECRET: 's', CAPTCHA_SITE_KEY: 'k' }).captcha?.verifyUrl, 'https://api.hcaptcha.com/siteverify')
    assert.equal(loadConfig({ ...base, CAPTCHA_PROVIDER: 'hcaptcha', CAPTCHA_SECRET: 's', CAPTCHA_SITE_KEY: 'k', CAPTCHA_VERIFY_URL: 'http://127.0.0.1:9/siteverify' }).captcha?.verifyUrl, 'http://127.0.0.1:9/siteverify')
  })
})

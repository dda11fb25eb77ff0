import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { startTestProvider, type TestAccount, type TestProvider } from '../helpers/oidc-provider.ts'
import { oathtool } from '../helpers/totp.ts'

// Sign-in with an identity provider (API.md, OpenID Connect) against a real OpenID provider
// (oidc-provider, test/helpers/oidc-provider.ts) on loopback: the whole redirect chain over HTTP,
// the browser's part played here (the portcullis_oidc cookie carried by hand). The service itself
// is reached with inject; only the provider listens. Chromium does it once in test/browser/oidc.test.ts.
const PUBLIC_URL = 'http://localhost:4000'
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`

let subjects = 0
const account = (overrides: Partial<TestAccount> = {}): TestAccount => ({ sub: `sub-${++subjects}-${Math.random().toString(36).slice(2, 8)}`, email: uniqueEmail('oidc'), email_verified: true, name: 'Ada Lovelace', ...overrides })

for (const engine of ENGINES) {
  describe(`sign-in with an identity provider on ${engine}`, () => {
    let provider: TestProvider
    let t: TestApp
    before(async () => {
      provider = await startTestProvider({ redirectUris: [CALLBACK] })
      t = await startTestApp(engine, {
        env: {
          PUBLIC_URL,
          APP_URL: `${APP}/`,
          // The app exchanges codes in cookie mode too, which needs its origin in CORS_ORIGINS.
          CORS_ORIGINS: APP,
          OIDC_PROVIDERS: 'test,down',
          OIDC_TEST_ISSUER: provider.issuer,
          OIDC_TEST_CLIENT_ID: provider.clientId,
          OIDC_TEST_CLIENT_SECRET: provider.clientSecret,
          OIDC_TEST_LABEL: 'Test ID',
          // Nothing listens on port 9 of loopback: this provider is down from the start.
          OIDC_DOWN_ISSUER: 'http://127.0.0.1:9',
          OIDC_DOWN_CLIENT_ID: 'nobody',
        },
      })
    })
    after(async () => {
      await t?.close()
      await provider?.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const cookieOf = (response: LightMyRequestResponse) => /portcullis_oidc=([^;]+)/.exec(String(response.headers['set-cookie']))?.[1]
    /** GET /start as a browser would: the provider's URL and the flow cookie. */
    const start = async (redirectTo = `${APP}/after-login`, browser?: string) => {
      const response = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/test/start?redirect_to=${encodeURIComponent(redirectTo)}`, headers: browser ? { cookie: `portcullis_oidc=${browser}` } : {} })
      assert.equal(response.statusCode, 302, response.body)
      return { location: String(response.headers.location), browser: cookieOf(response)!, response }
    }
    /** The provider's redirect back, delivered to the service with the browser's cookie (or another). */
    const callback = (url: string, browser: string | undefined) => {
      const target = new URL(url)
      assert.equal(`${target.origin}${target.pathname}`, CALLBACK)
      return t.app.inject({ method: 'GET', url: `${target.pathname}${target.search}`, headers: browser ? { cookie: `portcullis_oidc=${browser}` } : {} })
    }
    /** start → the provider's login as `who` → callback: where the browser is sent last. */
    const signIn = async (who: TestAccount, redirectTo?: string) => {
      provider.addAccount(who)
      const flow = await start(redirectTo)
      const back = await callback(await provider.signIn(flow.location, who.sub), flow.browser)
      assert.equal(back.statusCode, 302, back.body)
      return new URL(String(back.headers.location))
    }
    const exchange = (loginCode: string, headers: Record<string, string> = {}) =>
      t.app.inject({ method: 'POST', url: '/api/v1/auth/oidc/exchange', headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify({ code: loginCode }) })
    /** A whole sign-in to tokens. */
    const tokensFor = async (who: TestAccount) => {
      const back = await signIn(who)
      assert.equal(back.searchParams.get('error'), null, `error=${back.searchParams.get('error')}`)
      const response = await exchange(back.searchParams.get('code')!)
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data as { access_token: string; refresh_token: string }
    }

    test('providers by discovery: a provider down at start is listed unavailable and sends the browser back with provider_unavailable; unknown names are 404', async () => {
      const listed = await t.get('/auth/oidc/providers')
      assert.equal(listed.statusCode, 200)
      assert.deepEqual(listed.json().data.providers, [{ name: 'test', label: 'Test ID', available: true }, { name: 'down', label: 'Down', available: false }])
      const down = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/down/start?redirect_to=${encodeURIComponent(`${APP}/x`)}` })
      assert.equal(down.statusCode, 302)
      assert.equal(down.headers.location, `${APP}/x?error=provider_unavailable`)
      assert.equal(code(await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/nope/start?redirect_to=${encodeURIComponent(APP)}` })), 'NOT_FOUND')
      assert.equal(code(await t.app.inject({ method: 'GET', url: '/api/v1/auth/oidc/nope/callback?state=a&code=b' })), 'NOT_FOUND')
    })

    test('start: PKCE S256, state and nonce to the provider, the flow cookie HttpOnly and Lax on the OIDC path; redirect_to only to an allowed origin', async () => {
      const { location, response } = await start()
      const url = new URL(location)
      assert.equal(url.origin, provider.issuer)
      assert.equal(url.searchParams.get('code_challenge_method'), 'S256')
      assert.equal(url.searchParams.get('redirect_uri'), CALLBACK)
      assert.equal(url.searchParams.get('scope'), 'openid email profile')
      for (const name of ['state', 'nonce', 'code_challenge']) assert.ok((url.searchParams.get(name) ?? '').length >= 22, name)
      assert.match(String(response.headers['set-cookie']), /^portcullis_oidc=[A-Za-z0-9_-]{43}; Path=\/api\/v1\/auth\/oidc; Max-Age=600; HttpOnly; SameSite=Lax$/)
      for (const bad of ['https://evil.example.net/after', '/after-login', 'javascript:alert(1)', `https://user:pw@app.example.com/`]) {
        const refused = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/test/start?redirect_to=${encodeURIComponent(bad)}` })
        assert.equal(refused.statusCode, 400, bad)
        assert.equal(code(refused), 'VALIDATION_ERROR')
        assert.equal(refused.headers.location, undefined, 'no redirect')
      }
    })

    test('a verified address no account has: a new account, verified and without a password; the login code works once; tokens say fed / aal1', async () => {
      const who = account({ name: 'Grace Hopper' })
      const back = await signIn(who)
      assert.equal(`${back.origin}${back.pathname}`, `${APP}/after-login`)
      const loginCode = back.searchParams.get('code')!
      assert.ok(loginCode.length >= 43)
      assert.equal(back.searchParams.get('access_token'), null, 'never a token in a URL')
      const answer = await exchange(loginCode)
      assert.equal(answer.statusCode, 200, answer.body)
      const body = answer.json().data
      const claims = decodeJwt(body.access_token)
      assert.deepEqual([claims.amr, claims.acr], [['fed'], 'aal1'])
      const me = (await t.get('/auth/me', body.access_token)).json().data
      assert.deepEqual([me.email, me.full_name, me.email_verified], [who.email, 'Grace Hopper', true])
      assert.equal(code(await exchange(loginCode)), 'INVALID_CREDENTIALS', 'a login code works once')
      assert.equal(code(await exchange('made-up')), 'INVALID_CREDENTIALS')
      assert.equal(code(await t.post('/auth/login', { email: who.email, password: PASSWORD })), 'INVALID_CREDENTIALS', 'no password')
      const identities = (await t.get('/auth/me/identities', body.access_token)).json().data.identities
      assert.deepEqual(identities.map((i: { provider: string; email: string }) => [i.provider, i.email]), [['test', who.email]])
      const events = (await t.app.services.audit.ofUser(me.user_id)).map((e) => `${e.type}:${e.reason ?? ''}`)
      for (const expected of ['account.registered:identity_provider', 'oidc.linked:test', 'login.succeeded:oidc:test']) assert.ok(events.includes(expected), expected)

      // The same identity again: the same account, in cookie mode this time.
      const again = await signIn(who)
      const cookie = await exchange(again.searchParams.get('code')!, { 'x-token-transport': 'cookie', origin: APP })
      assert.equal(cookie.statusCode, 200, cookie.body)
      assert.equal(cookie.json().data.refresh_token, undefined)
      assert.match(String(cookie.headers['set-cookie']), /portcullis_refresh=/)
      assert.equal(decodeJwt(cookie.json().data.access_token).sub, me.user_id)
      // The login code expires after 60 s.
      const late = await signIn(who)
      t.clock.advance(61)
      assert.equal(code(await exchange(late.searchParams.get('code')!)), 'INVALID_CREDENTIALS')
    })

    test('the linking rules: both sides verified links; an unverified local account is account_exists; an address the provider does not vouch for is email_not_verified', async () => {
      // A verified local account meets a verified provider address: linked, the same account.
      const local = await registerVerifyLogin(t, uniqueEmail('local'))
      const linked = await tokensFor(account({ email: local.email }))
      assert.equal(decodeJwt(linked.access_token).sub, local.userId)
      assert.equal((await t.post('/auth/login', { email: local.email, password: PASSWORD })).statusCode, 200, 'the password still works')

      // Someone registered the address and never verified it: the provider sign-in must not reach that account.
      const squatted = uniqueEmail('squatted')
      assert.equal((await t.post('/auth/register', { email: squatted, password: 'the squatter knows this one', full_name: 'Squatter' })).statusCode, 201)
      await t.mail.next(squatted)
      const refused = await signIn(account({ email: squatted }))
      assert.equal(refused.searchParams.get('error'), 'account_exists')
      assert.equal(refused.searchParams.get('code'), null)
      const squatter = (await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', squatted).executeTakeFirstOrThrow()).id
      assert.equal((await t.app.services.db.kysely.selectFrom('user_identities').select('id').where('user_id', '=', squatter).execute()).length, 0, 'nothing linked')

      // The provider does not vouch for the address: nothing is created or linked, whoever has it.
      for (const verified of [false, 'false', undefined] as const) {
        const unverified = account({ email_verified: verified })
        if (verified === undefined) delete unverified.email_verified
        assert.equal((await signIn(unverified)).searchParams.get('error'), 'email_not_verified', String(verified))
        assert.equal(await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', unverified.email!).executeTakeFirst(), undefined)
      }
      assert.equal((await signIn(account({ email: local.email, sub: 'another-person', email_verified: false }))).searchParams.get('error'), 'email_not_verified')
      // Apple sends the claim as a string.
      assert.ok((await tokensFor(account({ email_verified: 'true' }))).access_token)
    })

    test('a disabled account gets error=account_disabled; an account with MFA gets MFA_REQUIRED at the exchange, then fed otp mfa / aal2', async () => {
      const who = account()
      const first = await tokensFor(who)
      const userId = decodeJwt(first.access_token).sub as string
      const enrolment = (await t.post('/auth/mfa/totp', {}, first.access_token)).json().data
      assert.equal((await t.post(`/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: oathtool(enrolment.secret, t.clock.now()) }, first.access_token)).statusCode, 200)
      await t.mail.next(who.email!)
      const back = await signIn(who)
      const challenged = await exchange(back.searchParams.get('code')!)
      assert.equal(challenged.statusCode, 403, challenged.body)
      assert.equal(code(challenged), 'MFA_REQUIRED')
      t.clock.advance(30)
      const verified = await t.post('/auth/mfa/verify', { mfa_token: challenged.json().error.mfa.mfa_token, method: 'totp', code: oathtool(enrolment.secret, t.clock.now()) })
      assert.equal(verified.statusCode, 200, verified.body)
      const claims = decodeJwt(verified.json().data.access_token)
      assert.deepEqual([claims.amr, claims.acr], [['fed', 'otp', 'mfa'], 'aal2'])

      await t.app.services.accounts.disable({ id: userId }, 'suspended')
      assert.equal((await signIn(who)).searchParams.get('error'), 'account_disabled')
    })

    test('the flow is bound to the browser and used once: missing or foreign cookie, tampered state and a replayed callback get a page and no redirect', async () => {
      const who = account()
      provider.addAccount(who)
      const page = (response: LightMyRequestResponse) => {
        assert.equal(response.statusCode, 400, response.body)
        assert.match(String(response.headers['content-type']), /^text\/html/)
        assert.equal(response.headers.location, undefined)
        assert.match(response.body, /This sign-in cannot continue/)
      }
      const flow = await start()
      const returned = await provider.signIn(flow.location, who.sub)
      page(await callback(returned, undefined))
      const other = await start()
      page(await callback(returned, other.browser))
      const tampered = new URL(returned)
      tampered.searchParams.set('state', `${tampered.searchParams.get('state')}x`)
      page(await callback(tampered.toString(), flow.browser))
      // The right browser still completes it (the refusals above did not use the flow up); then never again.
      assert.equal((await callback(returned, flow.browser)).statusCode, 302)
      page(await callback(returned, flow.browser))
      // A browser's own cookie is kept across flows, so two tabs can each finish theirs.
      const second = await start(undefined, flow.browser)
      assert.equal(second.browser, flow.browser)
      // Ten minutes later the flow is dead.
      const stale = await start()
      const staleReturn = await provider.signIn(stale.location, who.sub)
      t.clock.advance(601)
      page(await callback(staleReturn, stale.browser))
      const refusedEvents = await t.app.services.db.kysely.selectFrom('audit_events').select('reason').where('type', '=', 'oidc.refused').execute()
      assert.ok(refusedEvents.some((e) => e.reason === 'test: unknown_flow'))
    })

    test('races and purposes: one callback or one login code sent twice at once works once; a login code is no mfa_token and an mfa_token no login code', async () => {
      const who = account()
      provider.addAccount(who)
      const flow = await start()
      const returned = await provider.signIn(flow.location, who.sub)
      const callbacks = await Promise.all([0, 1].map(() => callback(returned, flow.browser)))
      assert.deepEqual(callbacks.map((r) => r.statusCode).sort(), [302, 400])
      const loginCode = new URL(String(callbacks.find((r) => r.statusCode === 302)!.headers.location)).searchParams.get('code')!
      const exchanges = await Promise.all([0, 1].map(() => exchange(loginCode)))
      assert.deepEqual(exchanges.map((r) => r.statusCode).sort(), [200, 401], exchanges.map((r) => r.body).join(' / '))

      const another = (await signIn(who)).searchParams.get('code')!
      assert.equal(code(await t.post('/auth/mfa/verify', { mfa_token: another, method: 'totp', code: '123456' })), 'INVALID_MFA_TOKEN')
      assert.equal((await exchange(another)).statusCode, 200, 'the refused use did not spend it')
      const local = await registerVerifyLogin(t, uniqueEmail('purpose'))
      const enrolment = (await t.post('/auth/mfa/totp', {}, local.access_token)).json().data
      assert.equal((await t.post(`/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: oathtool(enrolment.secret, t.clock.now()) }, local.access_token)).statusCode, 200)
      const mfaToken = (await t.post('/auth/login', { email: local.email, password: PASSWORD })).json().error.mfa.mfa_token as string
      assert.equal(code(await exchange(mfaToken)), 'INVALID_CREDENTIALS')
    })

    test('ID tokens that fail a check are provider_error: wrong nonce, audience or issuer, a key not in the JWKS (openid-client does not check it; Portcullis does), alg none; a denial is access_denied', async () => {
      try {
        for (const mode of [{ nonce: 'another-nonce' }, { aud: 'someone-else' }, { iss: 'https://evil.example.net' }, { foreignKey: true as const }, { alg: 'none' as const }]) {
          provider.tamper(mode)
          const back = await signIn(account())
          assert.equal(back.searchParams.get('error'), 'provider_error', JSON.stringify(mode))
          assert.equal(back.searchParams.get('code'), null)
        }
      } finally {
        provider.tamper(null)
      }
      const who = account()
      provider.addAccount(who)
      const flow = await start()
      const denied = await callback(await provider.signIn(flow.location, who.sub, { deny: true }), flow.browser)
      assert.equal(new URL(String(denied.headers.location)).searchParams.get('error'), 'access_denied')
      assert.ok((await tokensFor(account())).access_token, 'the provider behaves again')
    })

    test('link and unlink from a signed-in app; an identity of someone else is account_exists; the last way in is LAST_SIGN_IN_METHOD; export, admin view and deletion', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('linker'))
      const who = account({ email: uniqueEmail('elsewhere') })
      provider.addAccount(who)
      const linking = await t.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, user.access_token)
      assert.equal(linking.statusCode, 200, linking.body)
      const browser = cookieOf(linking)!
      const back = await callback(await provider.signIn(linking.json().data.authorization_url, who.sub), browser)
      assert.equal(back.headers.location, `${APP}/settings?linked=test`)
      const identities = (await t.get('/auth/me/identities', user.access_token)).json().data.identities
      assert.deepEqual(identities.map((i: { provider: string; email: string }) => [i.provider, i.email]), [['test', who.email]])
      assert.equal(decodeJwt((await tokensFor(who)).access_token).sub, user.userId, 'the identity signs in to the linking account, whatever its address')

      // The same identity linked from another account: refused.
      const other = await registerVerifyLogin(t, uniqueEmail('other'))
      const taking = await t.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, other.access_token)
      const refused = await callback(await provider.signIn(taking.json().data.authorization_url, who.sub), cookieOf(taking))
      assert.equal(refused.headers.location, `${APP}/settings?error=account_exists`)

      const exported = (await t.get('/auth/me/export', user.access_token)).json().data
      assert.deepEqual(exported.identities.map((i: { provider: string }) => i.provider), ['test'])
      const { key } = await t.app.services.apiKeys.create({ name: 'oidc ops', scopes: ['users:read'], expiresAt: null })
      const shown = await t.app.inject({ method: 'GET', url: `/api/v1/admin/users/${user.userId}`, headers: { authorization: `Bearer ${key}` } })
      assert.deepEqual(shown.json().data.user.identities.map((i: { provider: string }) => i.provider), ['test'])

      // Unlink: fine with a password left; the provider-made account's only identity is its last way in.
      assert.equal((await t.call('DELETE', `/auth/me/identities/${identities[0].id}`, user.access_token)).statusCode, 200)
      assert.deepEqual((await t.get('/auth/me/identities', user.access_token)).json().data.identities, [])
      assert.equal(code(await t.call('DELETE', `/auth/me/identities/${identities[0].id}`, other.access_token)), 'NOT_FOUND')
      const federated = await tokensFor(account())
      const only = (await t.get('/auth/me/identities', federated.access_token)).json().data.identities[0]
      const last = await t.call('DELETE', `/auth/me/identities/${only.id}`, federated.access_token)
      assert.equal(last.statusCode, 409)
      assert.equal(code(last), 'LAST_SIGN_IN_METHOD')

      // Deleting an account deletes its identities.
      const relinked = await t.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, user.access_token)
      await callback(await provider.signIn(relinked.json().data.authorization_url, who.sub), cookieOf(relinked))
      assert.equal((await t.call('DELETE', '/auth/me', user.access_token, { password: PASSWORD })).statusCode, 200)
      assert.equal((await t.app.services.db.kysely.selectFrom('user_identities').select('id').where('user_id', '=', user.userId).execute()).length, 0)
    })
  })
}

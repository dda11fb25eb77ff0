import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { mailText, tokenFromMail } from '../helpers/mail.ts'
import { startTestProvider, type TestAccount, type TestProvider } from '../helpers/oidc-provider.ts'
import { PortcullisClient, PortcullisError, type LoginResult } from '../../packages/client/src/index.ts'
import { oathtool } from '../helpers/totp.ts'

// Sign-in with an identity provider (docs/oidc.md) against a real OpenID provider
// (oidc-provider, test/helpers/oidc-provider.ts) on loopback: the whole redirect chain over HTTP,
// the browser's part played here (the portcullis_oidc cookie carried by hand). The service itself
// is reached with inject; only the provider listens. Chromium does it once in test/browser/oidc.test.ts.
const PUBLIC_URL = 'http://localhost:4000'
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`

let subjects = 0
const account = (overrides: Partial<TestAccount> = {}): TestAccount => ({ sub: `sub-${++subjects}-${Math.random().toString(36).slice(2, 8)}`, email: uniqueEmail('oidc'), email_verified: true, name: 'Ada Lovelace', ...overrides })

/** An RFC 7636 pair, as the application makes it: a 43-character verifier and its S256 challenge. */
const pkce = () => {
  const verifier = randomBytes(32).toString('base64url')
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') }
}
/** What an exchange presents besides the code: the verifier of its start's challenge, or the starting browser's cookie. */
interface Proof { code_verifier?: string; browser?: string }

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
    // The proof each flow's exchange owes, found by the flow's state and then by its login code, so
    // that an exchange carries its own proof unless a test hands it another.
    const proofsByState = new Map<string, Proof>()
    const proofs = new Map<string, Proof>()
    /**
     * GET /start as a browser would: the provider's URL and the flow cookie. The application sends an
     * S256 code_challenge, as the typed client does, unless `challenge: false` (then the flow cookie
     * is the login code's proof).
     */
    const start = async (redirectTo = `${APP}/after-login`, browser?: string, options: { challenge?: boolean } = {}) => {
      const pair = options.challenge === false ? null : pkce()
      const query = new URLSearchParams({ redirect_to: redirectTo, ...(pair ? { code_challenge: pair.challenge, code_challenge_method: 'S256' } : {}) })
      const response = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/test/start?${query}`, headers: browser ? { cookie: `portcullis_oidc=${browser}` } : {} })
      assert.equal(response.statusCode, 302, response.body)
      const location = String(response.headers.location)
      const cookie = cookieOf(response)!
      const state = new URL(location).searchParams.get('state')
      if (state) proofsByState.set(state, pair ? { code_verifier: pair.verifier } : { browser: cookie })
      return { location, browser: cookie, response, verifier: pair?.verifier }
    }
    /** The provider's redirect back, delivered to the service with the browser's cookie (or another). */
    const callback = async (url: string, browser: string | undefined) => {
      const target = new URL(url)
      assert.equal(`${target.origin}${target.pathname}`, CALLBACK)
      const response = await t.app.inject({ method: 'GET', url: `${target.pathname}${target.search}`, headers: browser ? { cookie: `portcullis_oidc=${browser}` } : {} })
      const loginCode = response.statusCode === 302 ? new URL(String(response.headers.location)).searchParams.get('code') : null
      const proof = proofsByState.get(target.searchParams.get('state') ?? '')
      if (loginCode && proof) proofs.set(loginCode, proof)
      return response
    }
    /** start → the provider's login as `who` → callback: where the browser is sent last. */
    const signIn = async (who: TestAccount, redirectTo?: string, options: { challenge?: boolean } = {}) => {
      provider.addAccount(who)
      const flow = await start(redirectTo, undefined, options)
      const back = await callback(await provider.signIn(flow.location, who.sub), flow.browser)
      assert.equal(back.statusCode, 302, back.body)
      return new URL(String(back.headers.location))
    }
    /** POST /exchange with the code's own proof (the one its start asked for), or the one given. */
    const exchange = (loginCode: string, options: { headers?: Record<string, string>; proof?: Proof } = {}) => {
      const proof = options.proof ?? proofs.get(loginCode) ?? {}
      const cookie: Record<string, string> = proof.browser === undefined ? {} : { cookie: `portcullis_oidc=${proof.browser}` }
      const body = { code: loginCode, ...(proof.code_verifier === undefined ? {} : { code_verifier: proof.code_verifier }) }
      return t.app.inject({ method: 'POST', url: '/api/v1/auth/oidc/exchange', headers: { 'content-type': 'application/json', ...cookie, ...options.headers }, payload: JSON.stringify(body) })
    }
    /** Starts a link from a signed-in session: the provider URL and the flow cookie. */
    const startLink = async (accessToken: string, redirectTo = `${APP}/settings`) => {
      const linking = await t.post('/auth/oidc/test/link', { redirect_to: redirectTo }, accessToken)
      assert.equal(linking.statusCode, 200, linking.body)
      return { location: linking.json().data.authorization_url as string, browser: cookieOf(linking)! }
    }
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
      const cookie = await exchange(again.searchParams.get('code')!, { headers: { 'x-token-transport': 'cookie', origin: APP } })
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
      // No link is silent: the user hears of it, by the provider's name.
      const notice = mailText(await t.mail.next(user.email))
      assert.match(notice, /Subject: A sign-in method was added to your account/)
      assert.match(notice, /Sign-in with Test ID was linked to your/)
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

    test('login CSRF through the login code: a stranger\'s code planted in a victim\'s browser opens nothing without the proof its start asked for, and dies at the first wrong try', async () => {
      const stranger = account({ email: uniqueEmail('stranger') })
      /** The stranger signs in as themselves and stops at `?code=`: the URL they send the victim. */
      const plantable = async (options: { challenge?: boolean } = {}) => {
        const back = await signIn(stranger, undefined, options)
        const loginCode = back.searchParams.get('code')!
        assert.ok(loginCode, back.toString())
        return { loginCode, proof: proofs.get(loginCode)! }
      }
      // The victim's own browser: its own flow (and so its own cookie and verifier), in cookie mode.
      const victim = await start()
      const victimVerifier = victim.verifier!
      const refusedWith = async (loginCode: string, proof: Proof, why: string) => {
        const answer = await exchange(loginCode, { proof, headers: { 'x-token-transport': 'cookie', origin: APP } })
        assert.equal(answer.statusCode, 401, `${why}: ${answer.body}`)
        assert.equal(code(answer), 'INVALID_CREDENTIALS', why)
        assert.doesNotMatch(String(answer.headers['set-cookie'] ?? ''), /portcullis_refresh=/, `${why}: the victim's session cookie is left alone`)
      }

      // A flow started with a code_challenge: only its verifier exchanges the code.
      for (const [why, proof] of [
        ['no verifier', {}],
        ['the victim\'s own verifier', { code_verifier: victimVerifier }],
        ['the victim\'s flow cookie', { browser: victim.browser }],
        ['a malformed verifier', { code_verifier: 'short' }],
        ['a verifier outside RFC 7636\'s alphabet', { code_verifier: `${'a'.repeat(42)}+` }],
      ] as const) {
        const planted = await plantable()
        await refusedWith(planted.loginCode, proof, why)
        const late = await exchange(planted.loginCode)
        assert.equal(late.statusCode, 401, `${why}: the code died with the wrong try, even for its own verifier`)
      }
      // A flow started without one: only the starting browser's cookie, and no verifier, exchanges it.
      for (const [why, proof] of [
        ['no cookie', {}],
        ['the victim\'s flow cookie', { browser: victim.browser }],
        ['a verifier instead of the cookie', { code_verifier: victimVerifier }],
      ] as const) {
        const planted = await plantable({ challenge: false })
        await refusedWith(planted.loginCode, proof, why)
        assert.equal((await exchange(planted.loginCode)).statusCode, 401, `${why}: the code is dead`)
      }
      const withBoth = await plantable({ challenge: false })
      await refusedWith(withBoth.loginCode, { ...withBoth.proof, code_verifier: victimVerifier }, 'its cookie and a verifier its start never asked for')

      // Whoever started the flow still signs in, either way.
      for (const challenge of [true, false]) {
        const own = await plantable({ challenge })
        const answer = await exchange(own.loginCode, { proof: own.proof })
        assert.equal(answer.statusCode, 200, answer.body)
      }
      const refusals = await t.app.services.db.kysely.selectFrom('audit_events').select('reason').where('type', '=', 'oidc.refused').where('reason', '=', 'test: login_code_proof').execute()
      assert.ok(refusals.length >= 9, 'each wrong proof is an audit event')
    })

    test('start: a code_challenge that is not 43 base64url characters, a missing or other method, or a method alone is 400 VALIDATION_ERROR with no redirect', async () => {
      const { challenge } = pkce()
      const cases: [string, Record<string, string>][] = [
        ['42 characters', { code_challenge: challenge.slice(1), code_challenge_method: 'S256' }],
        ['44 characters', { code_challenge: `${challenge}A`, code_challenge_method: 'S256' }],
        ['not base64url', { code_challenge: `${challenge.slice(1)}+`, code_challenge_method: 'S256' }],
        ['padded', { code_challenge: `${challenge.slice(1)}=`, code_challenge_method: 'S256' }],
        ['no method', { code_challenge: challenge }],
        ['plain', { code_challenge: challenge, code_challenge_method: 'plain' }],
        ['lower-case s256', { code_challenge: challenge, code_challenge_method: 's256' }],
        ['a method alone', { code_challenge_method: 'S256' }],
      ]
      for (const name of ['test', 'down']) {
        for (const [why, params] of cases) {
          const query = new URLSearchParams({ redirect_to: `${APP}/after-login`, ...params })
          const refused = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/${name}/start?${query}` })
          assert.equal(refused.statusCode, 400, `${name}, ${why}: ${refused.body}`)
          assert.equal(code(refused), 'VALIDATION_ERROR', why)
          assert.equal(refused.headers.location, undefined, `${why}: no redirect`)
          assert.equal(refused.headers['set-cookie'], undefined, `${why}: no flow`)
        }
      }
    })

    test('a login code dies with the account\'s sessions: logout-all, a password reset, and an epoch moved between the callback and the exchange', async () => {
      const local = await registerVerifyLogin(t, uniqueEmail('epoch'))
      const who = account({ email: local.email })
      const linked = await tokensFor(who)
      assert.equal(decodeJwt(linked.access_token).sub, local.userId)
      await t.mail.next(local.email) // the automatic link's notice

      // A code made, then logout-all: the exchange answers as for an unknown code.
      const beforeLogoutAll = (await signIn(who)).searchParams.get('code')!
      assert.equal((await t.post('/auth/logout-all', {}, local.access_token)).statusCode, 200)
      assert.equal(code(await exchange(beforeLogoutAll)), 'INVALID_CREDENTIALS', 'logout-all')

      // A code made, then a password reset (the owner taking the account back).
      const beforeReset = (await signIn(who)).searchParams.get('code')!
      assert.equal((await t.post('/auth/forgot-password', { email: local.email })).statusCode, 202)
      const token = tokenFromMail(await t.mail.next(local.email))
      assert.equal((await t.post('/auth/reset-password', { token, password: 'a brand new passphrase' })).statusCode, 200)
      assert.equal(code(await exchange(beforeReset)), 'INVALID_CREDENTIALS', 'password reset')

      // A reset that commits between the callback's choice of the account and the insert of its code
      // leaves a code behind: the epoch it was made under no longer holds, so it opens nothing.
      const raced = (await signIn(who)).searchParams.get('code')!
      await t.app.services.db.kysely.updateTable('users').set((eb) => ({ credential_epoch: eb('credential_epoch', '+', 1) })).where('id', '=', local.userId).execute()
      assert.equal(code(await exchange(raced)), 'INVALID_CREDENTIALS', 'an epoch moved after the callback')
      const live = await t.app.services.db.kysely.selectFrom('sessions').select('id').where('user_id', '=', local.userId).where('revoked_at', 'is', null).execute()
      assert.deepEqual(live, [], 'no session was born')
      // A code made under the current epoch works.
      assert.equal((await exchange((await signIn(who)).searchParams.get('code')!)).statusCode, 200)
    })

    test('a link flow ends with the session that started it and with the account\'s sessions: logout of that session, logout-all and a password change answer access_denied at redirect_to', async () => {
      const ends: [string, (user: Awaited<ReturnType<typeof registerVerifyLogin>>) => Promise<unknown>][] = [
        ['its session logged out', (user) => t.post('/auth/logout', { refresh_token: user.refresh_token })],
        ['logout-all from another session', async (user) => {
          const other = (await t.post('/auth/login', { email: user.email, password: PASSWORD })).json().data
          assert.equal((await t.post('/auth/logout-all', {}, other.access_token)).statusCode, 200)
        }],
        ['a password change in the same session (which it keeps)', async (user) => {
          assert.equal((await t.post('/auth/change-password', { current_password: PASSWORD, new_password: 'another good passphrase' }, user.access_token)).statusCode, 200)
        }],
      ]
      for (const [why, end] of ends) {
        // A session stolen by someone who starts a link to their own provider account; the owner ends it.
        const user = await registerVerifyLogin(t, uniqueEmail('flow-end'))
        const intruder = account({ email: uniqueEmail('intruder') })
        provider.addAccount(intruder)
        const flow = await startLink(user.access_token)
        const returned = await provider.signIn(flow.location, intruder.sub)
        await end(user)
        const back = await callback(returned, flow.browser)
        assert.equal(back.statusCode, 302, `${why}: ${back.body}`)
        assert.equal(back.headers.location, `${APP}/settings?error=access_denied`, why)
        const rows = await t.app.services.db.kysely.selectFrom('user_identities').select('id').where('user_id', '=', user.userId).execute()
        assert.deepEqual(rows, [], `${why}: nothing linked`)
      }
    })

    test('an unverified address cannot link a provider: a stranger who registered the owner\'s address leaves no identity that survives the owner\'s reset', async () => {
      // Possible only where unverified accounts may sign in.
      const open = await startTestApp(engine, {
        env: { PUBLIC_URL, APP_URL: `${APP}/`, REQUIRE_EMAIL_VERIFICATION: 'false', OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: provider.issuer, OIDC_TEST_CLIENT_ID: provider.clientId, OIDC_TEST_CLIENT_SECRET: provider.clientSecret },
      })
      try {
        const owner = uniqueEmail('owner')
        assert.equal((await open.post('/auth/register', { email: owner, password: 'the stranger chose this', full_name: 'Stranger' })).statusCode, 201)
        const session = (await open.post('/auth/login', { email: owner, password: 'the stranger chose this' })).json().data
        const linking = await open.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, session.access_token)
        assert.equal(linking.statusCode, 403, linking.body)
        assert.equal(linking.json().error.code, 'EMAIL_NOT_VERIFIED')
        assert.equal(linking.headers['set-cookie'], undefined, 'no flow started')
        const userId = (await open.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', owner).executeTakeFirstOrThrow()).id
        assert.equal((await open.app.services.db.kysely.selectFrom('oidc_flows').select('state_hash').where('user_id', '=', userId).execute()).length, 0)

        // The callback checks again: a link started while verified completes only while still verified.
        await open.app.services.db.kysely.updateTable('users').set({ email_verified_at: open.clock.now() }).where('id', '=', userId).execute()
        const intruder = account({ email: uniqueEmail('intruder') })
        provider.addAccount(intruder)
        const started = await open.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, session.access_token)
        assert.equal(started.statusCode, 200, started.body)
        const returned = new URL(await provider.signIn(started.json().data.authorization_url, intruder.sub))
        await open.app.services.db.kysely.updateTable('users').set({ email_verified_at: null }).where('id', '=', userId).execute()
        const back = await open.app.inject({ method: 'GET', url: `${returned.pathname}${returned.search}`, headers: { cookie: `portcullis_oidc=${cookieOf(started)}` } })
        assert.equal(back.headers.location, `${APP}/settings?error=email_not_verified`)
        assert.equal((await open.app.services.db.kysely.selectFrom('user_identities').select('id').where('user_id', '=', userId).execute()).length, 0)
      } finally {
        await open.close()
      }
    })

    test('automatic linking finds the account through the same normalisation as registration, and tells its owner', async () => {
      // Registered as typed (NFC, lower case); the provider spells it decomposed and in capitals.
      const tag = randomBytes(3).toString('hex')
      const address = `josé-${tag}@example.com`
      const registered = await t.post('/auth/register', { email: address, password: PASSWORD, full_name: 'José' })
      assert.equal(registered.statusCode, 201, registered.body)
      await t.mail.next(address) // the verification link, not needed:
      // verified by the operator: the address is the point here, not the mailed link.
      await t.app.services.accounts.verify(address)
      const local = { email: address, userId: registered.json().data.user_id as string }
      const spelled = `JOSE\u0301-${tag.toUpperCase()}@Example.COM`
      assert.notEqual(spelled.toLowerCase(), local.email)
      const signedIn = await tokensFor(account({ email: spelled }))
      assert.equal(decodeJwt(signedIn.access_token).sub, local.userId, 'the existing account, not a refusal or a second account')
      assert.match(mailText(await t.mail.next(local.email)), /Sign-in with Test ID was linked to your/)

      // The same spelling of an address someone registered and never verified: still account_exists.
      const squatted = `zoë-${tag}@example.com`
      assert.equal((await t.post('/auth/register', { email: squatted, password: 'the squatter knows this one', full_name: 'Squatter' })).statusCode, 201)
      const refused = await signIn(account({ email: `ZOE\u0308-${tag.toUpperCase()}@EXAMPLE.COM` }))
      assert.equal(refused.searchParams.get('error'), 'account_exists')
      // An account a provider sign-in creates is not a link to an existing account: no notice.
      const made = await tokensFor(account())
      const madeNotices = await t.app.services.db.kysely.selectFrom('mail_outbox').select('id').where('user_id', '=', decodeJwt(made.access_token).sub!).execute()
      assert.deepEqual(madeNotices, [])
    })

    test('the last way in holds under concurrency: two unlinks at once on an account with no password leave one identity', async () => {
      for (let round = 0; round < 4; round++) {
        // A provider-made account (no password), with a second identity linked from it.
        const first = account()
        const tokens = await tokensFor(first)
        const second = account({ email: uniqueEmail('second') })
        provider.addAccount(second)
        const flow = await startLink(tokens.access_token)
        assert.equal((await callback(await provider.signIn(flow.location, second.sub), flow.browser)).headers.location, `${APP}/settings?linked=test`)
        const identities = (await t.get('/auth/me/identities', tokens.access_token)).json().data.identities as { id: string }[]
        assert.equal(identities.length, 2)
        const answers = await Promise.all(identities.map((identity) => t.call('DELETE', `/auth/me/identities/${identity.id}`, tokens.access_token)))
        assert.deepEqual(answers.map((a) => a.statusCode).sort(), [200, 409], answers.map((a) => a.body).join(' / '))
        assert.equal(code(answers.find((a) => a.statusCode === 409)!), 'LAST_SIGN_IN_METHOD')
        assert.equal((await t.get('/auth/me/identities', tokens.access_token)).json().data.identities.length, 1, 'one way in is left')
      }
    })
    test('the typed client binds its login codes: startOidc sends an S256 challenge, exchangeOidcCode its verifier (memory where there is no sessionStorage); a code it did not start is refused', async () => {
      // The client's requests reach the app through inject; the browser's hops are played as above.
      const viaInject: typeof fetch = async (input, init) => {
        const url = new URL(String(input))
        const answer = await t.app.inject({ method: (init?.method ?? 'GET') as 'GET', url: `${url.pathname}${url.search}`, headers: init?.headers as Record<string, string>, ...(typeof init?.body === 'string' ? { payload: init.body } : {}) })
        return new Response(answer.body, { status: answer.statusCode, headers: { 'content-type': String(answer.headers['content-type'] ?? 'application/json') } })
      }
      const client = new PortcullisClient({ baseUrl: `${PUBLIC_URL}/api/v1`, fetch: viaInject })
      const who = account()
      provider.addAccount(who)
      const startUrl = new URL(await client.startOidc('test', `${APP}/back`))
      assert.equal(startUrl.searchParams.get('code_challenge_method'), 'S256')
      assert.match(startUrl.searchParams.get('code_challenge') ?? '', /^[A-Za-z0-9_-]{43}$/)
      const started = await t.app.inject({ method: 'GET', url: `${startUrl.pathname}${startUrl.search}` })
      assert.equal(started.statusCode, 302, started.body)
      const back = await callback(await provider.signIn(String(started.headers.location), who.sub), cookieOf(started))
      const loginCode = new URL(String(back.headers.location)).searchParams.get('code')!
      const session = (await client.exchangeOidcCode(loginCode)) as LoginResult
      assert.deepEqual(decodeJwt(session.access_token).amr, ['fed'])

      // A code from someone else's sign-in, handed to this client: it has no verifier for it.
      const planted = (await signIn(account())).searchParams.get('code')!
      await assert.rejects(client.exchangeOidcCode(planted), (error: unknown) => error instanceof PortcullisError && error.code === 'INVALID_CREDENTIALS')
    })
  })
}

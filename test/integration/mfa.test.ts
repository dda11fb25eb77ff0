import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import type { LightMyRequestResponse } from 'fastify'
import { ENGINES } from '../helpers/db.ts'
import { mailText, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { oathtool } from '../helpers/totp.ts'
import { runCli } from '../../src/cli.ts'
import { randomBytes } from 'node:crypto'
import { createStorage } from '../helpers/db.ts'


for (const engine of ENGINES) {
  describe(`second factors on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { CORS_ORIGINS: 'https://app.example.com' } })
    })
    after(async () => {
      await t.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const login = (email: string, password = PASSWORD, headers: Record<string, string> = {}) =>
      t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify({ email, password }) })
    const verify = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
      t.app.inject({ method: 'POST', url: `${t.base}/auth/mfa/verify`, headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify(body) })
    const mfaTokenOf = async (email: string, headers: Record<string, string> = {}) => {
      const response = await login(email, PASSWORD, headers)
      assert.equal(response.statusCode, 403, response.body)
      assert.equal(code(response), 'MFA_REQUIRED')
      return response.json().error.mfa.mfa_token as string
    }
    /** A user with a confirmed authenticator app; `token` is the access token of the enrolling session. */
    const enrolled = async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('mfa'))
      const started = await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)
      assert.equal(started.statusCode, 201, started.body)
      const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
      const confirmed = await t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, user.access_token)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      return { ...user, secret, factorId: factor_id, recoveryCodes: confirmed.json().data.recovery_codes as string[] }
    }
    /** Moves the clock a whole step on, so the next code is of a step not used yet. */
    const nextStep = () => t.clock.advance(30)

    test('enrolment: a 160-bit secret, an otpauth URI, an SVG QR code; only a confirmed factor counts, and the first brings ten recovery codes', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('enrol'))
      const started = await t.post('/auth/mfa/totp', undefined, user.access_token)
      assert.equal(started.statusCode, 201)
      assert.equal(started.headers['cache-control'], 'no-store')
      const data = started.json().data
      assert.match(data.secret, /^[A-Z2-7]{32}$/, '160 bits in base32')
      const uri = new URL(data.otpauth_uri)
      assert.equal(uri.protocol, 'otpauth:')
      assert.equal(uri.searchParams.get('secret'), data.secret)
      assert.equal(uri.searchParams.get('issuer'), 'Portcullis')
      assert.ok(decodeURIComponent(uri.pathname).endsWith(user.email))
      assert.match(data.qr_svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/)
      assert.equal((await login(user.email)).statusCode, 200, 'an unconfirmed factor does not count')
      assert.deepEqual((await t.get('/auth/mfa', user.access_token)).json().data, { factors: [], recovery_codes_remaining: 0 })

      assert.equal(code(await t.post(`/auth/mfa/totp/${data.factor_id}/confirm`, { code: '000000' === oathtool(data.secret, t.clock.now()) ? '111111' : '000000' }, user.access_token)), 'INVALID_MFA_CODE')
      const confirmed = await t.post(`/auth/mfa/totp/${data.factor_id}/confirm`, { code: oathtool(data.secret, t.clock.now()) }, user.access_token)
      assert.equal(confirmed.statusCode, 200)
      const { factor, recovery_codes } = confirmed.json().data
      assert.equal(factor.type, 'totp')
      assert.equal(factor.name, 'Authenticator app')
      assert.equal(recovery_codes.length, 10)
      for (const recovery of recovery_codes) assert.match(recovery, /^[a-z2-7]{5}-[a-z2-7]{5}$/)
      assert.equal(new Set(recovery_codes).size, 10)
      const listed = (await t.get('/auth/mfa', user.access_token)).json().data
      assert.equal(listed.factors.length, 1)
      assert.equal(listed.recovery_codes_remaining, 10)
      assert.equal(code(await t.post(`/auth/mfa/totp/${data.factor_id}/confirm`, { code: oathtool(data.secret, t.clock.now(), 1) }, user.access_token)), 'NOT_FOUND', 'confirmed once')
      const notice = mailText(await t.mail.next(user.email))
      assert.match(notice, /authenticator app \("Authenticator app"\) was added/)

      // The second factor of the account brings no new codes.
      nextStep()
      const second = (await t.post('/auth/mfa/totp', { name: 'Tablet' }, user.access_token)).json().data
      const again = await t.post(`/auth/mfa/totp/${second.factor_id}/confirm`, { code: oathtool(second.secret, t.clock.now()) }, user.access_token)
      assert.equal(again.json().data.recovery_codes, undefined)
    })

    test('login: the right password answers 403 MFA_REQUIRED with an mfa_token, never a token; verify creates the session with amr and aal2', async () => {
      const user = await enrolled()
      nextStep()
      const response = await login(user.email)
      assert.equal(response.statusCode, 403)
      assert.equal(response.headers['cache-control'], 'no-store')
      const error = response.json().error
      assert.equal(error.code, 'MFA_REQUIRED')
      assert.deepEqual(Object.keys(error.mfa).sort(), ['expires_in', 'methods', 'mfa_token'])
      assert.equal(error.mfa.expires_in, 300)
      assert.deepEqual(error.mfa.methods, ['totp', 'recovery_code'])
      assert.ok(!response.body.includes('access_token'))
      assert.equal(code(await login(user.email, 'a wrong password')), 'INVALID_CREDENTIALS', 'the password is still checked first')

      const done = await verify({ mfa_token: error.mfa.mfa_token, method: 'totp', code: oathtool(user.secret, t.clock.now()) })
      assert.equal(done.statusCode, 200, done.body)
      assert.deepEqual(Object.keys(done.json().data), ['access_token', 'refresh_token', 'token_type', 'expires_in'])
      const claims = decodeJwt(done.json().data.access_token)
      assert.deepEqual(claims.amr, ['pwd', 'otp', 'mfa'])
      assert.equal(claims.acr, 'aal2')
      assert.equal(claims.auth_time, Math.floor(t.clock.now() / 1000))
      const refreshed = decodeJwt((await t.post('/auth/refresh', { refresh_token: done.json().data.refresh_token })).json().data.access_token)
      assert.deepEqual([refreshed.amr, refreshed.acr], [['pwd', 'otp', 'mfa'], 'aal2'], 'refresh carries the session\'s values')
      assert.equal(code(await verify({ mfa_token: error.mfa.mfa_token, method: 'totp', code: oathtool(user.secret, t.clock.now(), 1) })), 'INVALID_MFA_TOKEN', 'single-use')
    })

    test('TOTP rules with codes from oathtool: the current step and one either side; two steps off, a replay, or an earlier step after a later one are refused', async () => {
      const user = await enrolled()
      const at = () => t.clock.now()
      for (const [steps, accepted] of [[-2, false], [2, false], [-1, true], [0, true], [1, true]] as const) {
        t.clock.advance(120)
        const response = await verify({ mfa_token: await mfaTokenOf(user.email), method: 'totp', code: oathtool(user.secret, at(), steps) })
        assert.equal(response.statusCode, accepted ? 200 : 401, `a code ${steps} step(s) away`)
        if (!accepted) assert.equal(code(response), 'INVALID_MFA_CODE')
      }
      // Replay of an accepted code, even within its 30 seconds.
      t.clock.advance(120)
      const now = oathtool(user.secret, at())
      assert.equal((await verify({ mfa_token: await mfaTokenOf(user.email), method: 'totp', code: now })).statusCode, 200)
      assert.equal(code(await verify({ mfa_token: await mfaTokenOf(user.email), method: 'totp', code: now })), 'INVALID_MFA_CODE', 'a code is accepted once')
      // A later step used first: the earlier step's code is refused afterwards.
      t.clock.advance(120)
      const later = oathtool(user.secret, at(), 1)
      const earlier = oathtool(user.secret, at(), -1)
      assert.equal((await verify({ mfa_token: await mfaTokenOf(user.email), method: 'totp', code: later })).statusCode, 200)
      assert.equal(code(await verify({ mfa_token: await mfaTokenOf(user.email), method: 'totp', code: earlier })), 'INVALID_MFA_CODE')
    })

    test('races: one code on two mfa_tokens at once gives exactly one session; two codes on one mfa_token, exactly one', async () => {
      const user = await enrolled()
      t.clock.advance(120)
      const [a, b] = [await mfaTokenOf(user.email), await mfaTokenOf(user.email)]
      const sameCode = oathtool(user.secret, t.clock.now())
      const one = await Promise.all([verify({ mfa_token: a, method: 'totp', code: sameCode }), verify({ mfa_token: b, method: 'totp', code: sameCode })])
      assert.deepEqual(one.map((r) => r.statusCode).sort(), [200, 401])

      t.clock.advance(120)
      const token = await mfaTokenOf(user.email)
      const two = await Promise.all([
        verify({ mfa_token: token, method: 'totp', code: oathtool(user.secret, t.clock.now()) }),
        verify({ mfa_token: token, method: 'recovery_code', code: user.recoveryCodes[0]! }),
      ])
      assert.deepEqual(two.map((r) => r.statusCode).sort(), [200, 401])
      assert.ok(two.some((r) => code(r) === 'INVALID_MFA_TOKEN'))
    })

    test('an mfa_token lives five minutes, and dies after five wrong codes (the fifth is still INVALID_MFA_CODE)', async () => {
      const user = await enrolled()
      t.clock.advance(60)
      const token = await mfaTokenOf(user.email)
      t.clock.advance(301)
      assert.equal(code(await verify({ mfa_token: token, method: 'totp', code: oathtool(user.secret, t.clock.now()) })), 'INVALID_MFA_TOKEN', 'expired')

      const fresh = await mfaTokenOf(user.email)
      const wrong = oathtool(user.secret, t.clock.now(), 5)
      for (let i = 1; i <= 5; i++) assert.equal(code(await verify({ mfa_token: fresh, method: 'totp', code: wrong })), 'INVALID_MFA_CODE', `wrong code ${i}`)
      assert.equal(code(await verify({ mfa_token: fresh, method: 'totp', code: oathtool(user.secret, t.clock.now()) })), 'INVALID_MFA_TOKEN', 'dead after five')
      assert.equal(code(await verify({ mfa_token: 'not-a-token', method: 'totp', code: '123456' })), 'INVALID_MFA_TOKEN')
      // Tokens of another purpose are no mfa_token, and a code of one method is no code of the other.
      for (const jwt of [user.access_token, user.refresh_token]) {
        // A JWT is longer than any mfa_token, so the schema refuses it before it is even looked up.
        assert.equal(code(await verify({ mfa_token: jwt, method: 'totp', code: oathtool(user.secret, t.clock.now()) })), 'VALIDATION_ERROR')
        assert.equal(code(await verify({ mfa_token: jwt.slice(-43), method: 'totp', code: oathtool(user.secret, t.clock.now()) })), 'INVALID_MFA_TOKEN')
      }
      t.clock.advance(5)
      const another = await mfaTokenOf(user.email)
      assert.equal(code(await verify({ mfa_token: another, method: 'totp', code: user.recoveryCodes[0]! })), 'INVALID_MFA_CODE')
      assert.equal(code(await verify({ mfa_token: another, method: 'recovery_code', code: oathtool(user.secret, t.clock.now()) })), 'INVALID_MFA_CODE')
      // Another account's mfa_token does not take this account's codes.
      const stranger = await enrolled()
      t.clock.advance(5)
      const theirs = await mfaTokenOf(stranger.email)
      assert.equal(code(await verify({ mfa_token: theirs, method: 'recovery_code', code: user.recoveryCodes[1]! })), 'INVALID_MFA_CODE')
    })

    test('wrong codes feed the account\'s progressive login delay; the password step alone does not reset it', async () => {
      const user = await enrolled()
      t.clock.advance(60)
      // Ten free failures across many mfa_tokens, then the account is delayed like after wrong passwords.
      for (let i = 0; i < 10; i++) {
        const token = await mfaTokenOf(user.email)
        assert.equal(code(await verify({ mfa_token: token, method: 'totp', code: oathtool(user.secret, t.clock.now(), 9) })), 'INVALID_MFA_CODE')
      }
      assert.equal(code(await login(user.email)), 'RATE_LIMITED', 'delayed, even with the right password')
      t.clock.advance(2)
      const token = await mfaTokenOf(user.email)
      assert.equal(code(await verify({ mfa_token: token, method: 'totp', code: oathtool(user.secret, t.clock.now(), 9) })), 'INVALID_MFA_CODE')
      t.clock.advance(3)
      // The password step is allowed again once the delay has passed, but it is no success: one
      // more wrong code is throttled at once (had it reset the count, that would be a free failure).
      const again = await mfaTokenOf(user.email)
      assert.equal(code(await verify({ mfa_token: again, method: 'totp', code: oathtool(user.secret, t.clock.now(), 9) })), 'INVALID_MFA_CODE')
      assert.equal(code(await login(user.email)), 'RATE_LIMITED', 'the password step did not reset the delay')
      t.clock.advance(10)
      const last = await mfaTokenOf(user.email)
      assert.equal((await verify({ mfa_token: last, method: 'totp', code: oathtool(user.secret, t.clock.now()) })).statusCode, 200)
      assert.equal(code(await login(user.email)), 'MFA_REQUIRED', 'a completed login reset it')
    })

    test('recovery codes: normalised on input, each once, a mail on use; a new set kills the old one', async () => {
      const user = await enrolled()
      await t.mail.next(user.email)
      const [first, second] = user.recoveryCodes as [string, string]
      const messy = ` ${first.toUpperCase().replace('-', ' - ')} `
      const used = await verify({ mfa_token: await mfaTokenOf(user.email), method: 'recovery_code', code: messy })
      assert.equal(used.statusCode, 200, used.body)
      assert.deepEqual(decodeJwt(used.json().data.access_token).amr, ['pwd', 'otp', 'mfa'])
      assert.match(mailText(await t.mail.next(user.email)), /recovery codes was used/)
      assert.equal(code(await verify({ mfa_token: await mfaTokenOf(user.email), method: 'recovery_code', code: first })), 'INVALID_MFA_CODE', 'used once')
      assert.equal((await t.get('/auth/mfa', user.access_token)).json().data.recovery_codes_remaining, 9)

      const fresh = await t.post('/auth/mfa/recovery-codes', undefined, used.json().data.access_token)
      assert.equal(fresh.statusCode, 200, fresh.body)
      assert.equal(fresh.json().data.recovery_codes.length, 10)
      assert.equal(code(await verify({ mfa_token: await mfaTokenOf(user.email), method: 'recovery_code', code: second })), 'INVALID_MFA_CODE', 'the old set died')
      assert.equal((await verify({ mfa_token: await mfaTokenOf(user.email), method: 'recovery_code', code: fresh.json().data.recovery_codes[0] })).statusCode, 200)
    })

    test('cookie mode is carried through the mfa_token: verify answers without refresh_token and sets the cookie', async () => {
      const user = await enrolled()
      t.clock.advance(60)
      const token = await mfaTokenOf(user.email, { 'x-token-transport': 'cookie', origin: 'https://app.example.com' })
      const done = await verify({ mfa_token: token, method: 'totp', code: oathtool(user.secret, t.clock.now()) }, { origin: 'https://app.example.com' })
      assert.equal(done.statusCode, 200, done.body)
      assert.deepEqual(Object.keys(done.json().data), ['access_token', 'token_type', 'expires_in'])
      assert.match(String(done.headers['set-cookie']), /^portcullis_refresh=[\w-]+\.[\w-]+\.[\w-]+; Max-Age=604800; Path=\/api\/v1\/auth; HttpOnly; SameSite=Strict$/)
      assert.equal(done.headers['access-control-allow-credentials'], 'true')
      // From a foreign origin the cookie is refused, as for login.
      t.clock.advance(60)
      const other = await mfaTokenOf(user.email, { 'x-token-transport': 'cookie', origin: 'https://app.example.com' })
      assert.equal(code(await verify({ mfa_token: other, method: 'totp', code: oathtool(user.secret, t.clock.now()) }, { origin: 'https://evil.example' })), 'ORIGIN_NOT_ALLOWED')
    })

    test('step-up: every sensitive action needs a factor verified in this session within MFA_STEP_UP_SECONDS', async () => {
      const user = await enrolled()
      t.clock.advance(60)
      const token = await mfaTokenOf(user.email)
      const session = (await verify({ mfa_token: token, method: 'totp', code: oathtool(user.secret, t.clock.now()) })).json().data
      let access = session.access_token as string
      const sensitive: [string, () => Promise<LightMyRequestResponse>][] = [
        ['POST /auth/mfa/totp', () => t.post('/auth/mfa/totp', undefined, access)],
        ['POST /auth/mfa/recovery-codes', () => t.post('/auth/mfa/recovery-codes', undefined, access)],
        ['DELETE /auth/mfa/factors/{id}', () => t.call('DELETE', `/auth/mfa/factors/${user.factorId}`, access)],
        ['POST /auth/change-password', () => t.post('/auth/change-password', { current_password: PASSWORD, new_password: PASSWORD }, access)],
        ['GET /auth/me/export', () => t.get('/auth/me/export', access)],
        ['DELETE /auth/me', () => t.call('DELETE', '/auth/me', access, { password: PASSWORD })],
      ]
      // Just verified: recent. Eleven minutes on (and refreshed), no longer.
      assert.equal((await t.get('/auth/me/export', access)).statusCode, 200)
      t.clock.advance(11 * 60)
      access = (await t.post('/auth/refresh', { refresh_token: session.refresh_token })).json().data.access_token
      for (const [route, call] of sensitive) {
        const refused = await call()
        assert.equal(refused.statusCode, 403, route)
        assert.deepEqual(refused.json().error.mfa, { step_up: true, methods: ['totp', 'recovery_code'] }, route)
      }
      assert.equal((await t.get('/auth/me', access)).statusCode, 200, 'everything else works as before')

      assert.equal(code(await t.post('/auth/mfa/step-up', { method: 'totp', code: oathtool(user.secret, t.clock.now(), 7) }, access)), 'INVALID_MFA_CODE')
      const stepped = await t.post('/auth/mfa/step-up', { method: 'totp', code: oathtool(user.secret, t.clock.now()) }, access)
      assert.equal(stepped.statusCode, 200, stepped.body)
      const claims = decodeJwt(stepped.json().data.access_token)
      assert.equal(claims.sid, decodeJwt(access).sid, 'the same session')
      assert.equal(claims.auth_time, Math.floor(t.clock.now() / 1000))
      access = stepped.json().data.access_token
      assert.equal((await t.get('/auth/me/export', access)).statusCode, 200)
      assert.equal((await t.post('/auth/mfa/recovery-codes', undefined, access)).statusCode, 200)
    })

    test('a refused verify or step-up body says what is wrong, once per problem, not once per branch of the union', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('mfa-body'))
      const details = async (response: Promise<LightMyRequestResponse>) => {
        const answered = await response
        assert.equal(answered.statusCode, 400, answered.body)
        assert.equal(code(answered), 'VALIDATION_ERROR')
        return answered.json().error.details
      }
      const methods = 'must be one of totp, recovery_code, passkey'
      assert.deepEqual(await details(verify({ mfa_token: 'x', method: 'sms', code: '123456' })), [{ field: 'method', message: methods }])
      assert.deepEqual(await details(verify({ mfa_token: 'x', method: 'totp' })), [{ field: 'code', message: 'is required' }])
      assert.deepEqual(await details(verify({ mfa_token: 'x', method: 'passkey', code: '123456' })), [
        { field: 'credential', message: 'is required' },
        { field: 'code', message: 'is not allowed' },
      ])
      assert.deepEqual(await details(verify({})), [
        { field: 'method', message: 'is required' },
        { field: 'mfa_token', message: 'is required' },
      ])
      const empty = t.app.inject({ method: 'POST', url: `${t.base}/auth/mfa/verify`, headers: { 'content-type': 'application/json' } })
      assert.deepEqual(await details(empty), [{ field: 'body', message: 'must be object' }])
      assert.deepEqual(await details(t.post('/auth/mfa/step-up', { method: 'sms', code: '123456' }, user.access_token)), [{ field: 'method', message: methods }])
      assert.deepEqual(await details(t.post('/auth/mfa/step-up', { method: 'recovery_code' }, user.access_token)), [{ field: 'code', message: 'is required' }])
    })

    test('no bypass: a password reset keeps the factor and signs nobody in; sessions from before enrolment stay aal1 until they step up', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('bypass'))
      const older = (await login(user.email)).json().data
      const started = (await t.post('/auth/mfa/totp', undefined, user.access_token)).json().data
      await t.post(`/auth/mfa/totp/${started.factor_id}/confirm`, { code: oathtool(started.secret, t.clock.now()) }, user.access_token)
      await t.mail.next(user.email)

      const olderRefreshed = (await t.post('/auth/refresh', { refresh_token: older.refresh_token })).json().data.access_token
      assert.equal(decodeJwt(olderRefreshed).acr, 'aal1', 'a session from before enrolment is still aal1')
      assert.equal(code(await t.get('/auth/me/export', olderRefreshed)), 'MFA_REQUIRED', 'and cannot reach the sensitive actions')
      assert.equal((await t.get('/auth/me/export', user.access_token)).statusCode, 200, 'the confirming session is recent')

      await t.post('/auth/forgot-password', { email: user.email })
      const reset = await t.post('/auth/reset-password', { token: tokenFromMail(await t.mail.next(user.email)), password: 'a brand new passphrase' })
      assert.equal(reset.statusCode, 200)
      assert.deepEqual(Object.keys(reset.json().data), [], 'no token from a reset')
      assert.equal(code(await login(user.email, 'a brand new passphrase')), 'MFA_REQUIRED', 'the factor survived the reset')
    })

    test('removing the last factor removes the recovery codes; the account is back to a password alone', async () => {
      const user = await enrolled()
      await t.mail.next(user.email)
      const removed = await t.call('DELETE', `/auth/mfa/factors/${user.factorId}`, user.access_token)
      assert.equal(removed.statusCode, 200, removed.body)
      assert.deepEqual(removed.json().data, { id: user.factorId, deleted: true })
      assert.match(mailText(await t.mail.next(user.email)), /was removed/)
      assert.deepEqual((await t.get('/auth/mfa', user.access_token)).json().data, { factors: [], recovery_codes_remaining: 0 })
      assert.equal((await login(user.email)).statusCode, 200)
      const stranger = await registerVerifyLogin(t, uniqueEmail('stranger'))
      assert.equal(code(await t.call('DELETE', `/auth/mfa/factors/${user.factorId}`, stranger.access_token)), 'NOT_FOUND')
    })

    test('operators: the admin view shows the factors; a reset (API or CLI) removes them all, revokes every session and mails the user', async () => {
      const user = await enrolled()
      await t.mail.next(user.email)
      const { key } = await t.app.services.apiKeys.create({ name: 'mfa ops', scopes: ['users:read', 'users:write'], expiresAt: null })
      const admin = (method: 'GET' | 'POST', path: string) => t.app.inject({ method, url: `${t.base}${path}`, headers: { authorization: `Bearer ${key}` } })
      const shown = (await admin('GET', `/admin/users/${user.userId}`)).json().data.user.mfa
      assert.equal(shown.enabled, true)
      assert.deepEqual(shown.factors.map((f: { id: string; type: string }) => [f.id, f.type]), [[user.factorId, 'totp']])
      assert.ok(!JSON.stringify(shown).includes(user.secret))
      assert.equal((await t.app.inject({ method: 'POST', url: `${t.base}/admin/users/${user.userId}/mfa/reset`, headers: { authorization: `Bearer ${(await t.app.services.apiKeys.create({ name: 'reader', scopes: ['users:read'], expiresAt: null })).key}` } })).json().error.code, 'INSUFFICIENT_SCOPE')

      const reset = await admin('POST', `/admin/users/${user.userId}/mfa/reset`)
      assert.equal(reset.statusCode, 200, reset.body)
      assert.deepEqual(reset.json().data.user.mfa, { enabled: false, factors: [] })
      assert.equal(reset.json().data.revoked, 1)
      assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 401, 'every session revoked')
      assert.match(mailText(await t.mail.next(user.email)), /An operator removed every second factor/)
      assert.equal((await login(user.email)).statusCode, 200, 'a password alone signs in again')
      const events = (await t.app.services.audit.ofUser(user.userId)).map((event) => event.type)
      for (const type of ['mfa.totp_enrolment_started', 'mfa.factor_added', 'mfa.recovery_codes_issued', 'mfa.reset']) assert.ok(events.includes(type), type)

      // The CLI, on the same database, for another user.
      const other = await enrolled()
      await t.mail.next(other.email)
      const out: string[] = []
      const env = { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl }
      assert.equal(await runCli(['users', 'mfa-reset', other.email], env, { out: (line) => out.push(line), err() {} }), 0)
      assert.deepEqual(out, [`${other.email}: 1 second factor(s) removed, 1 session(s) revoked`])
      assert.equal((await login(other.email)).statusCode, 200)
      const errors: string[] = []
      assert.equal(await runCli(['users', 'mfa-reset', 'nobody@example.com'], env, { out() {}, err: (line) => errors.push(line) }), 1)
      // The database it opened (one line), then the one line of the failure.
      assert.equal(errors.filter((line) => !line.startsWith('portcullis: database ')).length, 1)
    })

    test('the export lists the factors without secrets; deleting the account deletes them and the codes', async () => {
      const user = await enrolled()
      const exported = await t.get('/auth/me/export', user.access_token)
      assert.equal(exported.statusCode, 200)
      assert.deepEqual(exported.json().data.factors.map((f: { id: string }) => f.id), [user.factorId])
      for (const secret of [user.secret, ...user.recoveryCodes]) assert.ok(!exported.body.includes(secret))
      assert.equal((await t.call('DELETE', '/auth/me', user.access_token, { password: PASSWORD })).statusCode, 200)
      for (const table of ['mfa_factors', 'mfa_recovery_codes', 'mfa_challenges'] as const) {
        assert.equal((await t.app.services.db.kysely.selectFrom(table).select('user_id').where('user_id', '=', user.userId).execute()).length, 0, table)
      }
    })

    test('no TOTP secret, recovery code or mfa_token is stored in the clear', async () => {
      const user = await enrolled()
      t.clock.advance(60)
      const token = await mfaTokenOf(user.email)
      const rows = [
        ...(await t.app.services.db.kysely.selectFrom('mfa_factors').selectAll().where('user_id', '=', user.userId).execute()),
        ...(await t.app.services.db.kysely.selectFrom('mfa_recovery_codes').selectAll().where('user_id', '=', user.userId).execute()),
        ...(await t.app.services.db.kysely.selectFrom('mfa_challenges').selectAll().where('user_id', '=', user.userId).execute()),
      ]
      const text = JSON.stringify(rows)
      assert.ok(rows.length >= 12)
      assert.ok(text.includes(user.userId), 'the scan reads the rows')
      for (const secret of [user.secret, token, ...user.recoveryCodes, ...user.recoveryCodes.map((c) => c.replace('-', '').toUpperCase())]) assert.ok(!text.includes(secret), secret)
    })
  })

  test(`keys rewrap re-seals the TOTP secrets on ${engine}: after it, only the new KEY_ENCRYPTION_KEY opens them, and a code still signs in`, async () => {
    const storage = await createStorage(engine)
    const oldKek = randomBytes(32).toString('base64')
    const newKek = randomBytes(32).toString('base64')
    try {
      const first = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: oldKek } })
      const user = await registerVerifyLogin(first, uniqueEmail('rewrap'))
      const started = (await first.post('/auth/mfa/totp', undefined, user.access_token)).json().data
      assert.equal((await first.post(`/auth/mfa/totp/${started.factor_id}/confirm`, { code: oathtool(started.secret, first.clock.now()) }, user.access_token)).statusCode, 200)
      await first.close()
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl, OLD_KEY_ENCRYPTION_KEY: oldKek, KEY_ENCRYPTION_KEY: newKek }
      const out: string[] = []
      assert.equal(await runCli(['keys', 'rewrap'], env, { out: (line) => out.push(line), err() {} }), 0)
      const next = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: newKek } })
      try {
        next.clock.advance(60)
        const challenge = await next.post('/auth/login', { email: user.email, password: PASSWORD })
        const done = await next.post('/auth/mfa/verify', { mfa_token: challenge.json().error.mfa.mfa_token, method: 'totp', code: oathtool(started.secret, next.clock.now()) })
        assert.equal(done.statusCode, 200, done.body)
      } finally {
        await next.close()
      }
    } finally {
      await storage.drop()
    }
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { mailText } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { LogCapture } from '../helpers/logs.ts'
import { SoftAuthenticator, type CreationOptionsJSON, type RequestOptionsJSON } from '../helpers/webauthn.ts'

// Passkeys (docs/mfa.md, Passkeys), driven by a software authenticator written for these tests
// (test/helpers/webauthn.ts: P-256 keys, `none` attestation, CBOR by hand), not by the library the
// service verifies with. The browser's own ceremony is test/browser/passkeys.test.ts.
const ORIGIN = 'https://auth.example.com'
const APP_ORIGIN = 'https://app.example.com'
const RP_ID = 'example.com'

for (const engine of ENGINES) {
  describe(`passkeys on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { PUBLIC_URL: ORIGIN, CORS_ORIGINS: `${APP_ORIGIN},https://partner.example.org`, WEBAUTHN_RP_ID: RP_ID } })
    })
    after(async () => {
      await t.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const json = (url: string, body: unknown, headers: Record<string, string> = {}) =>
      t.app.inject({ method: 'POST', url: `${t.base}${url}`, headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify(body) })
    const registrationOptions = async (token: string) => {
      const response = await t.post('/auth/passkeys/register/options', undefined, token)
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data.options as CreationOptionsJSON
    }
    /** A verified user with one passkey on `device`. */
    const withPasskey = async (device = new SoftAuthenticator()) => {
      const user = await registerVerifyLogin(t, uniqueEmail('passkey'))
      const registered = await t.post('/auth/passkeys/register', { credential: device.register(await registrationOptions(user.access_token), { origin: ORIGIN }), name: 'Laptop' }, user.access_token)
      assert.equal(registered.statusCode, 201, registered.body)
      await t.mail.next(user.email)
      return { ...user, device, factorId: registered.json().data.factor.id as string, credentialId: device.credentials()[0]!.id, recoveryCodes: registered.json().data.recovery_codes as string[] }
    }
    const loginOptions = async () => {
      const response = await t.post('/auth/passkeys/login/options')
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data as { challenge_id: string; options: RequestOptionsJSON }
    }
    const passkeyLogin = async (device: SoftAuthenticator, args: Partial<Parameters<SoftAuthenticator['authenticate']>[1]> = {}, headers: Record<string, string> = {}) => {
      const { challenge_id, options } = await loginOptions()
      return json('/auth/passkeys/login', { challenge_id, credential: device.authenticate(options, { origin: ORIGIN, ...args }) }, headers)
    }

    test('registration: standard creation options, then a verified passkey enrolled at once; the first factor brings recovery codes and a mail', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('register'))
      const options = await registrationOptions(user.access_token)
      assert.equal(options.rp.id, RP_ID)
      assert.equal(options.attestation, 'none')
      assert.equal(options.authenticatorSelection?.residentKey, 'required')
      assert.equal(options.authenticatorSelection?.userVerification, 'required')
      assert.ok(Buffer.from(options.challenge, 'base64url').length >= 16, 'at least 128 random bits')
      assert.equal(Buffer.from(options.user.id, 'base64url').toString(), user.userId, 'the user handle is the account id, not the address')
      assert.deepEqual(options.excludeCredentials, [])

      const device = new SoftAuthenticator({ backupEligible: true, backedUp: true })
      const registered = await t.post('/auth/passkeys/register', { credential: device.register(options, { origin: APP_ORIGIN }), name: 'Phone' }, user.access_token)
      assert.equal(registered.statusCode, 201, registered.body)
      const { factor, recovery_codes } = registered.json().data
      assert.deepEqual([factor.type, factor.name], ['passkey', 'Phone'])
      assert.equal(recovery_codes.length, 10)
      assert.match(mailText(await t.mail.next(user.email)), /A passkey \("Phone"\) was added/)
      assert.deepEqual((await t.get('/auth/mfa', user.access_token)).json().data.factors.map((f: { id: string }) => f.id), [factor.id])
      const stored = await t.app.services.db.kysely.selectFrom('mfa_factors').selectAll().where('id', '=', factor.id).executeTakeFirstOrThrow()
      assert.deepEqual([stored.credential_id, Number(stored.sign_count), Number(stored.backup_eligible), Number(stored.backed_up), stored.transports], [device.credentials()[0]!.id, 0, 1, 1, 'internal'])
      assert.equal(stored.aaguid, '00000000-0000-0000-0000-000000000000')

      // The account's passkeys are excluded from the next registration; a second passkey brings no new codes.
      const next = await registrationOptions(user.access_token)
      assert.deepEqual(next.excludeCredentials?.map((c) => c.id), [device.credentials()[0]!.id])
      const second = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(next, { origin: ORIGIN }) }, user.access_token)
      assert.equal(second.statusCode, 201, second.body)
      assert.equal(second.json().data.recovery_codes, undefined)
      assert.equal(second.json().data.factor.name, 'Passkey')
    })

    test('registration refuses, naming why, and enrols nothing: wrong origin, wrong RP ID, no user verification, a used challenge, another purpose\'s challenge', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('refused'))
      const device = new SoftAuthenticator()
      const refused = async (credential: unknown, reason: RegExp) => {
        const response = await t.post('/auth/passkeys/register', { credential }, user.access_token)
        assert.equal(response.statusCode, 400, response.body)
        assert.equal(code(response), 'VALIDATION_ERROR')
        assert.equal(response.json().error.details[0].field, 'credential')
        assert.match(response.json().error.details[0].message, reason)
      }
      await refused(device.register(await registrationOptions(user.access_token), { origin: 'https://evil.example.net' }), /origin/)
      await refused(device.register(await registrationOptions(user.access_token), { origin: ORIGIN, rpId: 'evil.example.net' }), /RP ID/)
      await refused(device.register(await registrationOptions(user.access_token), { origin: ORIGIN, userVerified: false }), /verif/)
      const options = await registrationOptions(user.access_token)
      assert.equal((await t.post('/auth/passkeys/register', { credential: device.register(options, { origin: ORIGIN }) }, user.access_token)).statusCode, 201)
      await t.mail.next(user.email)
      await refused(new SoftAuthenticator().register(options, { origin: ORIGIN }), /challenge/)
      const { options: loginChallenge } = await loginOptions()
      await refused(new SoftAuthenticator().register({ ...(await registrationOptions(user.access_token)), challenge: loginChallenge.challenge }, { origin: ORIGIN }), /challenge/)
      // Another session of the same account (a passkey login: recent) cannot answer this session's ceremony.
      const otherSession = await passkeyLogin(device)
      assert.equal(otherSession.statusCode, 200, otherSession.body)
      const thisSessions = await registrationOptions(user.access_token)
      const answered = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(thisSessions, { origin: ORIGIN }) }, otherSession.json().data.access_token)
      assert.equal(answered.statusCode, 400, answered.body)
      assert.match(answered.json().error.details[0].message, /challenge/)
      assert.equal((await t.get('/auth/mfa', user.access_token)).json().data.factors.length, 1, 'only the one good registration')
    })

    test('passwordless login: a discoverable passkey with user verification signs in alone (aal2, hwk user mfa), in body or cookie mode', async () => {
      const user = await withPasskey()
      const { challenge_id, options } = await loginOptions()
      assert.deepEqual([options.rpId, options.userVerification, options.allowCredentials], [RP_ID, 'required', []])
      const response = await json('/auth/passkeys/login', { challenge_id, credential: user.device.authenticate(options, { origin: ORIGIN }) })
      assert.equal(response.statusCode, 200, response.body)
      const body = response.json().data
      assert.deepEqual(Object.keys(body).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type'])
      const claims = decodeJwt(body.access_token)
      assert.deepEqual([claims.sub, claims.amr, claims.acr], [user.userId, ['hwk', 'user', 'mfa'], 'aal2'])
      assert.equal((await t.get('/auth/me', body.access_token)).statusCode, 200)
      const events = (await t.app.services.audit.ofUser(user.userId)).filter((e) => e.type === 'login.succeeded').map((e) => e.reason)
      assert.ok(events.includes('passkey'))

      const cookie = await passkeyLogin(user.device, {}, { 'x-token-transport': 'cookie', origin: APP_ORIGIN })
      assert.equal(cookie.statusCode, 200, cookie.body)
      assert.equal(cookie.json().data.refresh_token, undefined)
      assert.match(String(cookie.headers['set-cookie']), /portcullis_refresh=.+HttpOnly/)
      assert.equal(cookie.headers['access-control-allow-credentials'], 'true')
    })

    test('passwordless login is refused like a login: used challenge, wrong origin or RP ID, no user verification, unknown credential, another purpose\'s challenge, a counter going back', async () => {
      const user = await withPasskey()
      const refused = async (response: Promise<LightMyRequestResponse>, why: string) => {
        const answer = await response
        assert.equal(answer.statusCode, 401, `${why}: ${answer.body}`)
        assert.equal(code(answer), 'INVALID_CREDENTIALS', why)
      }
      const { challenge_id, options } = await loginOptions()
      assert.equal((await json('/auth/passkeys/login', { challenge_id, credential: user.device.authenticate(options, { origin: ORIGIN }) })).statusCode, 200)
      await refused(json('/auth/passkeys/login', { challenge_id, credential: user.device.authenticate(options, { origin: ORIGIN }) }), 'a used challenge')
      await refused(passkeyLogin(user.device, { origin: 'https://evil.example.net' }), 'a wrong origin')
      await refused(passkeyLogin(user.device, { rpId: 'evil.example.net', credentialId: user.credentialId }), 'a wrong RP ID')
      await refused(passkeyLogin(user.device, { userVerified: false }), 'no user verification')
      const stranger = new SoftAuthenticator()
      stranger.register({ ...(await registrationOptions(user.access_token)) }, { origin: ORIGIN })
      await refused(passkeyLogin(stranger), 'a credential never registered')
      const other = await loginOptions()
      await refused(json('/auth/passkeys/login', { challenge_id: other.challenge_id, credential: user.device.authenticate((await loginOptions()).options, { origin: ORIGIN }) }), 'another ceremony\'s challenge_id')
      // A challenge made for step-up (bound to a session) is not a login's.
      const stepUp = await json('/auth/mfa/passkey/options', {}, { authorization: `Bearer ${user.access_token}` })
      assert.equal(stepUp.statusCode, 200, stepUp.body)
      await refused(json('/auth/passkeys/login', { challenge_id: other.challenge_id, credential: user.device.authenticate(stepUp.json().data.options, { origin: ORIGIN }) }), 'a step-up challenge')

      // The counter: the last login left it at 1; a signature with 1 again, or 0, is a clone's.
      assert.equal((await passkeyLogin(user.device)).statusCode, 200)
      const counter = user.device.credentials()[0]!.counter
      await refused(passkeyLogin(user.device, { counter }), 'the same counter again')
      await refused(passkeyLogin(user.device, { counter: counter - 1 }), 'a counter gone back')
      const regressed = (await t.app.services.audit.ofUser(user.userId)).filter((e) => e.type === 'mfa.passkey_counter_regressed')
      assert.equal(regressed.length, 2)
      assert.equal((await passkeyLogin(user.device)).statusCode, 200, 'the real authenticator, moving on, still works')
    })

    test('races and expiry: one assertion sent twice at once signs in once, as a login and as a second step; a challenge is dead after five minutes', async () => {
      const user = await withPasskey()
      const { challenge_id, options } = await loginOptions()
      const credential = user.device.authenticate(options, { origin: ORIGIN })
      const both = await Promise.all([0, 1].map(() => json('/auth/passkeys/login', { challenge_id, credential })))
      assert.deepEqual(both.map((r) => r.statusCode).sort(), [200, 401], both.map((r) => r.body).join(' / '))

      const mfaToken = (await json('/auth/login', { email: user.email, password: PASSWORD })).json().error.mfa.mfa_token as string
      const second = (await json('/auth/mfa/passkey/options', { mfa_token: mfaToken })).json().data.options as RequestOptionsJSON
      const assertion = user.device.authenticate(second, { origin: ORIGIN })
      const verifies = await Promise.all([0, 1].map(() => json('/auth/mfa/verify', { mfa_token: mfaToken, method: 'passkey', credential: assertion })))
      assert.deepEqual(verifies.map((r) => r.statusCode).sort(), [200, 401], verifies.map((r) => r.body).join(' / '))
      assert.ok(verifies.some((r) => code(r) === 'INVALID_MFA_TOKEN' || code(r) === 'INVALID_MFA_CODE'))

      // Options made five minutes and a second ago: the challenge is dead, for login and registration alike.
      const stale = await loginOptions()
      const staleRegistration = await registrationOptions(user.access_token)
      t.clock.advance(301)
      assert.equal(code(await json('/auth/passkeys/login', { challenge_id: stale.challenge_id, credential: user.device.authenticate(stale.options, { origin: ORIGIN }) })), 'INVALID_CREDENTIALS')
      const fresh = await registerVerifyLogin(t, uniqueEmail('stale'))
      const late = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(staleRegistration, { origin: ORIGIN }) }, fresh.access_token)
      assert.equal(code(late), 'VALIDATION_ERROR')
      assert.equal((await passkeyLogin(user.device)).statusCode, 200, 'a fresh challenge still works')
    })

    test('synced passkeys that always report 0 are fine; a disabled account gets ACCOUNT_DISABLED only after a good signature', async () => {
      const user = await withPasskey()
      for (let i = 0; i < 2; i++) assert.equal((await passkeyLogin(user.device, { counter: 0 })).statusCode, 200)
      await t.app.services.accounts.disable(user.email, 'suspended')
      assert.equal(code(await passkeyLogin(user.device, { counter: 0 })), 'ACCOUNT_DISABLED')
      assert.equal(code(await passkeyLogin(user.device, { counter: 0, userVerified: false })), 'INVALID_CREDENTIALS')
      await t.app.services.accounts.enable(user.email)
      assert.equal((await passkeyLogin(user.device, { counter: 0 })).statusCode, 200)
    })

    test('as the second factor after the password: options bound to the mfa_token, then verify with method passkey (pwd hwk mfa)', async () => {
      const user = await withPasskey()
      const first = await json('/auth/login', { email: user.email, password: PASSWORD })
      assert.equal(code(first), 'MFA_REQUIRED')
      const { mfa_token, methods } = first.json().error.mfa
      assert.deepEqual(methods, ['passkey', 'recovery_code'])
      const optionsOf = async (token: string) => {
        const response = await json('/auth/mfa/passkey/options', { mfa_token: token })
        assert.equal(response.statusCode, 200, response.body)
        return response.json().data.options as RequestOptionsJSON
      }
      const options = await optionsOf(mfa_token)
      assert.deepEqual(options.allowCredentials?.map((c) => c.id), [user.credentialId])
      assert.equal(code(await json('/auth/mfa/passkey/options', { mfa_token: 'not-a-token' })), 'INVALID_MFA_TOKEN')

      // Another login's challenge does not serve this mfa_token, and a wrong origin fails: wrong codes, counted.
      const another = (await json('/auth/login', { email: user.email, password: PASSWORD })).json().error.mfa.mfa_token
      const foreign = user.device.authenticate(await optionsOf(another), { origin: ORIGIN })
      assert.equal(code(await json('/auth/mfa/verify', { mfa_token, method: 'passkey', credential: foreign })), 'INVALID_MFA_CODE')
      assert.equal(code(await json('/auth/mfa/verify', { mfa_token, method: 'passkey', credential: user.device.authenticate(options, { origin: 'https://evil.example.net' }) })), 'INVALID_MFA_CODE')

      const verified = await json('/auth/mfa/verify', { mfa_token, method: 'passkey', credential: user.device.authenticate(options, { origin: ORIGIN }) })
      assert.equal(verified.statusCode, 200, verified.body)
      const claims = decodeJwt(verified.json().data.access_token)
      assert.deepEqual([claims.amr, claims.acr], [['pwd', 'hwk', 'mfa'], 'aal2'])
      assert.equal(code(await json('/auth/mfa/verify', { mfa_token, method: 'passkey', credential: user.device.authenticate(options, { origin: ORIGIN }) })), 'INVALID_MFA_TOKEN', 'the mfa_token is used up')
    })

    test('step-up with a passkey; renamed and removed with the other factors; a removed passkey no longer signs in; export, admin view and reset include it', async () => {
      const user = await withPasskey()
      t.clock.advance(t.config.mfaStepUpMs / 1000 + 1)
      const rename = await t.call('PATCH', `/auth/mfa/factors/${user.factorId}`, user.access_token, { name: 'Work laptop' })
      assert.equal(rename.statusCode, 200, rename.body)
      assert.equal(rename.json().data.factor.name, 'Work laptop')
      const stale = await t.call('DELETE', `/auth/mfa/factors/${user.factorId}`, user.access_token)
      assert.equal(code(stale), 'MFA_REQUIRED')
      assert.equal(stale.json().error.mfa.step_up, true)

      const options = (await json('/auth/mfa/passkey/options', {}, { authorization: `Bearer ${user.access_token}` })).json().data.options as RequestOptionsJSON
      assert.equal(code(await json('/auth/mfa/passkey/options', {})), 'AUTH_REQUIRED')
      const steppedUp = await json('/auth/mfa/step-up', { method: 'passkey', credential: user.device.authenticate(options, { origin: ORIGIN }) }, { authorization: `Bearer ${user.access_token}` })
      assert.equal(steppedUp.statusCode, 200, steppedUp.body)
      const access = steppedUp.json().data.access_token as string
      assert.ok((decodeJwt(access).amr as string[]).includes('hwk'))

      const exported = await t.get('/auth/me/export', access)
      assert.equal(exported.statusCode, 200, exported.body)
      assert.deepEqual(exported.json().data.factors.map((f: { type: string; name: string }) => [f.type, f.name]), [['passkey', 'Work laptop']])
      const { key } = await t.app.services.apiKeys.create({ name: 'passkey ops', scopes: ['users:read'], expiresAt: null })
      const shown = await t.app.inject({ method: 'GET', url: `${t.base}/admin/users/${user.userId}`, headers: { authorization: `Bearer ${key}` } })
      assert.deepEqual(shown.json().data.user.mfa.factors.map((f: { type: string }) => f.type), ['passkey'])

      const removed = await t.call('DELETE', `/auth/mfa/factors/${user.factorId}`, access)
      assert.equal(removed.statusCode, 200, removed.body)
      assert.equal(code(await passkeyLogin(user.device)), 'INVALID_CREDENTIALS', 'a removed passkey')
      assert.equal((await json('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200, 'back to a password alone')

      // The operator's reset takes passkeys with the rest.
      const other = await withPasskey()
      const reset = await t.app.inject({ method: 'POST', url: `${t.base}/admin/users/${other.userId}/mfa/reset`, headers: { authorization: `Bearer ${(await t.app.services.apiKeys.create({ name: 'passkey reset', scopes: ['users:write'], expiresAt: null })).key}` } })
      assert.equal(reset.statusCode, 200, reset.body)
      assert.equal(reset.json().data.user.mfa.enabled, false)
      assert.equal(code(await passkeyLogin(other.device)), 'INVALID_CREDENTIALS')
    })
  })
}

test('a CORS origin that cannot use passkeys is logged at start with the reason (a page on 127.0.0.1 while the RP ID is localhost)', async () => {
  const logs = new LogCapture()
  const t = await startTestApp('sqlite', { env: { LOG_LEVEL: 'warn', CORS_ORIGINS: 'http://127.0.0.1:5173,http://localhost:5173' }, overrides: { logStream: logs } })
  try {
    const warnings = logs.messages(/cannot use passkeys/)
    assert.equal(warnings.length, 1, logs.lines.join('\n'))
    assert.equal(warnings[0]!.origin, 'http://127.0.0.1:5173')
    assert.match(String(warnings[0]!.msg), /host is not localhost \(WEBAUTHN_RP_ID\)/)
  } finally {
    await t.close()
  }
})

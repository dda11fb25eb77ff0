import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import type { PasswordHasher } from '../../src/auth/passwords.ts'
import { proofStands } from '../../src/auth/pending-proofs.ts'
import { ENGINES } from '../helpers/db.ts'
import { fastHasher, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { tokenFromMail, type MailCatcher } from '../helpers/mail.ts'
import { startTestProvider, type TestAccount, type TestProvider } from '../helpers/oidc-provider.ts'
import { oathtool } from '../helpers/totp.ts'
import { SoftAuthenticator, type CreationOptionsJSON, type RequestOptionsJSON } from '../helpers/webauthn.ts'

// Account takeover by indirect paths (issue 29, items 1, 2, 5, 6 and 8; docs/mfa.md from
// "Never a bypass" on, "Passkeys", "Tokens", and the change-password rule under "Error codes"). Each
// test performs the attack and shows it refused. TOTP codes come from oathtool, passkeys from the
// software authenticator, provider sign-ins from a real OpenID provider on loopback; the service is
// reached with inject, and time passes only on the app's TestClock.
const PUBLIC_URL = 'http://localhost:4000'
/** The page origin passkey ceremonies come from: PUBLIC_URL's (RP ID `localhost`). */
const ORIGIN = PUBLIC_URL
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`
/** Kept low so that the change-password oracle test reaches the delay in a few guesses. */
const FREE_FAILURES = 3

const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined

/** The next mail to `email` that carries a one-time token, passing over the security notices before it. */
async function tokenMailedTo(mail: MailCatcher, email: string): Promise<string> {
  for (;;) {
    const next = await mail.next(email)
    try {
      return tokenFromMail(next)
    } catch {
      // A notice ("a sign-in method was added..."), not the link.
    }
  }
}

let subjects = 0
const providerAccount = (): TestAccount => ({ sub: `takeover-${++subjects}-${randomBytes(3).toString('hex')}`, email: uniqueEmail('federated'), email_verified: true, name: 'Ada Lovelace' })

/**
 * fastHasher, except that `hold()` makes the next verify (and only that one) wait, after doing its
 * work, until the test releases it: a login whose password check read the old hash and is still
 * hashing when a reset or a password change commits. Every other call passes straight through.
 */
function gatedHasher() {
  let next: { entered: () => void; released: Promise<void> } | null = null
  const hasher: PasswordHasher = {
    ...fastHasher,
    async verify(passwordHash, password) {
      const gate = next
      next = null
      const verdict = await fastHasher.verify(passwordHash, password)
      if (gate) {
        gate.entered()
        await gate.released
      }
      return verdict
    },
  }
  return {
    hasher,
    hold() {
      let entered!: () => void
      let release!: () => void
      const inHashing = new Promise<void>((resolve) => (entered = resolve))
      const released = new Promise<void>((resolve) => (release = resolve))
      next = { entered, released }
      return { inHashing, release }
    },
  }
}

for (const engine of ENGINES) {
  describe(`security: account takeover paths on ${engine}`, () => {
    let provider: TestProvider
    let t: TestApp
    const gate = gatedHasher()
    before(async () => {
      provider = await startTestProvider({ redirectUris: [CALLBACK] })
      t = await startTestApp(engine, {
        env: {
          PUBLIC_URL,
          APP_URL: `${APP}/`,
          CORS_ORIGINS: APP,
          OIDC_PROVIDERS: 'test',
          OIDC_TEST_ISSUER: provider.issuer,
          OIDC_TEST_CLIENT_ID: provider.clientId,
          OIDC_TEST_CLIENT_SECRET: provider.clientSecret,
          LOGIN_FREE_FAILURES: String(FREE_FAILURES),
          // A held verify keeps its hashing slot; the reset's hash must still find one.
          HASH_CONCURRENCY: '4',
        },
        overrides: { hasher: gate.hasher },
      })
    })
    after(async () => {
      await t?.close()
      await provider?.close()
    })

    const login = (email: string, password = PASSWORD) => t.post('/auth/login', { email, password })
    const verify = (body: Record<string, unknown>) => t.post('/auth/mfa/verify', body)
    const refreshed = async (refreshToken: string) => {
      const response = await t.post('/auth/refresh', { refresh_token: refreshToken })
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data.access_token as string
    }
    const mfaTokenOf = async (email: string, password = PASSWORD) => {
      const response = await login(email, password)
      assert.equal(code(response), 'MFA_REQUIRED', response.body)
      return response.json().error.mfa.mfa_token as string
    }
    const assertStepUp = (response: LightMyRequestResponse, why: string) => {
      assert.equal(response.statusCode, 403, `${why}: ${response.body}`)
      assert.equal(code(response), 'MFA_REQUIRED', why)
      assert.equal(response.json().error.mfa.step_up, true, why)
    }
    const startTotp = async (accessToken: string, name?: string) => {
      const started = await t.post('/auth/mfa/totp', name === undefined ? undefined : { name }, accessToken)
      assert.equal(started.statusCode, 201, started.body)
      return started.json().data as { factor_id: string; secret: string }
    }
    const confirmTotp = (accessToken: string, enrolment: { factor_id: string; secret: string }) =>
      t.post(`/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: oathtool(enrolment.secret, t.clock.now()) }, accessToken)
    const registrationOptions = async (accessToken: string) => {
      const response = await t.post('/auth/passkeys/register/options', undefined, accessToken)
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data.options as CreationOptionsJSON
    }
    /** A verified user with a confirmed authenticator app; its session (`access_token`) is recent. */
    const enrolled = async (prefix: string) => {
      const user = await registerVerifyLogin(t, uniqueEmail(prefix))
      const enrolment = await startTotp(user.access_token)
      assert.equal((await confirmTotp(user.access_token, enrolment)).statusCode, 200)
      return { ...user, secret: enrolment.secret }
    }
    /** A session of an account with MFA, made recent by its login's own second factor (a step not used before). */
    const recentSession = async (user: { email: string; secret: string }, password = PASSWORD) => {
      t.clock.advance(30)
      const done = await verify({ mfa_token: await mfaTokenOf(user.email, password), method: 'totp', code: oathtool(user.secret, t.clock.now()) })
      assert.equal(done.statusCode, 200, done.body)
      return done.json().data as { access_token: string; refresh_token: string }
    }
    const resetLink = async (email: string) => {
      assert.equal((await t.post('/auth/forgot-password', { email })).statusCode, 202)
      return tokenMailedTo(t.mail, email)
    }
    const liveSessions = async (userId: string) =>
      (await t.app.services.db.kysely.selectFrom('sessions').select('id').where('user_id', '=', userId).where('revoked_at', 'is', null).execute()).map((row) => row.id).sort()
    /** Registration challenges of the account that would still be accepted: unused, unexpired and standing (src/auth/pending-proofs.ts). */
    const registrationChallenges = async (userId: string) =>
      (await t.app.services.db.kysely.selectFrom('webauthn_challenges').select('id').where('user_id', '=', userId).where('purpose', '=', 'register').where('used_at', 'is', null).where('expires_at', '>', t.clock.now()).where(proofStands('webauthn_challenges', t.clock.now())).execute()).length

    /** A provider sign-in, start to exchange, as the typed client makes it (S256 challenge, then its verifier). */
    const providerSignIn = async (who: TestAccount) => {
      provider.addAccount(who)
      const verifier = randomBytes(32).toString('base64url')
      const query = new URLSearchParams({ redirect_to: `${APP}/after-login`, code_challenge: createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256' })
      const started = await t.app.inject({ method: 'GET', url: `${t.base}/auth/oidc/test/start?${query}` })
      assert.equal(started.statusCode, 302, started.body)
      const browser = /portcullis_oidc=([^;]+)/.exec(String(started.headers['set-cookie']))![1]!
      const returned = new URL(await provider.signIn(String(started.headers.location), who.sub))
      const back = await t.app.inject({ method: 'GET', url: `${returned.pathname}${returned.search}`, headers: { cookie: `portcullis_oidc=${browser}` } })
      assert.equal(back.statusCode, 302, back.body)
      const loginCode = new URL(String(back.headers.location)).searchParams.get('code')
      assert.ok(loginCode, String(back.headers.location))
      return t.post('/auth/oidc/exchange', { code: loginCode, code_verifier: verifier })
    }
    /**
     * An account made by a provider sign-in (no password, one identity) that then registers one
     * passkey; the registration leaves its session recent (aal2 now), as removing either needs.
     */
    const federatedWithPasskey = async () => {
      const who = providerAccount()
      const signedIn = await providerSignIn(who)
      assert.equal(signedIn.statusCode, 200, signedIn.body)
      const access = signedIn.json().data.access_token as string
      const device = new SoftAuthenticator()
      const registered = await t.post('/auth/passkeys/register', { credential: device.register(await registrationOptions(access), { origin: ORIGIN }) }, access)
      assert.equal(registered.statusCode, 201, registered.body)
      const identities = (await t.get('/auth/me/identities', access)).json().data.identities as { id: string }[]
      assert.equal(identities.length, 1)
      return { who, access, device, factorId: registered.json().data.factor.id as string, identityId: identities[0]!.id }
    }
    const passkeyLogin = async (device: SoftAuthenticator) => {
      const { challenge_id, options } = (await t.post('/auth/passkeys/login/options')).json().data as { challenge_id: string; options: RequestOptionsJSON }
      return t.post('/auth/passkeys/login', { challenge_id, credential: device.authenticate(options, { origin: ORIGIN }) })
    }
    const waysIn = async (access: string) => ({
      passkeys: ((await t.get('/auth/mfa', access)).json().data.factors as { type: string }[]).filter((f) => f.type === 'passkey').length,
      identities: ((await t.get('/auth/me/identities', access)).json().data.identities as unknown[]).length,
    })

    // ---- Item 1: a stolen pre-MFA session lifts itself -------------------------------------------

    test('a stolen pre-MFA session cannot lift itself: after the owner confirms TOTP, its parked enrolment and passkey challenge are refused (403 MFA_REQUIRED step_up), it stays aal1, and what it parked is gone (404, no challenge left)', async () => {
      const owner = await registerVerifyLogin(t, uniqueEmail('owner'))
      const stolen = (await login(owner.email)).json().data as { access_token: string; refresh_token: string }
      // While the account has no factor, the intruder parks a TOTP enrolment (keeping the secret) and a passkey challenge.
      const parked = await startTotp(stolen.access_token, 'Intruder')
      const parkedOptions = await registrationOptions(stolen.access_token)

      // The owner turns MFA on from their own session.
      const own = await startTotp(owner.access_token)
      const confirmed = await confirmTotp(owner.access_token, own)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      assert.equal(confirmed.json().data.recovery_codes.length, 10, 'the account\'s first factor')

      // The intruder tries to finish what it parked, and to start afresh.
      t.clock.advance(30)
      const intruder = await refreshed(stolen.refresh_token)
      assert.equal(decodeJwt(intruder).acr, 'aal1')
      assertStepUp(await t.post(`/auth/mfa/totp/${parked.factor_id}/confirm`, { code: oathtool(parked.secret, t.clock.now()) }, intruder), 'confirming the parked enrolment')
      const device = new SoftAuthenticator()
      const registration = await t.post('/auth/passkeys/register', { credential: device.register(parkedOptions, { origin: ORIGIN }) }, intruder)
      assertStepUp(registration, 'registering with the parked passkey challenge')
      assertStepUp(await t.post('/auth/mfa/totp', { name: 'Intruder again' }, intruder), 'a new enrolment once the account has MFA')
      assertStepUp(await t.post('/auth/passkeys/register/options', undefined, intruder), 'new passkey options once the account has MFA')

      // Still aal1: refresh carries aal1, and the sensitive actions stay shut.
      const after = await refreshed(stolen.refresh_token)
      assert.deepEqual([decodeJwt(after).acr, decodeJwt(after).amr], ['aal1', ['pwd']])
      assertStepUp(await t.get('/auth/me/export', after), 'export')
      assertStepUp(await t.post('/auth/mfa/recovery-codes', undefined, after), 'new recovery codes')

      // Not only behind the step-up gate: the first factor ended them. From the owner's recent
      // session the parked enrolment is 404, and no registration challenge of the account is left.
      const fromOwner = await t.post(`/auth/mfa/totp/${parked.factor_id}/confirm`, { code: oathtool(parked.secret, t.clock.now()) }, owner.access_token)
      assert.equal(fromOwner.statusCode, 404, fromOwner.body)
      assert.equal(code(fromOwner), 'NOT_FOUND')
      assert.equal(await registrationChallenges(owner.userId), 0)
      const factors = (await t.get('/auth/mfa', owner.access_token)).json().data.factors as { id: string }[]
      assert.deepEqual(factors.map((f) => f.id), [own.factor_id], 'nothing of the intruder\'s was enrolled')
    })

    test('a first factor that is a passkey also ends the TOTP enrolment a stolen session parked', async () => {
      const owner = await registerVerifyLogin(t, uniqueEmail('owner-passkey'))
      const stolen = (await login(owner.email)).json().data as { access_token: string; refresh_token: string }
      const parked = await startTotp(stolen.access_token, 'Intruder')
      const registered = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(await registrationOptions(owner.access_token), { origin: ORIGIN }) }, owner.access_token)
      assert.equal(registered.statusCode, 201, registered.body)
      assert.equal(registered.json().data.recovery_codes.length, 10, 'the account\'s first factor')

      const intruder = await refreshed(stolen.refresh_token)
      assertStepUp(await t.post(`/auth/mfa/totp/${parked.factor_id}/confirm`, { code: oathtool(parked.secret, t.clock.now()) }, intruder), 'confirming the parked enrolment')
      assert.equal(decodeJwt(await refreshed(stolen.refresh_token)).acr, 'aal1')
      assert.equal(code(await t.post(`/auth/mfa/totp/${parked.factor_id}/confirm`, { code: oathtool(parked.secret, t.clock.now()) }, owner.access_token)), 'NOT_FOUND')
      assert.deepEqual(((await t.get('/auth/mfa', owner.access_token)).json().data.factors as { type: string }[]).map((f) => f.type), ['passkey'])
    })

    test('control: a recent session adds a factor to an account that already has MFA (TOTP confirmed, passkey registered, no new recovery codes)', async () => {
      const owner = await enrolled('control')
      t.clock.advance(30)
      const second = await startTotp(owner.access_token, 'Tablet')
      const confirmed = await confirmTotp(owner.access_token, second)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      assert.equal(confirmed.json().data.recovery_codes, undefined)
      const passkey = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(await registrationOptions(owner.access_token), { origin: ORIGIN }) }, owner.access_token)
      assert.equal(passkey.statusCode, 201, passkey.body)
      assert.equal(passkey.json().data.recovery_codes, undefined)
      assert.deepEqual(((await t.get('/auth/mfa', owner.access_token)).json().data.factors as { type: string }[]).map((f) => f.type).sort(), ['passkey', 'totp', 'totp'])
    })

    // ---- Item 2: no factor on an unverified address ----------------------------------------------

    test('an unverified address cannot add a factor (403 EMAIL_NOT_VERIFIED for TOTP and passkeys, nothing stored); once the owner\'s reset or an operator has verified it, it can', async () => {
      // Possible only where unverified accounts may sign in.
      const open = await startTestApp(engine, { env: { PUBLIC_URL, REQUIRE_EMAIL_VERIFICATION: 'false' } })
      try {
        const refusedHere = async (access: string, why: string) => {
          for (const [route, response] of [
            ['POST /auth/mfa/totp', await open.post('/auth/mfa/totp', { name: 'Stranger' }, access)],
            ['POST /auth/passkeys/register/options', await open.post('/auth/passkeys/register/options', undefined, access)],
          ] as const) {
            assert.equal(response.statusCode, 403, `${why}, ${route}: ${response.body}`)
            assert.equal(code(response), 'EMAIL_NOT_VERIFIED', `${why}, ${route}`)
          }
        }
        const allowedHere = async (access: string, why: string) => {
          assert.equal((await open.post('/auth/mfa/totp', undefined, access)).statusCode, 201, why)
          assert.equal((await open.post('/auth/passkeys/register/options', undefined, access)).statusCode, 200, why)
        }
        const rows = async (userId: string) => ({
          factors: (await open.app.services.db.kysely.selectFrom('mfa_factors').select('id').where('user_id', '=', userId).execute()).length,
          challenges: (await open.app.services.db.kysely.selectFrom('webauthn_challenges').select('id').where('user_id', '=', userId).execute()).length,
        })
        /** A stranger registers `email` (someone else's address) and signs in at once, as REQUIRE_EMAIL_VERIFICATION=false allows. */
        const squat = async (email: string) => {
          const registered = await open.post('/auth/register', { email, password: 'the stranger chose this', full_name: 'Stranger' })
          assert.equal(registered.statusCode, 201, registered.body)
          assert.equal(registered.json().data.verification_required, false)
          const session = await open.post('/auth/login', { email, password: 'the stranger chose this' })
          assert.equal(session.statusCode, 200, session.body)
          return { userId: registered.json().data.user_id as string, access: session.json().data.access_token as string }
        }

        const owner = uniqueEmail('owner')
        const stranger = await squat(owner)
        await refusedHere(stranger.access, 'unverified')
        // Nor by answering a made-up registration: refused before any ceremony is looked at.
        const madeUp = new SoftAuthenticator().register(
          { rp: { id: 'localhost', name: 'Portcullis' }, user: { id: Buffer.from(stranger.userId).toString('base64url'), name: owner, displayName: 'Stranger' }, challenge: randomBytes(32).toString('base64url') },
          { origin: ORIGIN },
        )
        const registration = await open.post('/auth/passkeys/register', { credential: madeUp }, stranger.access)
        assert.equal(code(registration), 'EMAIL_NOT_VERIFIED', registration.body)
        assert.deepEqual(await rows(stranger.userId), { factors: 0, challenges: 0 }, 'no enrolment and no challenge was stored')

        // The owner takes the address back with a password reset, which verifies it: the stranger's
        // session ends with it, and the owner may now add factors.
        assert.equal((await open.post('/auth/forgot-password', { email: owner })).statusCode, 202)
        const reset = await open.post('/auth/reset-password', { token: await tokenMailedTo(open.mail, owner), password: 'the owner\'s own passphrase' })
        assert.equal(reset.statusCode, 200, reset.body)
        assert.equal((await open.get('/auth/me', stranger.access)).statusCode, 401, 'the stranger\'s session ended with the reset')
        const ownerSession = (await open.post('/auth/login', { email: owner, password: 'the owner\'s own passphrase' })).json().data.access_token as string
        assert.equal((await open.get('/auth/me', ownerSession)).json().data.email_verified, true)
        await allowedHere(ownerSession, 'verified by the reset')

        // Verified by an operator (admin API): the same session may add factors from then on.
        const operated = await squat(uniqueEmail('operated'))
        await refusedHere(operated.access, 'before the operator')
        const { key } = await open.app.services.apiKeys.create({ name: 'verifier', scopes: ['users:write'], expiresAt: null })
        const verified = await open.app.inject({ method: 'POST', url: `${open.base}/admin/users/${operated.userId}/verify`, headers: { authorization: `Bearer ${key}` } })
        assert.equal(verified.statusCode, 200, verified.body)
        await allowedHere(operated.access, 'verified by an operator')

        // An honest user of this mode verifies the address by the mailed link (resend-verification
        // sends it even though signing in does not need it), and may then add factors.
        const honest = await squat(uniqueEmail('honest'))
        await refusedHere(honest.access, 'before following the link')
        const email = (await open.get('/auth/me', honest.access)).json().data.email as string
        assert.equal((await open.post('/auth/resend-verification', { email })).statusCode, 202)
        await open.app.services.background.drain()
        const confirmed = await open.post('/auth/verify-email', { token: await tokenMailedTo(open.mail, email) })
        assert.equal(confirmed.statusCode, 200, confirmed.body)
        await allowedHere(honest.access, 'verified by the mailed link')
      } finally {
        await open.close()
      }
    })

    // ---- Item 5, the second-factor half: pending proofs die with the account's sessions -----------

    test('an mfa_token issued before logout-all, a password reset, a password change or an operator\'s disable and enable is INVALID_MFA_TOKEN afterwards with the right code, which a fresh mfa_token still takes', async () => {
      const user = await enrolled('pending')
      let password = PASSWORD
      const { key } = await t.app.services.apiKeys.create({ name: 'takeover tests', scopes: ['users:write'], expiresAt: null })
      const admin = (path: string, body?: unknown) =>
        t.app.inject({ method: 'POST', url: `${t.base}${path}`, headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) })
      const ends: [string, () => Promise<void>][] = [
        ['logout-all from another session', async () => {
          const other = await recentSession(user, password)
          assert.equal((await t.post('/auth/logout-all', undefined, other.access_token)).statusCode, 200)
        }],
        ['a password reset', async () => {
          const reset = await t.post('/auth/reset-password', { token: await resetLink(user.email), password: 'a passphrase after the reset' })
          assert.equal(reset.statusCode, 200, reset.body)
          password = 'a passphrase after the reset'
        }],
        ['a password change from a recent session', async () => {
          const other = await recentSession(user, password)
          const changed = await t.post('/auth/change-password', { current_password: password, new_password: 'a passphrase after the change' }, other.access_token)
          assert.equal(changed.statusCode, 200, changed.body)
          password = 'a passphrase after the change'
        }],
        ['an operator\'s disable and enable (admin API)', async () => {
          assert.equal((await admin(`/admin/users/${user.userId}/disable`, { reason: 'suspended' })).statusCode, 200)
          assert.equal((await admin(`/admin/users/${user.userId}/enable`)).statusCode, 200)
        }],
      ]
      for (const [why, end] of ends) {
        t.clock.advance(30)
        const pending = await mfaTokenOf(user.email, password)
        await end()
        t.clock.advance(30)
        const right = oathtool(user.secret, t.clock.now())
        const refused = await verify({ mfa_token: pending, method: 'totp', code: right })
        assert.equal(refused.statusCode, 401, `${why}: ${refused.body}`)
        assert.equal(code(refused), 'INVALID_MFA_TOKEN', why)
        // The code was right and was not used up: a fresh mfa_token takes it.
        const fresh = await verify({ mfa_token: await mfaTokenOf(user.email, password), method: 'totp', code: right })
        assert.equal(fresh.statusCode, 200, `${why}, a fresh mfa_token: ${fresh.body}`)
      }
    })

    test('an unconfirmed TOTP enrolment and a passkey registration challenge made before logout-all or a password change are dead afterwards (404, VALIDATION_ERROR on the challenge), even in the session that made them', async () => {
      // logout-all: every session ends, so a new one tries; and no challenge of the account is left.
      const user = await registerVerifyLogin(t, uniqueEmail('parked'))
      const parked = await startTotp(user.access_token)
      const options = await registrationOptions(user.access_token)
      assert.equal(await registrationChallenges(user.userId), 1)
      assert.equal((await t.post('/auth/logout-all', undefined, user.access_token)).statusCode, 200)
      const again = (await login(user.email)).json().data.access_token as string
      assert.equal(code(await confirmTotp(again, parked)), 'NOT_FOUND', 'the enrolment died with logout-all')
      assert.equal(await registrationChallenges(user.userId), 0, 'the registration challenge died with logout-all')
      const late = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(options, { origin: ORIGIN }) }, again)
      assert.equal(code(late), 'VALIDATION_ERROR')
      assert.match(late.json().error.details[0].message, /challenge/)
      assert.deepEqual((await t.get('/auth/mfa', again)).json().data.factors, [])

      // A password change keeps the caller's session, but not what is pending in it.
      const changer = await registerVerifyLogin(t, uniqueEmail('changer'))
      const pendingTotp = await startTotp(changer.access_token)
      const pendingOptions = await registrationOptions(changer.access_token)
      const changed = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: 'a passphrase after the change' }, changer.access_token)
      assert.equal(changed.statusCode, 200, changed.body)
      assert.equal(code(await confirmTotp(changer.access_token, pendingTotp)), 'NOT_FOUND')
      const stale = await t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(pendingOptions, { origin: ORIGIN }) }, changer.access_token)
      assert.equal(code(stale), 'VALIDATION_ERROR')
      assert.match(stale.json().error.details[0].message, /challenge/)
      // The session itself is fine: a new enrolment in it confirms.
      t.clock.advance(30)
      assert.equal((await confirmTotp(changer.access_token, await startTotp(changer.access_token))).statusCode, 200)
    })

    // ---- Item 5: the last way in -------------------------------------------------------------------

    test('the last way in: a provider-made account with one passkey may remove the passkey while the identity remains, then unlinking is 409 LAST_SIGN_IN_METHOD; the other order likewise', async () => {
      const a = await federatedWithPasskey()
      const removed = await t.call('DELETE', `/auth/mfa/factors/${a.factorId}`, a.access)
      assert.equal(removed.statusCode, 200, removed.body)
      const unlink = await t.call('DELETE', `/auth/me/identities/${a.identityId}`, a.access)
      assert.equal(unlink.statusCode, 409, unlink.body)
      assert.equal(code(unlink), 'LAST_SIGN_IN_METHOD')
      assert.deepEqual(await waysIn(a.access), { passkeys: 0, identities: 1 })
      assert.equal((await providerSignIn(a.who)).statusCode, 200, 'the identity still signs in')

      const b = await federatedWithPasskey()
      const unlinked = await t.call('DELETE', `/auth/me/identities/${b.identityId}`, b.access)
      assert.equal(unlinked.statusCode, 200, unlinked.body)
      const last = await t.call('DELETE', `/auth/mfa/factors/${b.factorId}`, b.access)
      assert.equal(last.statusCode, 409, last.body)
      assert.equal(code(last), 'LAST_SIGN_IN_METHOD')
      assert.deepEqual(await waysIn(b.access), { passkeys: 1, identities: 0 })
      assert.equal((await passkeyLogin(b.device)).statusCode, 200, 'the passkey still signs in')
    })

    test('the last way in holds under concurrency: removing the passkey and unlinking the identity at once give one 200 and one 409 LAST_SIGN_IN_METHOD, and the account keeps a way in that signs in', async () => {
      const rounds = engine === 'postgres' ? 8 : 4
      for (let round = 0; round < rounds; round++) {
        const account = await federatedWithPasskey()
        const [removal, unlink] = await Promise.all([
          t.call('DELETE', `/auth/mfa/factors/${account.factorId}`, account.access),
          t.call('DELETE', `/auth/me/identities/${account.identityId}`, account.access),
        ])
        const answers = [removal, unlink]
        assert.deepEqual(answers.map((a) => a.statusCode).sort(), [200, 409], `round ${round}: ${answers.map((a) => a.body).join(' / ')}`)
        assert.equal(code(answers.find((a) => a.statusCode === 409)!), 'LAST_SIGN_IN_METHOD')
        const left = await waysIn(account.access)
        assert.equal(left.passkeys + left.identities, 1, `round ${round}: ${JSON.stringify(left)}`)
        const signedIn = left.passkeys === 1 ? await passkeyLogin(account.device) : await providerSignIn(account.who)
        assert.equal(signedIn.statusCode, 200, `round ${round}: the way left signs in: ${signedIn.body}`)
      }
    })

    // ---- Item 6: a login racing a password reset or change -----------------------------------------

    /**
     * Starts a login with `password` and holds it in hashing (its password check has read the hash
     * the account has now), runs `commit` while it waits, then lets it finish.
     */
    const loginAcross = async (email: string, password: string, commit: () => Promise<void>) => {
      const held = gate.hold()
      const pending = login(email, password)
      try {
        await held.inHashing
        await commit()
      } finally {
        held.release()
      }
      return pending
    }
    /** The raced login yields no working session: it failed as a wrong password does, or its tokens are refused. */
    const assertNoWorkingSession = async (raced: LightMyRequestResponse, why: string) => {
      if (raced.statusCode === 200) {
        const { access_token, refresh_token } = raced.json().data
        assert.equal(code(await t.post('/auth/refresh', { refresh_token })), 'INVALID_REFRESH_TOKEN', `${why}: the raced login's refresh token`)
        assert.equal((await t.get('/auth/me', access_token)).statusCode, 401, `${why}: the raced login's access token`)
      } else {
        assert.equal(raced.statusCode, 401, `${why}: ${raced.body}`)
        assert.equal(code(raced), 'INVALID_CREDENTIALS', why)
      }
    }

    test('a login with the old password, still hashing when a password reset commits, yields no working session', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('race-reset'))
      const link = await resetLink(user.email)
      const raced = await loginAcross(user.email, PASSWORD, async () => {
        const reset = await t.post('/auth/reset-password', { token: link, password: 'the owner took it back' })
        assert.equal(reset.statusCode, 200, reset.body)
      })
      await assertNoWorkingSession(raced, 'reset')
      assert.deepEqual(await liveSessions(user.userId), [], 'every session, including one being born, is gone')
      assert.equal(code(await login(user.email)), 'INVALID_CREDENTIALS', 'the old password')
      assert.equal((await login(user.email, 'the owner took it back')).statusCode, 200, 'the new password')
    })

    test('a login with the old password, still hashing when a password change commits from another session, yields no working session; the changing session stays', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('race-change'))
      const raced = await loginAcross(user.email, PASSWORD, async () => {
        const changed = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: 'the owner changed it' }, user.access_token)
        assert.equal(changed.statusCode, 200, changed.body)
      })
      await assertNoWorkingSession(raced, 'change')
      assert.deepEqual(await liveSessions(user.userId), [decodeJwt(user.access_token).sid], 'only the changing session is live')
      assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
      assert.equal((await login(user.email, 'the owner changed it')).statusCode, 200)
    })

    test('an account with MFA: the mfa_token of a login that raced a password reset is INVALID_MFA_TOKEN, even with the right code', async () => {
      const user = await enrolled('race-mfa')
      const link = await resetLink(user.email)
      t.clock.advance(30)
      const raced = await loginAcross(user.email, PASSWORD, async () => {
        assert.equal((await t.post('/auth/reset-password', { token: link, password: 'the owner took it back' })).statusCode, 200)
      })
      const right = oathtool(user.secret, t.clock.now())
      if (raced.statusCode === 401) {
        assert.equal(code(raced), 'INVALID_CREDENTIALS', raced.body)
      } else {
        assert.equal(code(raced), 'MFA_REQUIRED', raced.body)
        const refused = await verify({ mfa_token: raced.json().error.mfa.mfa_token, method: 'totp', code: right })
        assert.equal(refused.statusCode, 401, refused.body)
        assert.equal(code(refused), 'INVALID_MFA_TOKEN')
      }
      assert.deepEqual(await liveSessions(user.userId), [])
      // The code was right: the new password and a fresh mfa_token take it.
      const fresh = await verify({ mfa_token: await mfaTokenOf(user.email, 'the owner took it back'), method: 'totp', code: right })
      assert.equal(fresh.statusCode, 200, fresh.body)
    })

    // ---- Item 8: change-password is no password oracle ---------------------------------------------

    test('change-password with a stolen access token: 40 wrong guesses get INVALID_CREDENTIALS for the free failures, then 429 RATE_LIMITED; the right password is throttled too until the delay passes; the change ends an outstanding reset link', async () => {
      const victim = await registerVerifyLogin(t, uniqueEmail('oracle'))
      const mailedBefore = await resetLink(victim.email)
      const stolen = victim.access_token
      const guesses: LightMyRequestResponse[] = []
      for (let i = 0; i < 40; i++) guesses.push(await t.post('/auth/change-password', { current_password: `guess ${i} at the password`, new_password: 'the thief wants this one' }, stolen))
      guesses.slice(0, FREE_FAILURES).forEach((answer, i) => {
        assert.equal(answer.statusCode, 401, `guess ${i}: ${answer.body}`)
        assert.equal(code(answer), 'INVALID_CREDENTIALS')
      })
      guesses.slice(FREE_FAILURES).forEach((answer, i) => {
        assert.equal(answer.statusCode, 429, `guess ${FREE_FAILURES + i}: ${answer.body}`)
        assert.equal(code(answer), 'RATE_LIMITED')
        assert.ok(Number(answer.headers['retry-after']) > 0, 'with Retry-After')
      })

      // The right password is throttled too, here and at login: the account's delay, not the guess's.
      const right = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: 'the owner\'s new passphrase' }, stolen)
      assert.equal(code(right), 'RATE_LIMITED')
      assert.equal(code(await login(victim.email)), 'RATE_LIMITED')
      // The 429s were not judged and did not lengthen the delay: once Retry-After has passed, it works.
      t.clock.advance(Number(right.headers['retry-after']))
      const changed = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: 'the owner\'s new passphrase' }, stolen)
      assert.equal(changed.statusCode, 200, changed.body)

      const late = await t.post('/auth/reset-password', { token: mailedBefore, password: 'undoing the change' })
      assert.equal(late.statusCode, 400, late.body)
      assert.equal(code(late), 'INVALID_RESET_TOKEN')
      assert.equal((await login(victim.email, 'the owner\'s new passphrase')).statusCode, 200)
      assert.equal(code(await login(victim.email, 'undoing the change')), 'INVALID_CREDENTIALS')
    })
  })
}

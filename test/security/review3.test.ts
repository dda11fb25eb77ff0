import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { mailText, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'

// The third review's findings 1, 2 and 7 (docs/SECURITY.md, "Third review"), each performed as the
// attacker would and shown refused: a pending change of address outliving the owner's recovery, an
// e-mailed sign-up racing a registration, and a login code taken at another sign-in's exchange.
const PUBLIC_URL = 'http://localhost:4000'
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`
const FORM = 'application/x-www-form-urlencoded'

const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined

for (const engine of ENGINES) {
  describe(`security, third review (pending changes, sign-up races, login-code sources) on ${engine}`, () => {
    let t: TestApp
    let provider: TestProvider
    before(async () => {
      provider = await startTestProvider({ redirectUris: [CALLBACK] })
      t = await startTestApp(engine, {
        env: {
          PUBLIC_URL,
          APP_URL: `${APP}/`,
          CORS_ORIGINS: APP,
          EMAIL_SIGNUP: 'true',
          OIDC_PROVIDERS: 'test',
          OIDC_TEST_ISSUER: provider.issuer,
          OIDC_TEST_CLIENT_ID: provider.clientId,
          OIDC_TEST_CLIENT_SECRET: provider.clientSecret,
        },
      })
    })
    after(async () => {
      await t?.close()
      await provider?.close()
    })

    const formPost = (path: string, token: string) => t.app.inject({ method: 'POST', url: path, headers: { 'content-type': FORM }, payload: `token=${encodeURIComponent(token)}` })
    const confirmChange = (token: string) => formPost('/confirm-email-change', token)
    const login = (email: string, password = PASSWORD) => t.post('/auth/login', { email, password })
    const email = async (access: string) => (await t.get('/auth/me', access)).json().data.email as string
    /** The intruder, who once had the password, asks to move the account to their own address: the link's token and the notice's cancel token. */
    const intruderAsks = async (victim: { email: string }, intruderAddress: string) => {
      const session = (await login(victim.email)).json().data as { access_token: string; refresh_token: string }
      const asked = await t.post('/auth/me/email', { new_email: intruderAddress, password: PASSWORD }, session.access_token)
      assert.equal(asked.statusCode, 202, asked.body)
      const link = tokenFromMail(await t.mail.next(intruderAddress))
      const notice = await t.mail.next(victim.email)
      assert.match(mailText(notice), new RegExp(intruderAddress.replace(/[.]/g, '\\.')), 'the notice names the new address')
      return { session, link, cancel: tokenFromMail(notice) }
    }
    const resetPassword = async (address: string, password: string) => {
      assert.equal((await t.post('/auth/forgot-password', { email: address })).statusCode, 202)
      await t.app.services.background.drain()
      const reset = await t.post('/auth/reset-password', { token: tokenFromMail(await t.mail.next(address)), password })
      assert.equal(reset.statusCode, 200, reset.body)
    }

    test('finding 1: the owner resets the password and signs out everywhere; the intruder\'s pending change of address is then dead (400 page), the address stays, and forgot-password at the intruder\'s address finds nothing', async () => {
      const owner = await registerVerifyLogin(t, uniqueEmail('owner'))
      const intruderAddress = uniqueEmail('intruder')
      const { link } = await intruderAsks(owner, intruderAddress)

      // What the docs advise the owner to do on the notice.
      await resetPassword(owner.email, 'the owner took it back')
      const fresh = (await login(owner.email, 'the owner took it back')).json().data.access_token as string
      assert.equal((await t.post('/auth/logout-all', undefined, fresh)).statusCode, 200)

      const late = await confirmChange(link)
      assert.equal(late.statusCode, 400, late.body)
      assert.match(late.body, /no longer works/)
      const back = (await login(owner.email, 'the owner took it back')).json().data.access_token as string
      assert.equal(await email(back), owner.email, 'the address did not move')
      assert.equal((await login(owner.email, 'the owner took it back')).statusCode, 200, 'the owner is not signed out by the intruder')
      assert.equal((await t.post('/auth/forgot-password', { email: intruderAddress })).statusCode, 202)
      await t.app.services.background.drain()
      await assert.rejects(t.mail.next(intruderAddress, 1500), /no mail/, 'no account has the intruder\'s address, so no reset mail goes there')
    })

    test('finding 1: a pending change dies with the session that asked (revoked by the owner) and with an operator\'s disable and enable; the link changes nothing', async () => {
      const owner = await registerVerifyLogin(t, uniqueEmail('owner'))
      const first = await intruderAsks(owner, uniqueEmail('intruder'))
      const sessions = (await t.get('/auth/sessions', owner.access_token)).json().data.sessions as { id: string; current: boolean }[]
      const intruders = sessions.filter((s) => !s.current)
      assert.equal(intruders.length, 1)
      assert.equal((await t.call('DELETE', `/auth/sessions/${intruders[0]!.id}`, owner.access_token)).statusCode, 200)
      assert.equal((await confirmChange(first.link)).statusCode, 400, 'the session that asked was revoked')
      assert.equal(await email(owner.access_token), owner.email)

      const second = await intruderAsks(owner, uniqueEmail('intruder'))
      const { key } = await t.app.services.apiKeys.create({ name: 'review3', scopes: ['users:write'], expiresAt: null })
      const admin = (path: string, body?: unknown) =>
        t.app.inject({ method: 'POST', url: `${t.base}${path}`, headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) })
      assert.equal((await admin(`/admin/users/${owner.userId}/disable`, { reason: 'suspended' })).statusCode, 200)
      assert.equal((await admin(`/admin/users/${owner.userId}/enable`)).statusCode, 200)
      assert.equal((await confirmChange(second.link)).statusCode, 400, 'a disable ended it, and the enable did not bring it back')
      const again = (await login(owner.email)).json().data.access_token as string
      assert.equal(await email(again), owner.email)
    })

    test('finding 1: the notice\'s link cancels the change: its GET only shows a button, its POST ends the change and the session that asked; the change\'s link is then dead and a second cancel finds nothing', async () => {
      const owner = await registerVerifyLogin(t, uniqueEmail('owner'))
      const intruderAddress = uniqueEmail('intruder')
      const { session, link, cancel } = await intruderAsks(owner, intruderAddress)
      for (let i = 0; i < 2; i++) {
        const shown = await t.app.inject({ method: 'GET', url: `/cancel-email-change?token=${encodeURIComponent(cancel)}` })
        assert.equal(shown.statusCode, 200)
        assert.match(shown.body, /<form method="post" action="cancel-email-change"/)
        assert.ok(shown.body.includes(intruderAddress))
      }
      const cancelled = await formPost('/cancel-email-change', cancel)
      assert.equal(cancelled.statusCode, 200, cancelled.body)
      assert.equal(code(await t.post('/auth/refresh', { refresh_token: session.refresh_token })), 'INVALID_REFRESH_TOKEN', 'the session that asked is signed out')
      assert.equal((await t.get('/auth/me', owner.access_token)).statusCode, 200, 'the owner\'s own session goes on')
      assert.equal((await confirmChange(link)).statusCode, 400)
      assert.equal(await email(owner.access_token), owner.email)
      assert.equal((await formPost('/cancel-email-change', cancel)).statusCode, 400, 'nothing left to cancel')
      assert.equal((await formPost('/cancel-email-change', link)).statusCode, 400, 'the change\'s own token cancels nothing')
      const types = (await t.app.services.db.kysely.selectFrom('audit_events').select('type').where('user_id', '=', owner.userId).execute()).map((row) => row.type)
      assert.ok(types.includes('email.change_cancelled'))
    })

    test('finding 1, control: without any of that, the intruder\'s link would have moved the address (the refusals above are the fix, not a broken flow)', async () => {
      const owner = await registerVerifyLogin(t, uniqueEmail('owner'))
      const intruderAddress = uniqueEmail('intruder')
      const { session, link } = await intruderAsks(owner, intruderAddress)
      assert.equal((await confirmChange(link)).statusCode, 200)
      assert.equal(await email(session.access_token), intruderAddress)
    })

    /** Starts an e-mailed sign-in and returns the 6-digit code from its mail. */
    const emailedCode = async (address: string, body: Record<string, string> = {}) => {
      const answer = await t.post('/auth/email/start', { email: address, ...body })
      assert.equal(answer.statusCode, 202, answer.body)
      await t.app.services.background.drain()
      let text = mailText(await t.mail.next(address))
      while (!text.includes('/sign-in/email?token=')) text = mailText(await t.mail.next(address))
      return {
        code: /^(\d{6})$/m.exec(text)![1]!,
        token: /sign-in\/email\?token=([A-Za-z0-9_-]+)/.exec(text)![1]!,
        cookie: /portcullis_email=([^;]+)/.exec(String(answer.headers['set-cookie']))?.[1],
      }
    }

    test('finding 2: an e-mailed sign-up that finds the address registered meanwhile with a password makes the code that account\'s first proof: the squatter\'s password stops working and the owner is told', async () => {
      const address = uniqueEmail('raced')
      const { code: mailed } = await emailedCode(address)
      // While the code is on its way, someone registers the owner's address with a password.
      const squatted = await t.post('/auth/register', { email: address, password: 'the squatter\'s password', full_name: 'Squatter' })
      assert.equal(squatted.statusCode, 201, squatted.body)
      await t.app.services.background.drain()
      while (!mailText(await t.mail.next(address)).includes('verify-email')) {
        // The verification mail of the squatter's registration, among what the address received.
      }

      const signedIn = await t.post('/auth/email/verify', { email: address, code: mailed })
      assert.equal(signedIn.statusCode, 200, signedIn.body)
      const access = signedIn.json().data.access_token as string
      assert.equal(decodeJwt(access).sub, squatted.json().data.user_id, 'the account the squatter made, now the owner\'s')
      const me = (await t.get('/auth/me', access)).json().data
      assert.equal(me.email_verified, true)
      assert.equal(code(await login(address, 'the squatter\'s password')), 'INVALID_CREDENTIALS', 'the squatter\'s password no longer works')
      await t.app.services.background.drain()
      assert.match(mailText(await t.mail.next(address)), /earlier password no longer works|no longer works/)
    })

    test('finding 7: a login code from an e-mailed link is refused at the identity-provider exchange (it would claim amr fed), and dies there; the e-mail exchange takes a fresh one', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('source'))
      const verifier = randomBytes(32).toString('base64url')
      const challenge = createHash('sha256').update(verifier).digest('base64url')
      const press = async () => {
        const started = await emailedCode(user.email, { redirect_to: `${APP}/signed-in`, code_challenge: challenge, code_challenge_method: 'S256' })
        const pressed = await t.app.inject({ method: 'POST', url: '/sign-in/email', headers: { 'content-type': FORM, 'sec-fetch-site': 'same-origin', cookie: `portcullis_email=${started.cookie}` }, payload: `token=${started.token}` })
        assert.equal(pressed.statusCode, 303, pressed.body)
        return new URL(String(pressed.headers.location)).searchParams.get('code')!
      }
      const loginCode = await press()
      const wrongDoor = await t.post('/auth/oidc/exchange', { code: loginCode, code_verifier: verifier })
      assert.equal(wrongDoor.statusCode, 401, wrongDoor.body)
      assert.equal(code(wrongDoor), 'INVALID_CREDENTIALS')
      assert.equal((await t.post('/auth/email/exchange', { code: loginCode, code_verifier: verifier })).statusCode, 401, 'spent at the wrong door')
      const right = await t.post('/auth/email/exchange', { code: await press(), code_verifier: verifier })
      assert.equal(right.statusCode, 200, right.body)
      assert.deepEqual(decodeJwt(right.json().data.access_token).amr, ['otp'])
    })
  })
}

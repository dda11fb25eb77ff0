import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { mailText } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { oathtool } from '../helpers/totp.ts'

/** Sign in with an e-mailed code or link (docs/email-sign-in.md, "Sign in with an e-mailed code or link"). */
const APP = 'http://localhost:4000'

for (const engine of ENGINES) {
  describe(`sign-in with an e-mailed code or link on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { PUBLIC_URL: APP, EMAIL_SIGNUP: 'true' } })
    })
    after(async () => {
      await t?.close()
    })

    /** Starts a sign-in; the start's answer, its cookie, and the mail's code and link token. */
    const start = async (email: string, body: Record<string, string> = {}, expectMail = true) => {
      const answer = await t.post('/auth/email/start', { email, ...body })
      await t.app.services.background.drain()
      const cookie = /portcullis_email=([^;]+)/.exec(String(answer.headers['set-cookie']))?.[1]
      if (!expectMail) return { answer, cookie, code: '', token: '' }
      // The sign-in mail (a notice about the account may come first).
      let text = mailText(await t.mail.next(email))
      while (!text.includes('/sign-in/email?token=')) text = mailText(await t.mail.next(email))
      const code = /^(\d{6})$/m.exec(text)?.[1]
      const token = /sign-in\/email\?token=([A-Za-z0-9_-]+)/.exec(text)?.[1]
      assert.ok(code && token, text)
      return { answer, cookie, code, token }
    }
    const verify = (email: string, code: string) => t.post('/auth/email/verify', { email, code })
    const linkPage = (token: string, method: 'GET' | 'HEAD' = 'GET', headers: Record<string, string> = {}) =>
      t.app.inject({ method, url: `/sign-in/email?token=${token}`, headers })
    const pressLink = (token: string, cookie?: string) =>
      t.app.inject({ method: 'POST', url: '/sign-in/email', headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin', ...(cookie ? { cookie: `portcullis_email=${cookie}` } : {}) }, payload: `token=${token}` })

    test('the start answers alike for a known and an unknown address; the code signs in with amr otp, aal1', async () => {
      const user = await registerVerifyLogin(t)
      const known = await start(user.email)
      assert.equal(known.answer.statusCode, 202)
      assert.ok(known.cookie, 'the start binds the browser')
      const signedIn = await verify(user.email, known.code)
      assert.equal(signedIn.statusCode, 200, signedIn.body)
      const claims = decodeJwt(signedIn.json().data.access_token)
      assert.deepEqual([claims.sub, claims.amr, claims.acr], [user.userId, ['otp'], 'aal1'])
      // Used once.
      assert.equal((await verify(user.email, known.code)).statusCode, 401)
    })

    test('a wrong code is INVALID_CREDENTIALS, like an unknown address; the fifth wrong one ends the code; a new start ends the previous code', async () => {
      const user = await registerVerifyLogin(t)
      const first = await start(user.email)
      const second = await start(user.email)
      assert.equal((await verify(user.email, first.code)).statusCode, 401, 'a new start ended the first code')
      const wrong = second.code === '000000' ? '000001' : '000000'
      const unknown = await verify(uniqueEmail('nobody'), wrong)
      const mistaken = await verify(user.email, wrong)
      assert.equal(mistaken.statusCode, 401)
      assert.equal(mistaken.body, unknown.body, 'no oracle on the address')
      for (let i = 0; i < 4; i++) assert.equal((await verify(user.email, wrong)).statusCode, 401)
      assert.equal((await verify(user.email, second.code)).statusCode, 401, 'five wrong codes ended it')
    })

    test('the link: GET and HEAD (link previews too) use nothing up; the starting browser goes back with a login code it alone can exchange; another device is shown the code', async () => {
      const user = await registerVerifyLogin(t)
      const { cookie, code, token } = await start(user.email, { redirect_to: `${APP}/signed-in` })
      for (const agent of ['Mozilla/5.0', 'Slackbot-LinkExpanding 1.0', 'Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook)', 'Mozilla/5.0 (compatible; Google-Safety; +http://www.google.com/bot.html)']) {
        for (const method of ['GET', 'HEAD'] as const) assert.equal((await linkPage(token, method, { 'user-agent': agent })).statusCode, 200, `${method} ${agent}`)
      }
      // Another device: the code to type, and the sign-in stays live.
      const elsewhere = await pressLink(token)
      assert.equal(elsewhere.statusCode, 200)
      assert.match(elsewhere.body, new RegExp(`>${code}<`))
      // The starting browser: back to the application with a login code.
      const here = await pressLink(token, cookie)
      assert.equal(here.statusCode, 303, here.body)
      const back = new URL(String(here.headers.location))
      assert.equal(`${back.origin}${back.pathname}`, `${APP}/signed-in`)
      const loginCode = back.searchParams.get('code')!
      // Without the starting browser's cookie the code opens nothing, and dies.
      assert.equal((await t.post('/auth/email/exchange', { code: loginCode })).statusCode, 401)
      const again = await start(user.email, { redirect_to: `${APP}/signed-in` })
      const next = new URL(String((await pressLink(again.token, again.cookie)).headers.location)).searchParams.get('code')!
      const exchanged = await t.app.inject({ method: 'POST', url: `${t.base}/auth/email/exchange`, headers: { 'content-type': 'application/json', cookie: `portcullis_email=${again.cookie}` }, payload: JSON.stringify({ code: next }) })
      assert.equal(exchanged.statusCode, 200, exchanged.body)
      assert.deepEqual(decodeJwt(exchanged.json().data.access_token).amr, ['otp'])
      assert.equal((await linkPage(again.token)).statusCode, 400, 'the link is used')
    })

    test('refusals: an expired code, a login code replayed, two right codes at once (one session), a link token as a code', async () => {
      const user = await registerVerifyLogin(t)
      const expired = await start(user.email)
      t.clock.advance(601)
      assert.equal((await verify(user.email, expired.code)).statusCode, 401, 'ten minutes')
      assert.equal((await linkPage(expired.token)).statusCode, 400, 'the link expired with it')

      const raced = await start(user.email)
      const both = await Promise.all([verify(user.email, raced.code), verify(user.email, raced.code)])
      assert.deepEqual(both.map((answer) => answer.statusCode).sort(), [200, 401], 'of two at once, one signs in')

      const linked = await start(user.email, { redirect_to: `${APP}/signed-in` })
      assert.equal((await verify(user.email, linked.token)).statusCode, 401, 'the link token is not a code')
      const loginCode = new URL(String((await pressLink(linked.token, linked.cookie)).headers.location)).searchParams.get('code')!
      const exchange = () => t.app.inject({ method: 'POST', url: `${t.base}/auth/email/exchange`, headers: { 'content-type': 'application/json', cookie: `portcullis_email=${linked.cookie}` }, payload: JSON.stringify({ code: loginCode }) })
      assert.equal((await exchange()).statusCode, 200)
      assert.equal((await exchange()).statusCode, 401, 'a login code opens one session')
    })

    test('a start with a code_challenge: the login code is exchanged only with its verifier', async () => {
      const user = await registerVerifyLogin(t)
      const verifier = randomBytes(32).toString('base64url')
      const challenge = createHash('sha256').update(verifier).digest('base64url')
      const { cookie, token } = await start(user.email, { redirect_to: `${APP}/signed-in`, code_challenge: challenge, code_challenge_method: 'S256' })
      const loginCode = new URL(String((await pressLink(token, cookie)).headers.location)).searchParams.get('code')!
      const exchanged = await t.post('/auth/email/exchange', { code: loginCode, code_verifier: verifier })
      assert.equal(exchanged.statusCode, 200, exchanged.body)
    })

    test('after the code, never before: MFA_REQUIRED for an account with a second factor, ACCOUNT_DISABLED for a disabled one', async () => {
      const user = await registerVerifyLogin(t)
      const enrolment = (await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)).json().data
      assert.equal((await t.post(`/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: oathtool(enrolment.secret, t.clock.now()) }, user.access_token)).statusCode, 200)
      const mfa = await verify(user.email, (await start(user.email)).code)
      assert.equal(mfa.statusCode, 403)
      assert.equal(mfa.json().error.code, 'MFA_REQUIRED')
      t.clock.advance(30)
      const second = await t.post('/auth/mfa/verify', { mfa_token: mfa.json().error.mfa.mfa_token, method: 'totp', code: oathtool(enrolment.secret, t.clock.now()) })
      assert.equal(second.statusCode, 200, second.body)
      const after = decodeJwt(second.json().data.access_token)
      assert.ok((after.amr as string[]).includes('otp') && (after.amr as string[]).includes('mfa'), String(after.amr))
      assert.equal(after.acr, 'aal2')

      const disabled = await registerVerifyLogin(t)
      await t.app.services.accounts.disable(disabled.email, 'suspended')
      const refused = await verify(disabled.email, (await start(disabled.email)).code)
      assert.equal(refused.statusCode, 403)
      assert.equal(refused.json().error.code, 'ACCOUNT_DISABLED')
    })

    test('EMAIL_SIGNUP: the first e-mailed sign-in of an unknown address makes a verified account without a password', async () => {
      const email = uniqueEmail('newcomer')
      const { code } = await start(email)
      const signedIn = await verify(email, code)
      assert.equal(signedIn.statusCode, 200, signedIn.body)
      const me = (await t.get('/auth/me', signedIn.json().data.access_token)).json().data
      assert.equal(me.email, email)
      assert.equal(me.email_verified, true)
      assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 401, 'no password')
    })

    test('the first proof of an address registered with a password by someone else ends that password and its sessions, and tells the owner', async () => {
      const email = uniqueEmail('squatted')
      assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Squatter' })).statusCode, 201)
      await t.mail.next(email) // the registrant's verification mail, which the owner ignores
      const { code } = await start(email)
      const owner = await verify(email, code)
      assert.equal(owner.statusCode, 200, owner.body)
      assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 401, 'the registrant\'s password no longer works')
      assert.match(mailText(await t.mail.next(email)), /that password no longer works/)
    })
  })
}

for (const engine of ENGINES) {
  describe(`a squatted address without required verification on ${engine}`, () => {
    test('the registrant signed in with the password is signed out when the owner proves the address, and the password ends', async () => {
      const t = await startTestApp(engine, { env: { PUBLIC_URL: APP, REQUIRE_EMAIL_VERIFICATION: 'false' } })
      try {
        const email = uniqueEmail('squatted-open')
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Squatter' })).statusCode, 201)
        const squatter = (await t.post('/auth/login', { email, password: PASSWORD })).json().data as { access_token: string; refresh_token: string }
        assert.equal((await t.get('/auth/me', squatter.access_token)).statusCode, 200)
        await t.post('/auth/email/start', { email })
        await t.app.services.background.drain()
        let text = mailText(await t.mail.next(email))
        while (!text.includes('/sign-in/email?token=')) text = mailText(await t.mail.next(email))
        const owner = await t.post('/auth/email/verify', { email, code: /^(\d{6})$/m.exec(text)![1]! })
        assert.equal(owner.statusCode, 200, owner.body)
        assert.equal((await t.get('/auth/me', squatter.access_token)).statusCode, 401, "the registrant's session was revoked")
        assert.equal((await t.post('/auth/refresh', { refresh_token: squatter.refresh_token })).statusCode, 401)
        assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 401)
        assert.equal((await t.get('/auth/me', owner.json().data.access_token)).statusCode, 200, "the owner's own session is the one left")
      } finally {
        await t.close()
      }
    })
  })
}

describe('fifty wrong codes at once on postgres', () => {
  test('at most five are judged: the code is dead after them, whatever the order', async () => {
    if (!process.env.DATABASE_URL) throw new Error('DATABASE_URL is not set: this test needs PostgreSQL (npm test starts one)')
    const t = await startTestApp('postgres', { env: { PUBLIC_URL: APP } })
    try {
      const user = await registerVerifyLogin(t)
      await t.post('/auth/email/start', { email: user.email })
      await t.app.services.background.drain()
      const code = /^(\d{6})$/m.exec(mailText(await t.mail.next(user.email)))![1]!
      const wrong = code === '000000' ? '000001' : '000000'
      const answers = await Promise.all(Array.from({ length: 50 }, () => t.post('/auth/email/verify', { email: user.email, code: wrong })))
      assert.ok(answers.every((answer) => answer.statusCode === 401 || answer.statusCode === 429), answers.map((a) => a.statusCode).join(','))
      const row = await t.app.services.db.kysely.selectFrom('email_sign_ins').select(['failures', 'used_at']).where('email', '=', user.email).executeTakeFirstOrThrow()
      assert.equal(row.failures, 5, 'five attempts were counted on the code, no more')
      assert.equal(row.used_at, null)
      // The right code now opens nothing: refused by the code's own limit, or first by the account's delay.
      const late = await t.post('/auth/email/verify', { email: user.email, code })
      assert.ok(late.statusCode === 401 || late.statusCode === 429, late.body)
      assert.equal(late.json().data, undefined)
    } finally {
      await t.close()
    }
  })
})

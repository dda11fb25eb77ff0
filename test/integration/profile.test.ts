import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { ENGINES } from '../helpers/db.ts'
import { mailText, signInCodeFromMail, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

const FORM = 'application/x-www-form-urlencoded'

for (const engine of ENGINES) {
  describe(`profile and address changes on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { EMAIL_SIGNUP: 'true' } })
    })
    after(async () => {
      await t.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const page = (method: 'GET' | 'POST', token: string) =>
      method === 'GET'
        ? t.app.inject({ method, url: `/confirm-email-change?token=${encodeURIComponent(token)}` })
        : t.app.inject({ method, url: '/confirm-email-change', headers: { 'content-type': FORM }, payload: `token=${encodeURIComponent(token)}` })
    const events = async (userId: string) =>
      (await t.app.services.db.kysely.selectFrom('audit_events').select('type').where('user_id', '=', userId).orderBy('id').execute()).map((row) => row.type)
    /** Asks for a change and returns the link's token, read from the mail to the new address. */
    const askFor = async (access: string, newEmail: string, password: string | undefined = PASSWORD) => {
      const asked = await t.post('/auth/me/email', { new_email: newEmail, ...(password === undefined ? {} : { password }) }, access)
      assert.equal(asked.statusCode, 202, asked.body)
      return tokenFromMail(await t.mail.next(newEmail))
    }

    test('PATCH /auth/me changes the name, answers as GET /auth/me, and refuses a bad one without changing anything', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('name'))
      const renamed = await t.call('PATCH', '/auth/me', user.access_token, { full_name: '  Ada King ' })
      assert.equal(renamed.statusCode, 200, renamed.body)
      const me = (await t.get('/auth/me', user.access_token)).json().data
      assert.deepEqual(renamed.json().data, me)
      assert.equal(me.full_name, 'Ada King')

      for (const body of [{ full_name: '' }, { full_name: 'x'.repeat(101) }, {}, { full_name: 'Ada', email: 'other@example.com' }]) {
        const refused = await t.call('PATCH', '/auth/me', user.access_token, body)
        assert.equal(refused.statusCode, 400, JSON.stringify(body))
        assert.equal(code(refused), 'VALIDATION_ERROR')
      }
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.full_name, 'Ada King')
      assert.ok((await events(user.userId)).includes('profile.updated'))
      assert.equal((await t.call('PATCH', '/auth/me', undefined, { full_name: 'Nobody' })).statusCode, 401)
    })

    test('a change of address: nothing changes until the link is used; then the address is verified, the other sessions end, and the old address hears at both ends', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('move'))
      const other = await t.post('/auth/login', { email: user.email, password: PASSWORD })
      const otherRefresh = other.json().data.refresh_token as string
      const newEmail = uniqueEmail('moved')

      const token = await askFor(user.access_token, newEmail.toUpperCase())
      const notice = mailText(await t.mail.next(user.email))
      assert.match(notice, new RegExp(newEmail.replace(/[.]/g, '\\.')), 'the first notice names the new address')
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email, 'nothing changed yet')
      assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).statusCode, 200, 'the old address still signs in')

      // The GET shows a button and uses nothing up.
      for (let i = 0; i < 2; i++) {
        const shown = await page('GET', token)
        assert.equal(shown.statusCode, 200)
        assert.match(shown.body, /<form method="post" action="confirm-email-change"/)
        assert.ok(shown.body.includes(newEmail))
      }
      const confirmed = await page('POST', token)
      assert.equal(confirmed.statusCode, 200, confirmed.body)
      assert.ok(confirmed.body.includes(newEmail))

      const me = (await t.get('/auth/me', user.access_token)).json().data
      assert.equal(me.email, newEmail, 'the session that asked goes on')
      assert.equal(me.email_verified, true)
      assert.equal(code(await t.post('/auth/refresh', { refresh_token: otherRefresh })), 'INVALID_REFRESH_TOKEN', 'every other session ended')
      assert.match(mailText(await t.mail.next(user.email)), /is now/, 'the second notice goes to the old address')
      assert.equal(code(await t.post('/auth/login', { email: user.email, password: PASSWORD })), 'INVALID_CREDENTIALS')
      assert.equal((await t.post('/auth/login', { email: newEmail, password: PASSWORD })).statusCode, 200)

      assert.equal((await page('POST', token)).statusCode, 400, 'the link works once')
      assert.equal((await page('GET', token)).statusCode, 400)
      const types = await events(user.userId)
      assert.ok(types.includes('email.change_requested') && types.includes('email.changed'))
      // The audit trail never holds an address.
      const rows = await t.app.services.db.kysely.selectFrom('audit_events').selectAll().where('user_id', '=', user.userId).execute()
      assert.ok(!JSON.stringify(rows).includes(newEmail) && !JSON.stringify(rows).includes(user.email))
    })

    test('the password is required and checked like a login; a wrong one is 401 and sends nothing', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('pw'))
      const target = uniqueEmail('target')
      const missing = await t.post('/auth/me/email', { new_email: target }, user.access_token)
      assert.equal(code(missing), 'VALIDATION_ERROR')
      assert.deepEqual(missing.json().error.details, [{ field: 'password', message: 'is required' }])
      const wrong = await t.post('/auth/me/email', { new_email: target, password: 'not the password' }, user.access_token)
      assert.equal(wrong.statusCode, 401)
      assert.equal(code(wrong), 'INVALID_CREDENTIALS')
      assert.ok((await events(user.userId)).includes('login.failed'))
      for (const body of [{ new_email: 'not an address', password: PASSWORD }, { new_email: user.email, password: PASSWORD }]) {
        assert.equal(code(await t.post('/auth/me/email', body, user.access_token)), 'VALIDATION_ERROR', JSON.stringify(body))
      }
      await assert.rejects(t.mail.next(target, 300), 'no mail went to the new address')
      assert.equal(code(await t.post('/auth/me/email', { new_email: target, password: PASSWORD })), 'AUTH_REQUIRED')
    })

    test('an address that belongs to another account: the same 202, and the link then shows 409 and changes nothing', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('clash'))
      const holder = await registerVerifyLogin(t, uniqueEmail('holder'))
      const free = uniqueEmail('free')
      // Taken at the time of asking: the answer is the one for a free address.
      const takenToken = await askFor(user.access_token, holder.email)
      await t.mail.next(user.email)
      const taken = await page('POST', takenToken)
      assert.equal(taken.statusCode, 409, taken.body)
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)

      // Free when asked, taken by a registration before the link is used.
      const token = await askFor(user.access_token, free)
      await t.mail.next(user.email)
      assert.equal((await page('POST', takenToken)).statusCode, 400, 'a new request retires the link before it')
      await registerVerifyLogin(t, free)
      assert.equal((await page('POST', token)).statusCode, 409)
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)
    })

    test('a link expires after 24 hours; a newer request retires the older link', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('expire'))
      const first = await askFor(user.access_token, uniqueEmail('first'))
      const second = await askFor(user.access_token, uniqueEmail('second'))
      assert.equal((await page('GET', first)).statusCode, 400)
      assert.equal((await page('GET', second)).statusCode, 200)
      t.clock.advance(24 * 3600 + 1)
      assert.equal((await page('POST', second)).statusCode, 400)
      assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 401, 'the access token expired meanwhile too')
    })

    test('the link page refuses a post from another site, and a mailed link of the old address dies with the change', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('csrf'))
      const newEmail = uniqueEmail('csrf-new')
      const token = await askFor(user.access_token, newEmail)
      const crossSite = await t.app.inject({ method: 'POST', url: '/confirm-email-change', headers: { 'content-type': FORM, 'sec-fetch-site': 'cross-site' }, payload: `token=${token}` })
      assert.equal(crossSite.statusCode, 403)
      assert.equal((await page('GET', token)).statusCode, 200, 'the refused post used nothing up')

      await t.mail.next(user.email) // the notice of the request
      assert.equal((await t.post('/auth/forgot-password', { email: user.email })).statusCode, 202)
      const resetToken = tokenFromMail(await t.mail.next(user.email))
      assert.equal((await page('POST', token)).statusCode, 200)
      assert.equal(code(await t.post('/auth/reset-password', { token: resetToken, password: 'a brand new passphrase' })), 'INVALID_RESET_TOKEN')
    })

    test('two confirmations of one link at once change the address once; a token of another purpose opens neither page', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('race'))
      const newEmail = uniqueEmail('race-new')
      const token = await askFor(user.access_token, newEmail)
      await t.mail.next(user.email)
      const answers = await Promise.all([page('POST', token), page('POST', token)])
      assert.deepEqual(answers.map((answer) => answer.statusCode).sort(), [200, 400])
      assert.equal((await events(user.userId)).filter((type) => type === 'email.changed').length, 1)
      assert.match(mailText(await t.mail.next(user.email)), /is now/)
      await assert.rejects(t.mail.next(user.email, 300), 'one notice of the change, not two')

      // A verification token is no change-of-address token, and the other way round.
      const other = uniqueEmail('purpose')
      assert.equal((await t.post('/auth/register', { email: other, password: PASSWORD, full_name: 'Purpose' })).statusCode, 201)
      const verifyToken = tokenFromMail(await t.mail.next(other))
      assert.equal((await page('GET', verifyToken)).statusCode, 400)
      assert.equal((await page('POST', verifyToken)).statusCode, 400)
      const changer = await registerVerifyLogin(t, uniqueEmail('purpose-changer'))
      const changeToken = await askFor(changer.access_token, uniqueEmail('purpose-target'))
      assert.equal(code(await t.post('/auth/verify-email', { token: changeToken })), 'INVALID_VERIFICATION_TOKEN')
      assert.equal(code(await t.post('/auth/reset-password', { token: changeToken, password: 'a brand new passphrase' })), 'INVALID_RESET_TOKEN')
      assert.equal((await page('GET', changeToken)).statusCode, 200, 'and still good for its own page')
      assert.equal((await t.post('/auth/verify-email', { token: verifyToken })).statusCode, 200, 'nor was the verification token spent')
    })

    test('an account without a password changes its address only soon after signing in', async () => {
      const email = uniqueEmail('nopw')
      assert.equal((await t.post('/auth/email/start', { email })).statusCode, 202)
      const signInCode = signInCodeFromMail(await t.mail.next(email))
      const signedIn = await t.post('/auth/email/verify', { email, code: signInCode })
      assert.equal(signedIn.statusCode, 200, signedIn.body)
      const access = signedIn.json().data.access_token as string
      const refresh = signedIn.json().data.refresh_token as string
      const newEmail = uniqueEmail('nopw-new')
      await askFor(access, newEmail, undefined)

      t.clock.advance(11 * 60)
      const later = (await t.post('/auth/refresh', { refresh_token: refresh })).json().data.access_token as string
      const stale = await t.post('/auth/me/email', { new_email: uniqueEmail('nopw-late') }, later)
      assert.equal(stale.statusCode, 401)
      assert.equal(code(stale), 'INVALID_CREDENTIALS')
      assert.match(stale.json().error.message, /sign in again/i)
    })
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import type { MailMessage, MailTransport } from '../../src/mail/index.ts'
import { ENGINES } from '../helpers/db.ts'
import { tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

const NEW_PASSWORD = 'an entirely different passphrase'

for (const engine of ENGINES) {
  describe(`account lifecycle on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine)
    })
    after(async () => {
      await t.close()
    })

    const code = (response: { json(): { error?: { code: string } } }) => response.json().error?.code
    const login = async (email: string, password = PASSWORD, agent = 'test-agent') => {
      const response = await t.app.inject({
        method: 'POST', url: `${t.base}/auth/login`,
        headers: { 'content-type': 'application/json', 'user-agent': agent },
        payload: JSON.stringify({ email, password }),
      })
      assert.equal(response.statusCode, 200, response.body)
      return response.json().data as { access_token: string; refresh_token: string }
    }

    describe('logout', () => {
      test('revokes that session only: its refresh and access tokens stop, other sessions go on', async () => {
        const user = await registerVerifyLogin(t)
        const other = await login(user.email)
        assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
        const response = await t.post('/auth/logout', { refresh_token: user.refresh_token })
        assert.equal(response.statusCode, 200)
        assert.equal(response.json().success, true)
        assert.equal(code(await t.post('/auth/refresh', { refresh_token: user.refresh_token })), 'INVALID_REFRESH_TOKEN')
        assert.equal(code(await t.get('/auth/me', user.access_token)), 'INVALID_TOKEN')
        assert.equal((await t.get('/auth/me', other.access_token)).statusCode, 200)
      })

      test('is idempotent and accepts an expired refresh token this service signed', async () => {
        const user = await registerVerifyLogin(t)
        assert.equal((await t.post('/auth/logout', { refresh_token: user.refresh_token })).statusCode, 200)
        assert.equal((await t.post('/auth/logout', { refresh_token: user.refresh_token })).statusCode, 200)
        const later = await login(user.email)
        t.clock.advance(7 * 24 * 3600 + 60)
        try {
          assert.equal((await t.post('/auth/logout', { refresh_token: later.refresh_token })).statusCode, 200)
        } finally {
          t.clock.advance(-(7 * 24 * 3600 + 60))
        }
        assert.equal(code(await t.get('/auth/me', later.access_token)), 'INVALID_TOKEN')
      })

      test('a token this service did not sign, or an access token, is INVALID_REFRESH_TOKEN', async () => {
        const user = await registerVerifyLogin(t)
        const [h, p] = user.refresh_token.split('.')
        for (const token of ['garbage', `${h}.${p}.AAAA`, user.access_token]) {
          const response = await t.post('/auth/logout', { refresh_token: token })
          assert.equal(response.statusCode, 401)
          assert.equal(code(response), 'INVALID_REFRESH_TOKEN')
        }
        assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
      })
    })

    describe('logout-all and sessions', () => {
      test('logout-all revokes every session of the user, including the caller', async () => {
        const user = await registerVerifyLogin(t)
        const second = await login(user.email)
        const response = await t.post('/auth/logout-all', undefined, user.access_token)
        assert.equal(response.statusCode, 200)
        assert.equal(response.json().data.revoked, 2)
        for (const token of [user.access_token, second.access_token]) assert.equal(code(await t.get('/auth/me', token)), 'INVALID_TOKEN')
        assert.equal(code(await t.post('/auth/refresh', { refresh_token: second.refresh_token })), 'INVALID_REFRESH_TOKEN')
      })

      test('GET /auth/sessions lists live sessions with `current` on the caller', async () => {
        const user = await registerVerifyLogin(t)
        const phone = await login(user.email, PASSWORD, 'phone/1.0')
        const doomed = await login(user.email, PASSWORD, 'old-laptop')
        await t.post('/auth/logout', { refresh_token: doomed.refresh_token })
        const response = await t.get('/auth/sessions', phone.access_token)
        assert.equal(response.statusCode, 200)
        const list = response.json().data.sessions as { id: string; current: boolean; user_agent: string }[]
        assert.equal(list.length, 2)
        for (const session of list) assert.deepEqual(Object.keys(session).sort(), ['client', 'created_at', 'current', 'id', 'last_used_at', 'user_agent'])
        const current = list.filter((s) => s.current)
        assert.equal(current.length, 1)
        assert.equal(current[0]!.id, decodeJwt(phone.access_token).sid)
        assert.equal(current[0]!.user_agent, 'phone/1.0')
      })

      test("DELETE /auth/sessions/{id} revokes one's own session; anyone else's is 404 and stays live", async () => {
        const owner = await registerVerifyLogin(t)
        const laptop = await login(owner.email)
        const stranger = await registerVerifyLogin(t)
        const laptopSid = decodeJwt(laptop.access_token).sid as string
        const strangerSid = decodeJwt(stranger.access_token).sid as string

        const theirs = await t.call('DELETE', `/auth/sessions/${strangerSid}`, owner.access_token)
        assert.equal(theirs.statusCode, 404)
        assert.equal(code(theirs), 'NOT_FOUND')
        assert.equal((await t.get('/auth/me', stranger.access_token)).statusCode, 200)
        for (const id of ['not-a-uuid', '00000000-0000-4000-8000-000000000000']) {
          assert.equal((await t.call('DELETE', `/auth/sessions/${id}`, owner.access_token)).statusCode, 404)
        }

        const mine = await t.call('DELETE', `/auth/sessions/${laptopSid}`, owner.access_token)
        assert.equal(mine.statusCode, 200)
        assert.deepEqual(mine.json().data, { id: laptopSid, revoked: true })
        assert.equal(code(await t.get('/auth/me', laptop.access_token)), 'INVALID_TOKEN')
        assert.equal((await t.get('/auth/me', owner.access_token)).statusCode, 200)
      })

      test('an expired access token of a revoked session is INVALID_TOKEN, not TOKEN_EXPIRED', async () => {
        const user = await registerVerifyLogin(t)
        await t.post('/auth/logout', { refresh_token: user.refresh_token })
        t.clock.advance(3600)
        try {
          assert.equal(code(await t.get('/auth/me', user.access_token)), 'INVALID_TOKEN')
        } finally {
          t.clock.advance(-3600)
        }
      })
    })

    describe('password reset', () => {
      test('forgot-password answers identically for known and unknown addresses; only the known one gets mail', async () => {
        const user = await registerVerifyLogin(t)
        const ghost = uniqueEmail('ghost')
        const known = await t.post('/auth/forgot-password', { email: user.email })
        const unknown = await t.post('/auth/forgot-password', { email: ghost })
        assert.equal(known.statusCode, 202)
        assert.equal(unknown.statusCode, 202)
        assert.equal(known.body, unknown.body)
        assert.match((await t.mail.next(user.email)).raw, /Subject: Reset your password/)
        await t.app.services.background.drain()
        assert.equal(t.mail.received.filter((m) => m.to.includes(ghost)).length, 0)
      })

      test('the mailed token sets a new password once and revokes every session', async () => {
        const user = await registerVerifyLogin(t)
        const second = await login(user.email)
        await t.post('/auth/forgot-password', { email: user.email })
        const token = tokenFromMail(await t.mail.next(user.email))

        const weak = await t.post('/auth/reset-password', { token, password: 'short' })
        assert.equal(code(weak), 'VALIDATION_ERROR')

        const reset = await t.post('/auth/reset-password', { token, password: NEW_PASSWORD })
        assert.equal(reset.statusCode, 200, reset.body)
        for (const access of [user.access_token, second.access_token]) assert.equal(code(await t.get('/auth/me', access)), 'INVALID_TOKEN')
        assert.equal(code(await t.post('/auth/refresh', { refresh_token: second.refresh_token })), 'INVALID_REFRESH_TOKEN')
        assert.equal(code(await t.post('/auth/login', { email: user.email, password: PASSWORD })), 'INVALID_CREDENTIALS')
        await login(user.email, NEW_PASSWORD)

        const again = await t.post('/auth/reset-password', { token, password: 'yet another passphrase' })
        assert.equal(again.statusCode, 400)
        assert.equal(code(again), 'INVALID_RESET_TOKEN')
      })

      test('a reset token older than one hour, or unknown, is INVALID_RESET_TOKEN', async () => {
        const user = await registerVerifyLogin(t)
        await t.post('/auth/forgot-password', { email: user.email })
        const token = tokenFromMail(await t.mail.next(user.email))
        t.clock.advance(3601)
        try {
          assert.equal(code(await t.post('/auth/reset-password', { token, password: NEW_PASSWORD })), 'INVALID_RESET_TOKEN')
        } finally {
          t.clock.advance(-3601)
        }
        assert.equal(code(await t.post('/auth/reset-password', { token: 'B'.repeat(43), password: NEW_PASSWORD })), 'INVALID_RESET_TOKEN')
        assert.equal(code(await t.post('/auth/login', { email: user.email, password: NEW_PASSWORD })), 'INVALID_CREDENTIALS')
      })

      test('a verification token is not a reset token', async () => {
        const email = uniqueEmail()
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Mixed' })
        const verification = tokenFromMail(await t.mail.next(email))
        assert.equal(code(await t.post('/auth/reset-password', { token: verification, password: NEW_PASSWORD })), 'INVALID_RESET_TOKEN')
      })
    })

    describe('change password', () => {
      test('needs the current password, applies the policy, keeps this session and revokes the others', async () => {
        const user = await registerVerifyLogin(t)
        const other = await login(user.email)
        const wrong = await t.post('/auth/change-password', { current_password: 'not it at all', new_password: NEW_PASSWORD }, user.access_token)
        assert.equal(wrong.statusCode, 401)
        assert.equal(code(wrong), 'INVALID_CREDENTIALS')
        const weak = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: user.email }, user.access_token)
        assert.equal(code(weak), 'VALIDATION_ERROR')
        assert.equal(weak.json().error.details[0].field, 'new_password')

        const changed = await t.post('/auth/change-password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, user.access_token)
        assert.equal(changed.statusCode, 200)
        assert.equal(changed.json().data.revoked, 1)
        assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
        assert.equal(code(await t.get('/auth/me', other.access_token)), 'INVALID_TOKEN')
        assert.equal(code(await t.post('/auth/login', { email: user.email, password: PASSWORD })), 'INVALID_CREDENTIALS')
        await login(user.email, NEW_PASSWORD)
      })

      test('requires a bearer token', async () => {
        assert.equal(code(await t.post('/auth/change-password', { current_password: PASSWORD, new_password: NEW_PASSWORD })), 'AUTH_REQUIRED')
      })
    })

    describe('audit trail', () => {
      test('records logins (with failure reasons), refresh, logout, reset and change, with where they came from and no secrets', async () => {
        const user = await registerVerifyLogin(t)
        await t.post('/auth/login', { email: user.email, password: 'wrong password here' })
        await t.post('/auth/login', { email: uniqueEmail('nobody'), password: PASSWORD })
        await t.post('/auth/refresh', { refresh_token: user.refresh_token })
        await t.post('/auth/change-password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, user.access_token)
        await t.post('/auth/forgot-password', { email: user.email })
        const token = tokenFromMail(await t.mail.next(user.email))
        await t.post('/auth/reset-password', { token, password: PASSWORD })
        const again = await login(user.email, PASSWORD, 'audit-agent')
        await t.post('/auth/logout', { refresh_token: again.refresh_token })
        await t.app.services.accounts.disable(user.email, 'suspended')

        const events = await t.app.services.accounts.events({ email: user.email })
        const types = events.map((e) => (e.reason ? `${e.type}:${e.reason}` : e.type))
        for (const expected of [
          'account.registered', 'email.verified', 'login.succeeded', 'login.failed:wrong_password', 'token.refreshed',
          'password.changed', 'password.reset_requested', 'password.reset', 'logout', 'account.disabled:suspended',
        ]) {
          assert.ok(types.includes(expected), `missing ${expected} in ${types.join(', ')}`)
        }
        const loginEvent = events.find((e) => e.type === 'login.succeeded' && e.user_agent === 'audit-agent')
        assert.ok(loginEvent?.ip && loginEvent.request_id)
        const unknown = await t.app.services.accounts.events({})
        assert.ok(unknown.some((e) => e.type === 'login.failed' && e.reason === 'unknown_email' && e.user_id === null))
        const everything = JSON.stringify(unknown)
        for (const secret of [PASSWORD, NEW_PASSWORD, user.refresh_token, token]) assert.ok(!everything.includes(secret))
      })
    })

    describe('mail off the request path', () => {
      test('forgot-password answers before a stuck mail relay has accepted the message', async () => {
        let release!: () => void
        const stuck = new Promise<void>((resolve) => (release = resolve))
        const sent: MailMessage[] = []
        const slowRelay: MailTransport = {
          async send(message) {
            await stuck
            sent.push(message)
          },
          close() {},
        }
        const slow = await startTestApp(engine, { overrides: { mailTransport: slowRelay } })
        try {
          const email = uniqueEmail()
          await slow.post('/auth/register', { email, password: PASSWORD, full_name: 'Slow' })
          const answer = await slow.post('/auth/forgot-password', { email })
          assert.equal(answer.statusCode, 202)
          assert.equal(sent.length, 0)
          release()
          await slow.app.services.background.drain()
          await slow.app.services.mailQueue.flush()
          assert.deepEqual(sent.map((m) => m.subject).sort(), ['Reset your password', 'Verify your e-mail address'])
        } finally {
          release()
          await slow.close()
        }
      })
    })
  })
}

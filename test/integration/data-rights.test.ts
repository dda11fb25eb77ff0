import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { tokenFromMail } from '../helpers/mail.ts'

/** Rows left for a user, table by table. */
async function rowsOf(t: TestApp, userId: string) {
  const db = t.app.services.db.kysely
  const count = async (table: 'users' | 'sessions' | 'one_time_tokens' | 'watchlists' | 'mail_outbox' | 'audit_events', column: 'id' | 'user_id') =>
    Number((await db.selectFrom(table).select((eb) => eb.fn.countAll<number | string>().as('n')).where(column, '=', userId).executeTakeFirstOrThrow()).n)
  return {
    users: await count('users', 'id'),
    sessions: await count('sessions', 'user_id'),
    one_time_tokens: await count('one_time_tokens', 'user_id'),
    watchlists: await count('watchlists', 'user_id'),
    mail_outbox: await count('mail_outbox', 'user_id'),
    audit_events: await count('audit_events', 'user_id'),
  }
}

for (const engine of ENGINES) {
  describe(`a user's own data on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { LOGIN_FREE_FAILURES: '2' } })
    })
    after(async () => t.close())

    test('the export holds every kind of record stored about the caller and no secret', async () => {
      const user = await registerVerifyLogin(t)
      const second = (await t.post('/auth/login', { email: user.email, password: PASSWORD })).json().data
      assert.equal((await t.post('/watchlists', { name: 'Tech', symbols: ['aapl', 'msft'] }, user.access_token)).statusCode, 201)
      await t.post('/auth/forgot-password', { email: user.email })
      const resetToken = tokenFromMail(await t.mail.next(user.email))

      const response = await t.get('/auth/me/export', user.access_token)
      assert.equal(response.statusCode, 200)
      assert.equal(response.headers['cache-control'], 'no-store')
      const data = response.json().data
      assert.equal(data.user.user_id, user.userId)
      assert.equal(data.user.email, user.email)
      assert.equal(data.user.status, 'active')
      assert.ok(data.user.last_login_at)
      assert.equal(data.sessions.length, 2)
      assert.equal(data.sessions.filter((s: { current: boolean }) => s.current).length, 1)
      assert.deepEqual(data.watchlists.map((w: { name: string; symbols: string[] }) => [w.name, w.symbols]), [['Tech', ['AAPL', 'MSFT']]])
      const types = data.events.map((e: { type: string }) => e.type)
      for (const type of ['account.registered', 'email.verified', 'login.succeeded', 'password.reset_requested', 'account.exported']) {
        assert.ok(types.includes(type), `${type} missing from ${types.join(', ')}`)
      }
      assert.deepEqual(data.mail.map((m: { kind: string }) => m.kind).sort(), ['password_reset', 'verification'])

      const stored = await t.app.services.db.kysely.selectFrom('users').select('password_hash').where('id', '=', user.userId).executeTakeFirstOrThrow()
      const tokenHashes = (await t.app.services.db.kysely.selectFrom('one_time_tokens').select('token_hash').where('user_id', '=', user.userId).execute()).map((r) => r.token_hash)
      const text = response.body
      for (const secret of [PASSWORD, stored.password_hash, user.access_token, user.refresh_token, second.refresh_token, resetToken, ...tokenHashes]) {
        assert.ok(!text.includes(secret), 'a secret leaked into the export')
      }
      assert.doesNotMatch(text, /argon2|body_text|body_html|password_hash|token_hash/)
    })

    test('deletion needs the current password and is throttled like login', async () => {
      const user = await registerVerifyLogin(t)
      const wrong = await t.call('DELETE', '/auth/me', user.access_token, { password: 'not the password' })
      assert.equal(wrong.statusCode, 401)
      assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS')
      assert.equal((await t.call('DELETE', '/auth/me', user.access_token, { password: 'still not it' })).statusCode, 401)
      // Past the free failures, even the right password waits (as at login).
      const throttled = await t.call('DELETE', '/auth/me', user.access_token, { password: PASSWORD })
      assert.equal(throttled.statusCode, 429)
      assert.ok(throttled.headers['retry-after'])
      assert.equal((await rowsOf(t, user.userId)).users, 1)
      assert.equal((await t.call('DELETE', '/auth/me', user.access_token)).json().error.code, 'VALIDATION_ERROR')
      assert.equal((await t.call('DELETE', '/auth/me', undefined, { password: PASSWORD })).json().error.code, 'AUTH_REQUIRED')
    })

    test('deletion removes the user and everything of theirs at once, keeps the audit trail without the address, and frees the address', async () => {
      const user = await registerVerifyLogin(t)
      await t.post('/watchlists', { name: 'Mine' }, user.access_token)
      await t.post('/auth/forgot-password', { email: user.email })
      tokenFromMail(await t.mail.next(user.email))
      const before = await rowsOf(t, user.userId)
      assert.ok(before.sessions > 0 && before.one_time_tokens > 0 && before.watchlists > 0 && before.mail_outbox > 0)

      const deleted = await t.call('DELETE', '/auth/me', user.access_token, { password: PASSWORD })
      assert.equal(deleted.statusCode, 200)
      assert.deepEqual(deleted.json().data, { user_id: user.userId, deleted: true })

      const left = await rowsOf(t, user.userId)
      assert.deepEqual({ ...left, audit_events: 0 }, { users: 0, sessions: 0, one_time_tokens: 0, watchlists: 0, mail_outbox: 0, audit_events: 0 })
      const events = await t.app.services.db.kysely.selectFrom('audit_events').selectAll().where('user_id', '=', user.userId).execute()
      assert.ok(events.some((e) => e.type === 'account.deleted'))
      assert.ok(!JSON.stringify(events).includes(user.email))

      assert.equal((await t.get('/auth/me', user.access_token)).json().error.code, 'INVALID_TOKEN')
      assert.equal((await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().error.code, 'INVALID_REFRESH_TOKEN')
      assert.equal((await t.post('/auth/login', { email: user.email, password: PASSWORD })).json().error.code, 'INVALID_CREDENTIALS')
      const feed = await t.app.services.db.kysely.selectFrom('change_feed').selectAll().where('target_id', '=', decodeJwt(user.access_token).sid as string).execute()
      assert.equal(feed.length, 1, 'the session revocation is in the feed for the other instances')

      const again = await t.post('/auth/register', { email: user.email, password: PASSWORD, full_name: 'Back Again' })
      assert.equal(again.statusCode, 201)
      assert.notEqual(again.json().data.user_id, user.userId)
    })
  })
}

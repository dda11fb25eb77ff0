import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, uniqueEmail, PASSWORD, type TestApp } from '../helpers/app.ts'
import { tokenFromMail } from '../helpers/mail.ts'

const DAY = 86_400

/** Retention (src/retention.ts): with the clock moved, ended rows go and live ones stay. */
for (const engine of ENGINES) {
  describe(`retention on ${engine}`, () => {
    const count = async (t: TestApp, table: 'sessions' | 'one_time_tokens' | 'audit_events' | 'mail_outbox', userId: string) =>
      Number((await t.app.services.db.kysely.selectFrom(table).select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', userId).executeTakeFirstOrThrow()).n)

    test('ended sessions and spent tokens go a day after they end, mail records after a week, events after AUDIT_RETENTION_DAYS; live rows stay', async () => {
      // Batches of two, so every kind takes several batches.
      const t = await startTestApp(engine, { env: { AUDIT_RETENTION_DAYS: '5' }, overrides: { retentionBatch: 2 } })
      try {
        const a = await registerVerifyLogin(t, uniqueEmail('old'))
        const second = (await t.post('/auth/login', { email: a.email, password: PASSWORD })).json().data
        const third = (await t.post('/auth/login', { email: a.email, password: PASSWORD })).json().data
        assert.equal((await t.post('/auth/logout', { refresh_token: third.refresh_token })).statusCode, 200)
        await t.post('/auth/forgot-password', { email: a.email })
        tokenFromMail(await t.mail.next(a.email))
        await t.app.services.background.drain()
        await t.app.services.mailQueue.flush()
        assert.equal(await count(t, 'sessions', a.userId), 3)
        assert.equal(await count(t, 'one_time_tokens', a.userId), 2)
        const eventsOfA = await count(t, 'audit_events', a.userId)

        // Three days on: the revoked session and both tokens (the used verification link, the
        // unused reset link) ended more than a day ago; the live sessions, mail and events stay.
        t.clock.advance(3 * DAY)
        const first = await t.app.services.retention.runOnce()
        assert.deepEqual(first, { sessions: 1, oneTimeTokens: 2, mail: 0, provider: 0, webhooks: 0, auditEvents: 0 })
        assert.equal(await count(t, 'sessions', a.userId), 2)
        assert.equal(await count(t, 'one_time_tokens', a.userId), 0)
        assert.equal(await count(t, 'mail_outbox', a.userId), 2)
        assert.equal(await count(t, 'audit_events', a.userId), eventsOfA)
        assert.equal((await t.post('/auth/refresh', { refresh_token: second.refresh_token })).statusCode, 200, 'a live session is untouched')

        t.clock.advance(3 * DAY)
        const b = await registerVerifyLogin(t, uniqueEmail('new'))
        await t.app.services.mailQueue.flush()

        // Nine days from the start: A's sessions expired two days ago, its mail is a week old and
        // its events older than five days; B's are all recent.
        t.clock.advance(3 * DAY)
        const second9 = await t.app.services.retention.runOnce()
        assert.equal(second9.sessions, 2)
        assert.equal(second9.mail, 2)
        assert.ok(second9.auditEvents >= eventsOfA, 'all of A\'s events, and the anonymous ones of that time')
        for (const table of ['sessions', 'one_time_tokens', 'audit_events', 'mail_outbox'] as const) assert.equal(await count(t, table, a.userId), 0, `${table} of A`)
        assert.equal(await count(t, 'sessions', b.userId), 1)
        assert.equal(await count(t, 'one_time_tokens', b.userId), 0, 'B\'s verification link expired two days ago, a day past the grace')
        assert.equal(await count(t, 'mail_outbox', b.userId), 1)
        assert.ok((await count(t, 'audit_events', b.userId)) >= 3)
        assert.equal((await t.post('/auth/refresh', { refresh_token: b.refresh_token })).statusCode, 200)
        assert.equal((await t.post('/auth/refresh', { refresh_token: second.refresh_token })).statusCode, 401)
        assert.equal((await t.get('/auth/me', a.access_token)).statusCode, 401, 'a token of a deleted session is refused')

        assert.deepEqual(await t.app.services.retention.runOnce(), { sessions: 0, oneTimeTokens: 0, mail: 0, provider: 0, webhooks: 0, auditEvents: 0 }, 'a second pass finds nothing')
      } finally {
        await t.close()
      }
    })

    test('AUDIT_RETENTION_DAYS=0 keeps every audit event', async () => {
      const t = await startTestApp(engine, { env: { AUDIT_RETENTION_DAYS: '0' } })
      try {
        const user = await registerVerifyLogin(t)
        const events = await count(t, 'audit_events', user.userId)
        t.clock.advance(3650 * DAY)
        const pass = await t.app.services.retention.runOnce()
        assert.equal(pass.auditEvents, 0)
        assert.equal(pass.sessions, 1)
        assert.equal(await count(t, 'audit_events', user.userId), events)
      } finally {
        await t.close()
      }
    })
  })
}

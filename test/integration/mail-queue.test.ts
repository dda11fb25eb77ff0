import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { MailCatcher, tokenFromMail } from '../helpers/mail.ts'
import { freePort, PASSWORD, startTestApp, uniqueEmail, within, type TestApp } from '../helpers/app.ts'

/** Fast polling and a one-second first retry; the clock is moved to make a retry due. */
const QUEUE = { pollMs: 25, retryBaseMs: 1000 }

for (const engine of ENGINES) {
  describe(`durable mail on ${engine}`, () => {
    const rows = (t: TestApp) => t.app.services.db.kysely.selectFrom('mail_outbox').selectAll().orderBy('created_at').execute()
    const metric = async (t: TestApp, name: string) => {
      const text = await t.app.services.metrics.render()
      return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)$`, 'gm'))].reduce((sum, m) => sum + Number(m[1]), 0)
    }
    const register = async (t: TestApp, email = uniqueEmail('queued')) => {
      const response = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Queued' })
      assert.equal(response.statusCode, 201, response.body)
      return email
    }

    test('relay down at registration, then up: the mail arrives without anyone asking again', async () => {
      const port = await freePort()
      const t = await startTestApp(engine, { env: { SMTP_URL: `smtp://127.0.0.1:${port}` }, overrides: { mailQueue: QUEUE } })
      const relay = new MailCatcher()
      try {
        const email = await register(t)
        await within(5000, async () => (await rows(t))[0]?.last_error != null)
        const [failed] = await rows(t)
        assert.equal(failed!.sent_at, null)
        assert.equal(failed!.attempts, 1)
        assert.match(failed!.body_text, /^enc:v1:/, 'kept until it is sent, sealed: it holds a link with a token')
        assert.doesNotMatch(failed!.body_text + failed!.body_html, /token=/)

        await relay.start(port)
        t.clock.advance(1)
        const mail = await relay.next(email)
        assert.equal((await t.post('/auth/verify-email', { token: tokenFromMail(mail) })).statusCode, 200)
        await within(5000, async () => (await rows(t))[0]?.sent_at != null)
        const [sent] = await rows(t)
        assert.equal(sent!.attempts, 2)
        assert.equal(sent!.body_text, '', 'the link is erased once sent')
        assert.equal(sent!.body_html, '')
        await t.app.services.mailQueue.flush()
        assert.equal(await metric(t, 'portcullis_mail_retried_total'), 1)
        assert.equal(await metric(t, 'portcullis_mail_sent_total'), 1)
      } finally {
        await t.close()
        await relay.close()
      }
    })

    test('a relay answering 451 and then 250: sent after one retry; a 550 is given up and recorded', async () => {
      const t = await startTestApp(engine, { overrides: { mailQueue: QUEUE } })
      try {
        t.mail.refusals.push(451)
        const email = await register(t)
        await within(5000, async () => (await rows(t))[0]?.last_error != null)
        assert.equal(t.mail.received.length, 0)
        t.clock.advance(1)
        await t.mail.next(email)
        await within(5000, async () => (await rows(t))[0]?.sent_at != null)
        assert.equal((await rows(t))[0]!.attempts, 2)

        t.mail.refusals.push(550)
        const refused = await register(t)
        await within(5000, async () => (await rows(t)).some((row) => row.recipient === refused && row.failed_at !== null))
        await t.app.services.mailQueue.flush()
        const row = (await rows(t)).find((r) => r.recipient === refused)!
        assert.match(row.last_error ?? '', /550/)
        assert.equal(row.body_text, '')
        assert.equal(await metric(t, 'portcullis_mail_failed_total'), 1)
        t.clock.advance(3600)
        await t.app.services.mailQueue.flush()
        assert.ok(!t.mail.received.some((m) => m.to.includes(refused)), 'a given-up mail is not retried')
      } finally {
        await t.close()
      }
    })

    test('mail older than MAIL_MAX_AGE_HOURS is given up and recorded', async () => {
      const port = await freePort()
      const t = await startTestApp(engine, { env: { SMTP_URL: `smtp://127.0.0.1:${port}`, MAIL_MAX_AGE_HOURS: '1' }, overrides: { mailQueue: QUEUE } })
      try {
        await register(t)
        await within(5000, async () => (await rows(t))[0]?.last_error != null)
        t.clock.advance(3601)
        await within(5000, async () => (await rows(t))[0]?.failed_at != null)
        await t.app.services.mailQueue.flush()
        assert.equal(await metric(t, 'portcullis_mail_failed_total'), 1)
        assert.equal(await metric(t, 'portcullis_mail_queued'), 0)
      } finally {
        await t.close()
      }
    })

    test('two instances on one database: every mail is sent exactly once', async () => {
      const port = await freePort()
      const storage = await createStorage(engine)
      const env = { SMTP_URL: `smtp://127.0.0.1:${port}` }
      const a = await startTestApp(engine, { storage, env, overrides: { mailQueue: QUEUE } })
      const b = await startTestApp(engine, { storage, env, overrides: { mailQueue: QUEUE } })
      const relay = new MailCatcher()
      try {
        // Queued while the relay is down, so both instances then race for the same due rows.
        const emails = await Promise.all(Array.from({ length: 20 }, (_, i) => register(i % 2 ? a : b)))
        await within(5000, async () => (await rows(a)).every((row) => row.last_error !== null))
        await relay.start(port)
        a.clock.advance(2)
        b.clock.advance(2)
        for (const email of emails) await relay.next(email)
        await Promise.all([a.app.services.mailQueue.flush(), b.app.services.mailQueue.flush()])
        await new Promise((r) => setTimeout(r, 200))
        assert.equal(relay.received.length, 0, `duplicates: ${relay.received.map((m) => m.to).join(', ')}`)
        const sentBy = [await metric(a, 'portcullis_mail_sent_total'), await metric(b, 'portcullis_mail_sent_total')]
        assert.equal(sentBy[0]! + sentBy[1]!, 20)
      } finally {
        await a.close()
        await b.close()
        await relay.close()
        await storage.drop()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type Socket } from 'node:net'
import { describe, test } from 'node:test'
import { freePort, PASSWORD } from './helpers/app.ts'
import { createStorage, ENGINES } from './helpers/db.ts'
import { MailCatcher, tokenFromMail } from './helpers/mail.ts'
import { startServerProcess as start, type ServerProcess } from './helpers/process.ts'

/**
 * The process dies (kill -9) after answering a registration and while its mail is being handed
 * to the relay. The mail was committed with the account, so after a restart it is sent anyway.
 */
for (const engine of ENGINES) {
  describe(`mail survives a crash on ${engine}`, () => {
    test('kill -9 between the registration\'s answer and the send: the mail arrives after restart', async () => {
      const storage = await createStorage(engine)
      const [port, smtpPort] = [await freePort(), await freePort()]
      // A relay that accepts the connection and then says nothing: the send hangs mid-way.
      const stalled: Socket[] = []
      const staller = createServer((socket) => stalled.push(socket))
      await new Promise<void>((resolve) => staller.listen(smtpPort, '127.0.0.1', resolve))
      const env = {
        PORT: String(port), DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl ?? '',
        SMTP_URL: `smtp://127.0.0.1:${smtpPort}`, MAIL_LEASE_SECONDS: '2',
      }
      const first = await start(env)
      const relay = new MailCatcher()
      let second: ServerProcess | null = null
      try {
        const email = `crash-${engine}@example.com`
        const answer = await fetch(`http://127.0.0.1:${port}/api/v1/auth/register`, {
          method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD, full_name: 'Crash' }),
        })
        assert.equal(answer.status, 201)
        for (let i = 0; i < 100 && stalled.length === 0; i++) await new Promise((r) => setTimeout(r, 50))
        assert.equal(stalled.length, 1, 'the sender was handing the mail over')

        first.child.kill('SIGKILL')
        await once(first.child, 'exit')
        for (const socket of stalled) socket.destroy()
        await new Promise((resolve) => staller.close(resolve))
        await relay.start(smtpPort)

        second = await start(env)
        const mail = await relay.next(email, 15_000)
        const verify = await fetch(`http://127.0.0.1:${port}/api/v1/auth/verify-email`, {
          method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: tokenFromMail(mail) }),
        })
        assert.equal(verify.status, 200, 'the mailed token is the live one')
        await new Promise((r) => setTimeout(r, 500))
        assert.equal(relay.received.length, 0, 'delivered once')
      } finally {
        first.child.kill('SIGKILL')
        second?.child.kill('SIGKILL')
        if (second) await once(second.child, 'exit').catch(() => {})
        staller.close()
        await relay.close()
        await storage.drop()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { runCli } from '../../src/cli.ts'
import { ENGINES, type TestStorage } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startPair, startTestApp, TestClock, within, type TestApp } from '../helpers/app.ts'

/**
 * Two instances on one database, each with its own in-memory gate. Instance A has already
 * accepted the token (so its cache holds the session); the change goes through instance B (or the
 * CLI), and A must refuse within one second without any help.
 */
for (const engine of ENGINES) {
  describe(`revocation across instances on ${engine}`, () => {
    let pair: Awaited<ReturnType<typeof startPair>>
    let storage: TestStorage
    let a: TestApp
    let b: TestApp
    before(async () => {
      pair = await startPair(engine)
      ;({ storage, a, b } = pair)
    })
    after(() => pair.close())

    const code = async (t: TestApp, token: string) => (await t.get('/auth/me', token)).json().error?.code ?? 'OK'

    async function warmOnA() {
      const user = await registerVerifyLogin(a)
      assert.equal(await code(a, user.access_token), 'OK')
      return user
    }

    test('a logout through B stops the token on A within one second', async () => {
      const user = await warmOnA()
      assert.equal((await b.post('/auth/logout', { refresh_token: user.refresh_token })).statusCode, 200)
      const ms = await within(1000, async () => (await code(a, user.access_token)) === 'INVALID_TOKEN')
      console.log(`${engine}: logout on B refused on A after ${ms.toFixed(0)} ms`)
    })

    test('deleting a session through B stops it on A within one second', async () => {
      const user = await warmOnA()
      const sid = decodeJwt(user.access_token).sid as string
      const other = (await b.post('/auth/login', { email: user.email, password: PASSWORD })).json().data.access_token
      assert.equal((await b.call('DELETE', `/auth/sessions/${sid}`, other)).statusCode, 200)
      await within(1000, async () => (await code(a, user.access_token)) === 'INVALID_TOKEN')
    })

    test('a password change through B revokes the other sessions on A within one second', async () => {
      const user = await warmOnA()
      const onB = (await b.post('/auth/login', { email: user.email, password: PASSWORD })).json().data.access_token
      assert.equal((await b.post('/auth/change-password', { current_password: PASSWORD, new_password: 'a brand new passphrase' }, onB)).statusCode, 200)
      await within(1000, async () => (await code(a, user.access_token)) === 'INVALID_TOKEN')
      assert.equal(await code(a, onB), 'OK')
    })

    test('a disable through B answers ACCOUNT_DISABLED on A within one second, and an enable undoes it', async () => {
      const user = await warmOnA()
      await b.app.services.accounts.disable(user.email, 'banned')
      const ms = await within(1000, async () => (await code(a, user.access_token)) === 'ACCOUNT_DISABLED')
      console.log(`${engine}: disable on B refused on A after ${ms.toFixed(0)} ms`)
      await b.app.services.accounts.enable(user.email)
      await within(1000, async () => (await code(a, user.access_token)) === 'OK')
    })

    test('a disable from the CLI (another writer) reaches A within one second', async () => {
      const user = await warmOnA()
      const status = await runCli(['users', 'disable', user.email], { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }, { out() {}, err() {} })
      assert.equal(status, 0)
      await within(1000, async () => (await code(a, user.access_token)) === 'ACCOUNT_DISABLED')
    })

    test('with the feed switched off on A, A keeps accepting: the bound comes from the feed, not from a query per request', async () => {
      const lazy = await startTestApp(engine, { storage, overrides: { feed: { pollMs: 3_600_000 } } })
      try {
        const user = await registerVerifyLogin(lazy)
        assert.equal(await code(lazy, user.access_token), 'OK')
        assert.equal((await b.post('/auth/logout', { refresh_token: user.refresh_token })).statusCode, 200)
        await new Promise((resolve) => setTimeout(resolve, 600))
        assert.equal(await code(lazy, user.access_token), 'OK')
        await lazy.app.services.feed.poll()
        assert.equal(await code(lazy, user.access_token), 'INVALID_TOKEN')
      } finally {
        await lazy.close()
      }
    })

    test('instances whose clocks disagree share the feed: one 16 minutes ahead still applies, one 2 hours ahead prunes nothing unread', async () => {
      const ahead = await startTestApp(engine, { storage, overrides: { clock: new TestClock(Date.now() + 16 * 60_000) } })
      const farAhead = await startTestApp(engine, { storage, overrides: { clock: new TestClock(Date.now() + 2 * 3600_000) } })
      try {
        const user = await registerVerifyLogin(ahead)
        assert.equal(await code(ahead, user.access_token), 'OK')
        // Logout-all through A (correct clock) with a token A issued, revoking the session on `ahead` too.
        const onA = (await a.post('/auth/login', { email: user.email, password: PASSWORD })).json().data.access_token
        assert.equal((await a.post('/auth/logout-all', undefined, onA)).statusCode, 200)
        // The far-ahead instance reads and prunes the feed by its own pacing; nothing unread may go.
        await farAhead.app.services.feed.poll()
        const rows = await a.app.services.db.kysely.selectFrom('change_feed').select('seq').where('user_id', '=', user.userId).execute()
        assert.ok(rows.length >= 2, `the revocations are still in the feed (${rows.length})`)
        await within(1000, async () => (await code(ahead, user.access_token)) === 'INVALID_TOKEN')
      } finally {
        await ahead.close()
        await farAhead.close()
      }
    })
  })
}

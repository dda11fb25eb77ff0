import assert from 'node:assert/strict'
import { after, afterEach, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { sql } from 'kysely'
import { changeFeed } from '../../src/db/repositories.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { TcpProxy } from '../helpers/proxy.ts'
import { LogCapture } from '../helpers/logs.ts'


/** B's feed window: small, so a revocation can fall out of it in well under a second of real time. */
const WINDOW_MS = 500

/**
 * Two instances on one database. B's poller is paused (it reads the feed only when a test says so)
 * and B's clock is a TestClock, so a gap is "B did not read the feed while its clock moved past the
 * window"; on PostgreSQL B also reaches the database through a TCP proxy the test can cut, so its
 * reads really fail. A revokes an API key and logs a session out while B has both cached: the
 * attack of issue 29 item 7, where B kept accepting them for good.
 */
for (const engine of ENGINES) {
  describe(`a gap in the change feed on ${engine}`, () => {
    let storage: TestStorage
    let proxy: TcpProxy | undefined
    let a: TestApp
    let b: TestApp
    const logs = new LogCapture()

    before(async () => {
      storage = await createStorage(engine)
      let bStorage = storage
      if (engine === 'postgres') {
        const target = new URL(storage.databaseUrl!)
        proxy = await new TcpProxy(target.hostname, Number(target.port)).start()
        const proxied = new URL(target)
        proxied.port = String(proxy.port)
        bStorage = { ...storage, databaseUrl: proxied.toString() }
      }
      a = await startTestApp(engine, { storage })
      b = await startTestApp(engine, {
        storage: bStorage,
        env: { LOG_LEVEL: 'warn', RATE_LIMIT_API_KEY_FAILURES_PER_IP: '100000' },
        overrides: { logStream: logs, feed: { pollMs: 3_600_000, windowMs: WINDOW_MS } },
      })
    })
    afterEach(() => {
      b.clock.ms = Date.now()
    })
    after(async () => {
      await b?.close()
      await a?.close()
      await proxy?.cut().catch(() => {})
      await storage.drop()
    })

    const me = async (token: string) => (await b.get('/auth/me', token)).json().error?.code ?? 'OK'
    const adminCall = async (key: string) => (await b.get('/admin/users?limit=1', key)).json().error?.code ?? 'OK'
    const gaps = async () => Number(/^portcullis_change_feed_gaps_total (\d+)$/m.exec((await b.app.inject({ method: 'GET', url: '/metrics' })).body)?.[1])
    const gapLines = () => logs.messages(/^change feed gap/)

    /** A user signed in and an API key, both used on B, so B's gate and key store hold them. */
    async function cachedOnB() {
      const user = await registerVerifyLogin(b)
      const { key, summary } = await a.app.services.apiKeys.create({ name: 'ops tool', scopes: ['users:read'], expiresAt: null })
      assert.equal(await me(user.access_token), 'OK')
      assert.equal(await adminCall(key), 'OK')
      await b.app.services.feed.poll()
      assert.equal(b.app.services.feed.readAgeMs(), 0, 'B read the feed')
      return { user, key, keyId: summary.id }
    }

    async function revokeOnA(cached: Awaited<ReturnType<typeof cachedOnB>>) {
      assert.equal(await a.app.services.apiKeys.revoke(cached.keyId), true)
      assert.equal((await a.post('/auth/logout', { refresh_token: cached.user.refresh_token })).statusCode, 200)
    }

    test('control: reads that keep up, however long in all, never drop the caches', async () => {
      const cached = await cachedOnB()
      const gapsBefore = await gaps()
      // Ten reads 0.2 s apart by B's clock: 2 s in all, four windows, but no gap between two reads.
      for (let i = 0; i < 10; i++) {
        b.clock.advance(0.2)
        await b.app.services.feed.poll()
      }
      // A revocation B has not read yet (its poller is paused) is still accepted: B answers from memory.
      await revokeOnA(cached)
      b.clock.advance(0.2)
      assert.equal(await me(cached.user.access_token), 'OK')
      assert.equal(await adminCall(cached.key), 'OK')
      assert.equal(await gaps(), gapsBefore)
      assert.ok(b.app.services.gate.size().sessions >= 1)
    })

    test('a paused instance: the first request after the gap, before any read, reads afresh and refuses the key and the token', async () => {
      const cached = await cachedOnB()
      const gapsBefore = await gaps()
      const linesBefore = gapLines().length
      await revokeOnA(cached)
      // B was paused for 32 s and resumes with a request before its poller runs.
      b.clock.advance(32)
      assert.equal(await adminCall(cached.key), 'INVALID_API_KEY')
      assert.equal(await me(cached.user.access_token), 'INVALID_TOKEN')
      assert.equal(await gaps(), gapsBefore + 1, 'one gap, counted once however many requests meet it')
      const [line] = gapLines().slice(linesBefore)
      assert.equal(line?.noticed_by, 'request')
      assert.equal(line?.level, 40)

      // Until a read succeeds, live sessions still work (read from the database) but nothing is kept.
      const other = await registerVerifyLogin(b)
      assert.equal(await me(other.access_token), 'OK')
      assert.equal(b.app.services.gate.size().sessions, 0)
      // The next good read ends the gap without counting it again; memory is used again.
      await b.app.services.feed.poll()
      assert.equal(await me(other.access_token), 'OK')
      assert.equal(b.app.services.gate.size().sessions, 1)
      assert.equal(await gaps(), gapsBefore + 1)
      assert.equal(await me(cached.user.access_token), 'INVALID_TOKEN')
      assert.equal(await adminCall(cached.key), 'INVALID_API_KEY')
    })

    // On PostgreSQL a read can be held up (a stalled connection, a lock) while the instance goes
    // through a gap, and come back with what the database held before it. (SQLite answers a read
    // synchronously when it runs, so there what comes back is never older than its arrival.)
    if (engine === 'postgres') {
      test('a first-sight read held up across a gap is not kept when it comes back after the feed resumed', async () => {
        const user = await registerVerifyLogin(b)
        const { key, summary } = await a.app.services.apiKeys.create({ name: 'ops tool', scopes: ['users:read'], expiresAt: null })
        const claims = decodeJwt(user.access_token)
        let release!: () => void
        let locked!: () => void
        const isLocked = new Promise<void>((resolve) => (locked = resolve))
        const holder = a.app.services.db.kysely.transaction().execute(async (trx) => {
          await sql`lock table sessions, api_keys in access exclusive mode`.execute(trx)
          locked()
          await new Promise<void>((resolve) => (release = resolve))
        })
        await isLocked
        const reads = Promise.all([b.app.services.gate.check(claims.sid as string, claims.sub!), b.app.services.apiKeys.authenticate(key)])
        for (let waited = 0; ; waited += 20) {
          const { rows } = await sql<{ n: string }>`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(a.app.services.db.kysely)
          if (Number(rows[0]!.n) >= 2) break
          assert.ok(waited < 5000, "B's two reads wait on the lock")
          await new Promise((resolve) => setTimeout(resolve, 20))
        }
        // Meanwhile B goes through a gap, and its next read of the feed drops and resumes.
        const gapsBefore = await gaps()
        b.clock.advance(32)
        await b.app.services.feed.poll()
        assert.equal(await gaps(), gapsBefore + 1)
        assert.notEqual(b.app.services.feed.generation(), null)
        release()
        await holder
        const [state, principal] = await reads
        assert.equal(state?.status, 'active')
        assert.equal(principal?.id, summary.id)
        assert.equal(b.app.services.gate.size().sessions, 0, 'the held-up read was answered but not kept')
        // Revoked on A, not yet read by B (its poller is paused): had B kept those reads, it would
        // still answer from them; it reads afresh instead.
        await revokeOnA({ user, key, keyId: summary.id })
        assert.equal(await adminCall(key), 'INVALID_API_KEY')
        assert.equal(await me(user.access_token), 'INVALID_TOKEN')
      })
    }

    test(`cut off longer than the window (${engine === 'postgres' ? 'its database unreachable' : 'its poller stalled'}): the read that resumes no longer reaches the revocations, drops first, and B refuses the key and the token`, async () => {
      const cached = await cachedOnB()
      const gapsBefore = await gaps()
      const linesBefore = gapLines().length
      if (proxy) {
        await proxy.cut()
        const failures = logs.messages(/^change feed poll failed$/).length
        await b.app.services.feed.poll()
        assert.equal(logs.messages(/^change feed poll failed$/).length, failures + 1, "B's read failed")
      }
      await revokeOnA(cached)
      // Wait (by the database's clock) until both revocations are older than B's window: no read
      // B makes from now on will ever contain them.
      const ids = [cached.keyId, decodeJwt(cached.user.access_token).sid as string]
      for (let waited = 0; ; waited += 20) {
        const recent = await changeFeed.recent(a.app.services.db.kysely, engine, WINDOW_MS)
        if (!recent.some((row) => ids.includes(row.target_id ?? ''))) break
        assert.ok(waited < 5000, 'the revocations left the window')
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      b.clock.advance(32)
      await proxy?.restore()
      // The pool reconnects by itself; a read may fail once more before it does.
      for (let attempt = 0; attempt < 50 && b.app.services.feed.readAgeMs() !== 0; attempt++) {
        await b.app.services.feed.poll()
        if (b.app.services.feed.readAgeMs() !== 0) await new Promise((resolve) => setTimeout(resolve, 50))
      }
      assert.equal(b.app.services.feed.readAgeMs(), 0, 'B read the feed again')

      assert.equal(await adminCall(cached.key), 'INVALID_API_KEY')
      assert.equal(await me(cached.user.access_token), 'INVALID_TOKEN')
      // The read dropped the caches itself, before any request met the gap, and B trusts memory again.
      assert.equal(await gaps(), gapsBefore + 1)
      const [line] = gapLines().slice(linesBefore)
      assert.equal(line?.noticed_by, 'poll')
      assert.notEqual(b.app.services.feed.generation(), null)
    })

    if (engine === 'postgres') {
      test('with its database away, B vouches from memory within the window and not past it', async () => {
        const cached = await cachedOnB()
        // The bearer and API-key checks themselves (every route behind them reads the database too).
        const checkToken = () => b.app.services.auth.authenticate(cached.user.access_token)
        const checkKey = () => b.app.services.apiKeys.authenticate(cached.key)
        await proxy!.cut()
        try {
          // B's window is WINDOW_MS: an outage of 0.2 s is within it, 32 s far past it.
          b.clock.advance(0.2)
          assert.equal((await checkToken()).userId, cached.user.userId, 'a short outage: answered from memory')
          assert.equal((await checkKey())?.id, cached.keyId)
          b.clock.advance(32)
          await assert.rejects(checkToken(), 'past the window: checked against the database, which is away')
          await assert.rejects(checkKey())
        } finally {
          await proxy!.restore()
        }
        for (let attempt = 0; attempt < 50 && b.app.services.feed.readAgeMs() !== 0; attempt++) {
          await b.app.services.feed.poll()
          if (b.app.services.feed.readAgeMs() !== 0) await new Promise((resolve) => setTimeout(resolve, 50))
        }
        assert.equal(await me(cached.user.access_token), 'OK')
        assert.equal(await adminCall(cached.key), 'OK')
      })
    }
  })
}

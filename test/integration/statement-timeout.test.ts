import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import SQLite from 'better-sqlite3'
import { sql } from 'kysely'
import pg from 'pg'
import { migrate, openDatabase, sqliteFile } from '../../src/db/index.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp } from '../helpers/app.ts'

/**
 * A statement that cannot finish (docs/operations.md, "Database"): on PostgreSQL the server cancels
 * it after DATABASE_STATEMENT_TIMEOUT_MS, on SQLite the wait for another connection's write lock
 * ends after the 5 s busy timeout; either way the request answers 503 with Retry-After, its
 * transaction leaves nothing behind, and the same request succeeds once the lock is gone. The
 * migrations are not held to the timeout.
 */
for (const engine of ENGINES) {
  describe(`a statement stuck behind a lock on ${engine}`, () => {
    test('the write answers 503 SERVICE_UNAVAILABLE with Retry-After instead of hanging, writes nothing, and succeeds once the lock is released', async () => {
      const t = await startTestApp(engine, { env: { DATABASE_STATEMENT_TIMEOUT_MS: '300' } })
      try {
        const user = await registerVerifyLogin(t)
        let release: () => Promise<void>
        if (engine === 'postgres') {
          const locker = new pg.Client({ connectionString: t.storage.databaseUrl })
          await locker.connect()
          await locker.query('begin')
          // Reads go on; the INSERT of a watchlist waits for the lock.
          await locker.query('lock table watchlists in exclusive mode')
          release = async () => {
            await locker.query('rollback')
            await locker.end()
          }
        } else {
          const locker = new SQLite(sqliteFile(t.storage.dataDir))
          locker.exec('begin immediate')
          release = async () => {
            locker.exec('rollback')
            locker.close()
          }
        }
        // Should the timeout not work, the lock is let go after 5 s, so the test fails instead of hanging.
        let released = false
        const releaseOnce = async () => {
          if (released) return
          released = true
          await release()
        }
        const guard = setTimeout(() => void releaseOnce(), 5000)
        try {
          const began = Date.now()
          const refused = await t.post('/watchlists', { name: 'Behind a lock', symbols: ['AAPL'] }, user.access_token)
          const waited = Date.now() - began
          assert.equal(refused.statusCode, 503, refused.body)
          assert.equal(refused.json().error.code, 'SERVICE_UNAVAILABLE')
          assert.equal(refused.headers['retry-after'], '5')
          // PostgreSQL cancelled it at the timeout; SQLite gave up at its busy timeout.
          assert.ok(waited >= (engine === 'postgres' ? 300 : 5000), `answered after ${waited} ms`)
          assert.ok(waited < (engine === 'postgres' ? 3000 : 8000), `answered after ${waited} ms`)
          assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists.length, 0, 'nothing was written')
        } finally {
          clearTimeout(guard)
          await releaseOnce()
        }
        const created = await t.post('/watchlists', { name: 'Behind a lock', symbols: ['AAPL'] }, user.access_token)
        assert.equal(created.statusCode, 201, created.body)
        assert.deepEqual((await t.get('/watchlists', user.access_token)).json().data.watchlists.map((w: { name: string }) => w.name), ['Behind a lock'])
      } finally {
        await t.close()
      }
    })

    if (engine === 'postgres') {
      test('migrations run without the timeout (waiting 1 s for another instance\'s migration lock), and the connections keep it afterwards', async () => {
        const storage = await createStorage('postgres')
        const holder = new pg.Client({ connectionString: storage.databaseUrl })
        await holder.connect()
        // Kysely's migration lock on PostgreSQL: another instance migrating.
        const LOCK_ID = '3853314791062309107'
        await holder.query(`select pg_advisory_lock(${LOCK_ID})`)
        const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir, statementTimeoutMs: 300 })
        try {
          const released = new Promise<void>((resolve) => setTimeout(() => void holder.query(`select pg_advisory_unlock(${LOCK_ID})`).then(() => resolve()), 1000))
          const applied = await migrate(db)
          await released
          assert.ok(applied.length > 20, `applied ${applied.length} migrations`)
          // Every connection of the pool (the migrations' one among them) has the timeout again.
          const shown = await Promise.all(Array.from({ length: 10 }, () => sql<{ statement_timeout: string }>`show statement_timeout`.execute(db.kysely)))
          assert.deepEqual([...new Set(shown.map((result) => result.rows[0]!.statement_timeout))], ['300ms'])
        } finally {
          await db.close()
          await holder.end()
          await storage.drop()
        }
      })
    }
  })
}

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import SQLite from 'better-sqlite3'
import { Migrator, sql } from 'kysely'
import pg from 'pg'
import { migrate, migrationsFor, openDatabase, sqliteFile } from '../../src/db/index.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp } from '../helpers/app.ts'

/**
 * A statement stuck behind another connection's lock (docs/operations.md, "Database"): on
 * PostgreSQL the server cancels its wait after DATABASE_LOCK_TIMEOUT_MS, on SQLite the wait for the
 * write lock ends after the 5 s busy timeout; either way the request answers 503 with Retry-After,
 * its transaction leaves nothing behind, and the same request succeeds once the lock is gone. The
 * migrations are not held to the timeout.
 */
for (const engine of ENGINES) {
  describe(`a statement stuck behind a lock on ${engine}`, () => {
    test('the write answers 503 SERVICE_UNAVAILABLE with Retry-After instead of hanging, writes nothing, and succeeds once the lock is released', async () => {
      const t = await startTestApp(engine, { env: { DATABASE_LOCK_TIMEOUT_MS: '300' } })
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
          // PostgreSQL cancelled the wait at the lock timeout; SQLite gave up at its busy timeout.
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
      test("migrations run without the lock timeout (a migration's DDL waits 1 s for a table another connection holds), and the connections keep it afterwards", async () => {
        const storage = await createStorage('postgres')
        const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir, lockTimeoutMs: 300 })
        const holder = new pg.Client({ connectionString: storage.databaseUrl })
        try {
          // Everything but the newest migration, which drops and makes indexes of op_records (its
          // DROP INDEX needs the table to itself).
          await migrate(db)
          const migrator = new Migrator({ db: db.kysely, provider: { getMigrations: async () => migrationsFor('postgres') } })
          const { error } = await migrator.migrateDown()
          if (error) throw error
          await holder.connect()
          await holder.query('begin')
          await holder.query('lock table op_records in access share mode')
          const released = new Promise<void>((resolve) => setTimeout(() => void holder.query('commit').then(() => resolve()), 1000))
          const began = Date.now()
          const applied = await migrate(db)
          await released
          assert.equal(applied.length, 1, `applied ${applied.join(', ')}`)
          assert.ok(Date.now() - began >= 900, 'the migration waited for the lock')
          // Every connection of the pool (the migrations' one among them) has the timeout again.
          const shown = await Promise.all(Array.from({ length: 10 }, () => sql<{ lock_timeout: string }>`show lock_timeout`.execute(db.kysely)))
          assert.deepEqual([...new Set(shown.map((result) => result.rows[0]!.lock_timeout))], ['300ms'])
        } finally {
          await db.close()
          await holder.end()
          await storage.drop()
        }
      })
    }
  })
}

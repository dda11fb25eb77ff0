import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { sql } from 'kysely'
import { startTestApp, type TestApp } from '../helpers/app.ts'

/** The settings docs/operations.md promises for the embedded database (src/db/index.ts). */
describe('sqlite connection settings', () => {
  let t: TestApp
  before(async () => {
    t = await startTestApp('sqlite')
  })
  after(async () => {
    await t.close()
  })
  const pragma = async (name: string) =>
    Object.values((await sql<Record<string, unknown>>`${sql.raw(`pragma ${name}`)}`.execute(t.app.services.db.kysely)).rows[0]!)[0]

  test('WAL journal with a durable commit (synchronous=FULL) and foreign keys enforced', async () => {
    assert.equal(await pragma('journal_mode'), 'wal')
    assert.equal(await pragma('synchronous'), 2)
    assert.equal(await pragma('foreign_keys'), 1)
  })

  test("the page cache is SQLite's own 2 MB, not better-sqlite3's 16 MB", async () => {
    assert.equal(await pragma('cache_size'), -2000)
  })
})

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { sql } from 'kysely'
import SQLite from 'better-sqlite3'
import { sqliteFile } from '../../src/db/index.ts'
import { users } from '../../src/db/repositories.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

/** SQLite keeps one prepared statement per distinct SQL text (src/db/index.ts). */
describe('prepared-statement reuse on sqlite', () => {
  let t: TestApp
  before(async () => {
    t = await startTestApp('sqlite')
  })
  after(async () => {
    await t.close()
  })
  const prepared = () => t.app.services.db.preparedStatements!()

  test('repeating a request prepares nothing new, and answers stay right', async () => {
    const user = await registerVerifyLogin(t)
    const created = await t.call('POST', '/watchlists', user.access_token, { name: 'Reuse' })
    assert.equal(created.statusCode, 201)
    assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists.length, 1)
    assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)
    // The change feed's first poll (and prune) prepares statements of its own on a timer; done
    // here, it cannot land inside the loop below.
    await t.app.services.feed.poll()
    const count = prepared()
    for (let i = 0; i < 20; i++) {
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)
      assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists[0].name, 'Reuse')
    }
    assert.equal(prepared(), count)
  })

  test('a read on the request path neither waits for nor sees a transaction in progress', async () => {
    const user = await registerVerifyLogin(t)
    const { id: userId } = await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', user.email).executeTakeFirstOrThrow()
    assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200)
    assert.equal((await t.call('POST', '/watchlists', user.access_token, { name: 'Committed' })).statusCode, 201)
    let release!: () => void
    let began!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    const inside = new Promise<void>((resolve) => (began = resolve))
    const transaction = t.app.services.db.kysely.transaction().execute(async (trx) => {
      await trx.updateTable('watchlists').set({ name: 'Uncommitted' }).where('user_id', '=', userId).execute()
      await trx.updateTable('users').set({ full_name: 'Uncommitted' }).where('id', '=', userId).execute()
      began()
      await held
    })
    await inside
    // Through Kysely's one connection these reads would wait for the transaction to end.
    const waited = (ms: number) => new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), ms).unref())
    try {
      const list = await Promise.race([t.get('/watchlists', user.access_token), waited(2000)])
      assert.notEqual(list, 'waited', 'GET /watchlists waited for the transaction')
      assert.equal(list !== 'waited' && list.json().data.watchlists[0].name, 'Committed')
      const me = await Promise.race([t.get('/auth/me', user.access_token), waited(2000)])
      assert.notEqual(me, 'waited', 'GET /auth/me waited for the transaction')
      assert.notEqual(me !== 'waited' && me.json().data.full_name, 'Uncommitted')
    } finally {
      release()
      await transaction
    }
    assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists[0].name, 'Uncommitted')
    assert.equal((await t.get('/auth/me', user.access_token)).json().data.full_name, 'Uncommitted')
  })

  test('the reads of one turn share a snapshot, which a write on the service\'s own connection ends: a read after a write sees it, in the same turn', async () => {
    const user = await registerVerifyLogin(t)
    const { db } = t.app.services
    const { id } = await db.kysely.selectFrom('users').select('id').where('email', '=', user.email).executeTakeFirstOrThrow()
    const read = async () => (await users.read(db, id))!.full_name
    const turn = () => new Promise((resolve) => setImmediate(resolve))
    await turn()
    let sameTurn = true
    setImmediate(() => (sameTurn = false))
    const before = await read()
    await db.kysely.updateTable('users').set({ full_name: 'Written' }).where('id', '=', id).execute()
    assert.equal(await read(), 'Written', 'the write ended the snapshot the first read opened')
    assert.ok(sameTurn, 'all in one turn of the event loop')
    assert.notEqual(before, 'Written')

    // Another process's commit (the CLI's, say) is seen from the next turn on.
    await turn()
    sameTurn = true
    setImmediate(() => (sameTurn = false))
    assert.equal(await read(), 'Written')
    const other = new SQLite(sqliteFile(t.config.dataDir))
    try {
      other.prepare('update users set full_name = ? where id = ?').run('Elsewhere', id)
    } finally {
      other.close()
    }
    assert.equal(await read(), 'Written', 'within the turn: the snapshot its first read opened')
    assert.ok(sameTurn, 'all in one turn of the event loop')
    await turn()
    assert.equal(await read(), 'Elsewhere', 'the next turn reads the last commit')
  })
})

describe('the statement cache on sqlite', () => {
  let t: TestApp
  before(async () => {
    t = await startTestApp('sqlite')
  })
  after(async () => {
    await t.close()
  })

  // A fresh app: no request has opened the reader connection, whose statements would count too.
  test('distinct SQL texts get distinct statements, and at most 500 are kept', async () => {
    for (let i = 0; i < 600; i++) {
      const { rows } = await sql<{ n: number }>`select ${sql.raw(String(i))} as n`.execute(t.app.services.db.kysely)
      assert.equal(rows[0]!.n, i)
    }
    assert.equal(t.app.services.db.preparedStatements!(), 500)
  })
})

/** PostgreSQL names each distinct data statement, so each pooled connection prepares it once. */
describe('named statements on postgres', () => {
  let t: TestApp
  before(async () => {
    t = await startTestApp('postgres')
  })
  after(async () => {
    await t.close()
  })
  const named = () => t.app.services.db.preparedStatements!()
  const serverPrepared = async () => Number((await sql<{ n: string }>`select count(*) as n from pg_prepared_statements`.execute(t.app.services.db.kysely)).rows[0]!.n)

  test('repeating a request names nothing new, the server keeps the statements, and answers stay right', async () => {
    const user = await registerVerifyLogin(t)
    assert.equal((await t.call('POST', '/watchlists', user.access_token, { name: 'Reuse' })).statusCode, 201)
    assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists.length, 1)
    // Each request once first: /auth/me's batched read is a statement text of its own.
    assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)
    await t.app.services.feed.poll()
    const count = named()
    assert.ok(count > 0)
    for (let i = 0; i < 20; i++) {
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)
      assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists[0].name, 'Reuse')
    }
    assert.equal(named(), count)
    // Seen from one pooled connection: statements it has prepared stay prepared on the server.
    assert.ok((await serverPrepared()) > 0)
  })

  test('DDL and transaction control are never named, and at most 500 texts are', async () => {
    const before = named()
    await sql`create table if not exists scratch (n int)`.execute(t.app.services.db.kysely)
    await t.app.services.db.kysely.transaction().execute(async (trx) => {
      await sql`lock table scratch`.execute(trx)
    })
    assert.equal(named(), before, 'DDL, lock, begin and commit were not named')
    for (let i = 0; i < 600; i++) {
      const { rows } = await sql<{ n: number }>`select ${sql.raw(String(i))}::int as n`.execute(t.app.services.db.kysely)
      assert.equal(rows[0]!.n, i)
    }
    assert.equal(named(), 500)
  })
})

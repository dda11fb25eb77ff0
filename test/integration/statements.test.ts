import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { sql } from 'kysely'
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
    const count = prepared()
    for (let i = 0; i < 20; i++) {
      assert.equal((await t.get('/auth/me', user.access_token)).json().data.email, user.email)
      assert.equal((await t.get('/watchlists', user.access_token)).json().data.watchlists[0].name, 'Reuse')
    }
    assert.equal(prepared(), count)
  })

  test('distinct SQL texts get distinct statements, and at most 500 are kept', async () => {
    for (let i = 0; i < 600; i++) {
      const { rows } = await sql<{ n: number }>`select ${sql.raw(String(i))} as n`.execute(t.app.services.db.kysely)
      assert.equal(rows[0]!.n, i)
    }
    assert.equal(prepared(), 500)
  })
})

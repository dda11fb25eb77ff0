import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { ReadBatch } from '../../src/db/batch.ts'
import { batchesOf } from '../../src/db/repositories.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

describe('read batches', () => {
  test('the reads of one turn go out as one query, in key order, and equal keys share a slot', async () => {
    const sent: string[][] = []
    const batch = new ReadBatch<string, string>(
      (key) => key,
      async (keys) => {
        sent.push(keys)
        return keys.map((key) => key.toUpperCase())
      },
    )
    const answers = await Promise.all(['a', 'b', 'a', 'c'].map((key) => batch.load(key)))
    assert.deepEqual(answers, ['A', 'B', 'A', 'C'])
    assert.deepEqual(sent, [['a', 'b', 'c']])
    // A later turn is a new query.
    assert.equal(await batch.load('d'), 'D')
    assert.deepEqual(sent, [['a', 'b', 'c'], ['d']])
    assert.deepEqual(batch.stats, { queries: 2, reads: 5 })
  })

  test('a failed query fails every read of its batch with its error, and the next batch is unaffected', async () => {
    let fail = true
    const batch = new ReadBatch<string, string>(
      (key) => key,
      async (keys) => {
        if (fail) throw new Error('database went away')
        return keys
      },
    )
    const results = await Promise.allSettled([batch.load('a'), batch.load('b'), batch.load('a')])
    assert.ok(results.every((r) => r.status === 'rejected' && (r.reason as Error).message === 'database went away'))
    fail = false
    assert.equal(await batch.load('a'), 'a')
  })

  test('a batch larger than its bound is split into several queries', async () => {
    const sizes: number[] = []
    const batch = new ReadBatch<number, number>(
      String,
      async (keys) => {
        sizes.push(keys.length)
        return keys.map((k) => k * 2)
      },
      3,
    )
    assert.deepEqual(await Promise.all([1, 2, 3, 4, 5, 6, 7].map((k) => batch.load(k))), [2, 4, 6, 8, 10, 12, 14])
    assert.deepEqual(sizes, [3, 3, 1])
  })
})

describe('batched request reads on postgres', () => {
  let t: TestApp
  before(async () => {
    t = await startTestApp('postgres')
  })
  after(() => t.close())

  test('concurrent GET /auth/me of different users share queries and each gets their own answer', async () => {
    const people = await Promise.all(Array.from({ length: 6 }, () => registerVerifyLogin(t)))
    const stats = batchesOf(t.app.services.db).users.stats
    const before = { ...stats }
    const answers = await Promise.all(people.flatMap((p) => [t.get('/auth/me', p.access_token), t.get('/auth/me', p.access_token)]))
    answers.forEach((answer, i) => {
      assert.equal(answer.statusCode, 200)
      assert.equal(answer.json().data.email, people[Math.floor(i / 2)]!.email)
    })
    assert.equal(stats.reads - before.reads, 12)
    assert.ok(stats.queries - before.queries < 12, `12 reads in ${stats.queries - before.queries} queries`)
  })

  test('concurrent watchlist pages of different users, cursors and sizes each equal the page read alone', async () => {
    const people = await Promise.all(Array.from({ length: 3 }, () => registerVerifyLogin(t)))
    for (const [n, person] of people.entries()) {
      for (let i = 0; i < 3 + n; i++) {
        assert.equal((await t.post('/watchlists', { name: `list ${n}-${i}`, symbols: [`S${n}${i}`] }, person.access_token)).statusCode, 201)
      }
    }
    const firstPages = people.flatMap((person) => ['/watchlists', '/watchlists?limit=1', '/watchlists?limit=2'].map((path) => ({ path, token: person.access_token })))
    const firstAlone: { data: { next_cursor: string | null } }[] = []
    for (const q of firstPages) firstAlone.push((await t.get(q.path, q.token)).json())
    // Second pages, from the cursors the first pages gave, so batches mix users, sizes and positions.
    const queries = [
      ...firstPages,
      ...firstPages.flatMap((q, i) => (firstAlone[i]!.data.next_cursor ? [{ path: `/watchlists?limit=2&cursor=${firstAlone[i]!.data.next_cursor}`, token: q.token }] : [])),
    ]
    assert.ok(queries.length > firstPages.length)
    const alone: unknown[] = []
    for (const q of queries) alone.push((await t.get(q.path, q.token)).json())
    const stats = batchesOf(t.app.services.db).pages.stats
    const before = { ...stats }
    const together = await Promise.all(queries.map((q) => t.get(q.path, q.token)))
    assert.ok(together.every((r) => r.statusCode === 200))
    assert.deepEqual(together.map((r) => r.json()), alone)
    assert.ok(stats.queries - before.queries < queries.length, `${queries.length} pages in ${stats.queries - before.queries} queries`)
  })

  test('a list created and acknowledged is in the next batched page', async () => {
    const person = await registerVerifyLogin(t)
    const created = await t.post('/watchlists', { name: 'fresh', symbols: ['NEW'] }, person.access_token)
    const pages = await Promise.all([t.get('/watchlists', person.access_token), t.get('/watchlists?limit=5', person.access_token)])
    for (const page of pages) assert.deepEqual(page.json().data.watchlists.map((w: { id: string }) => w.id), [created.json().data.watchlist.id])
  })
})

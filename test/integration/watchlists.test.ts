import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

type User = Awaited<ReturnType<typeof registerVerifyLogin>>

for (const engine of ENGINES) {
  describe(`watchlists on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine)
    })
    after(async () => {
      await t.close()
    })

    const create = (user: User, body: unknown) => t.call('POST', '/watchlists', user.access_token, body)
    async function createOk(user: User, body: Record<string, unknown>) {
      const response = await create(user, body)
      assert.equal(response.statusCode, 201, response.body)
      return response.json().data.watchlist as { id: string; name: string; symbols: string[]; created_at: string; updated_at: string }
    }
    const code = (response: { json(): { error?: { code: string } } }) => response.json().error?.code

    describe('CRUD', () => {
      test('create, read, rename, replace symbols, add and remove one, delete', async () => {
        const user = await registerVerifyLogin(t)
        const created = await createOk(user, { name: '  Tech  ', symbols: ['aapl', 'MSFT', 'brk.b', 'AAPL', 'msft'] })
        assert.equal(created.name, 'Tech')
        assert.deepEqual(created.symbols, ['AAPL', 'MSFT', 'BRK.B'])
        assert.deepEqual(Object.keys(created).sort(), ['created_at', 'id', 'name', 'symbols', 'updated_at'])

        const read = await t.get(`/watchlists/${created.id}`, user.access_token)
        assert.equal(read.statusCode, 200)
        assert.deepEqual(read.json().data.watchlist, created)

        const renamed = await t.call('PATCH', `/watchlists/${created.id}`, user.access_token, { name: 'Big tech' })
        assert.equal(renamed.statusCode, 200)
        assert.equal(renamed.json().data.watchlist.name, 'Big tech')
        assert.deepEqual(renamed.json().data.watchlist.symbols, ['AAPL', 'MSFT', 'BRK.B'])

        const replaced = await t.call('PATCH', `/watchlists/${created.id}`, user.access_token, { symbols: ['nvda', 'amd'] })
        assert.deepEqual(replaced.json().data.watchlist.symbols, ['NVDA', 'AMD'])

        const added = await t.call('POST', `/watchlists/${created.id}/symbols`, user.access_token, { symbol: 'tsm' })
        assert.equal(added.statusCode, 200)
        assert.deepEqual(added.json().data.watchlist.symbols, ['NVDA', 'AMD', 'TSM'])
        const again = await t.call('POST', `/watchlists/${created.id}/symbols`, user.access_token, { symbol: 'NVDA' })
        assert.equal(again.statusCode, 200)
        assert.deepEqual(again.json().data.watchlist.symbols, ['NVDA', 'AMD', 'TSM'])

        const removed = await t.call('DELETE', `/watchlists/${created.id}/symbols/amd`, user.access_token)
        assert.equal(removed.statusCode, 200)
        assert.deepEqual(removed.json().data.watchlist.symbols, ['NVDA', 'TSM'])
        const absent = await t.call('DELETE', `/watchlists/${created.id}/symbols/AMD`, user.access_token)
        assert.equal(absent.statusCode, 404)
        assert.equal(code(absent), 'NOT_FOUND')

        const deleted = await t.call('DELETE', `/watchlists/${created.id}`, user.access_token)
        assert.equal(deleted.statusCode, 200)
        assert.deepEqual(deleted.json().data, { id: created.id, deleted: true })
        assert.equal((await t.get(`/watchlists/${created.id}`, user.access_token)).statusCode, 404)
        assert.equal((await t.call('DELETE', `/watchlists/${created.id}`, user.access_token)).statusCode, 404)
      })

      test('a list without symbols starts empty; updated_at moves on change', async () => {
        const user = await registerVerifyLogin(t)
        const created = await createOk(user, { name: 'Empty' })
        assert.deepEqual(created.symbols, [])
        t.clock.advance(5)
        const changed = (await t.call('POST', `/watchlists/${created.id}/symbols`, user.access_token, { symbol: 'X' })).json().data.watchlist
        assert.equal(changed.created_at, created.created_at)
        assert.ok(Date.parse(changed.updated_at) > Date.parse(created.updated_at))
      })
    })

    describe('validation', () => {
      let user: User
      before(async () => {
        user = await registerVerifyLogin(t)
      })
      const cases: [string, unknown, string][] = [
        ['no name', { symbols: ['A'] }, 'name'],
        ['a blank name', { name: '   ' }, 'name'],
        ['a name of 101 characters', { name: 'n'.repeat(101) }, 'name'],
        ['a name with a control character', { name: 'a\u0000b' }, 'name'],
        ['a name that is not a string', { name: 7 }, 'name'],
        ['a symbol of 16 characters', { name: 'x', symbols: ['A', 'ABCDEFGHIJKLMNOP'] }, 'symbols.1'],
        ['a symbol with a space', { name: 'x', symbols: ['AB CD'] }, 'symbols.0'],
        ['a symbol with a $', { name: 'x', symbols: ['OK', 'OK2', '$USD'] }, 'symbols.2'],
        ['an empty symbol', { name: 'x', symbols: [''] }, 'symbols.0'],
        ['201 symbols in one body', { name: 'x', symbols: Array.from({ length: 201 }, (_, i) => `S${i}`) }, 'symbols'],
        ['an owner field', { name: 'x', user_id: '00000000-0000-4000-8000-000000000000' }, 'user_id'],
        ['another owner field', { name: 'x', owner_id: 'someone' }, 'owner_id'],
        ['an id of our choosing', { name: 'x', id: '00000000-0000-4000-8000-000000000000' }, 'id'],
      ]
      for (const [name, body, field] of cases) {
        test(`create refuses ${name} (VALIDATION_ERROR on ${field})`, async () => {
          const response = await create(user, body)
          assert.equal(response.statusCode, 400, response.body)
          assert.equal(code(response), 'VALIDATION_ERROR')
          assert.ok(response.json().error.details.some((d: { field: string }) => d.field === field), JSON.stringify(response.json().error.details))
        })
      }

      test('PATCH needs at least one member and refuses owner fields', async () => {
        const list = await createOk(user, { name: 'Patch me' })
        for (const body of [{}, { user_id: user.userId }, { name: 'ok', owner: 'x' }]) {
          const response = await t.call('PATCH', `/watchlists/${list.id}`, user.access_token, body)
          assert.equal(response.statusCode, 400, JSON.stringify(body))
          assert.equal(code(response), 'VALIDATION_ERROR')
        }
        assert.equal((await t.get(`/watchlists/${list.id}`, user.access_token)).json().data.watchlist.name, 'Patch me')
      })

      test('an invalid symbol to add is VALIDATION_ERROR', async () => {
        const list = await createOk(user, { name: 'Add' })
        const response = await t.call('POST', `/watchlists/${list.id}/symbols`, user.access_token, { symbol: 'not a symbol' })
        assert.equal(code(response), 'VALIDATION_ERROR')
      })

      test('a malformed id is 404 NOT_FOUND on every verb, never 500', async () => {
        for (const id of ['not-a-uuid', '1', "1' OR '1'='1", '00000000-0000-4000-8000-00000000000g']) {
          const path = `/watchlists/${encodeURIComponent(id)}`
          for (const [method, suffix, body] of [
            ['GET', '', undefined], ['PATCH', '', { name: 'x' }], ['DELETE', '', undefined],
            ['POST', '/symbols', { symbol: 'A' }], ['DELETE', '/symbols/A', undefined],
          ] as const) {
            const response = await t.call(method, path + suffix, user.access_token, body)
            assert.equal(response.statusCode, 404, `${method} ${path}${suffix}: ${response.body}`)
            assert.equal(code(response), 'NOT_FOUND')
          }
        }
      })

      test('limit must be 1..100 and a cursor the service did not issue is VALIDATION_ERROR', async () => {
        for (const query of ['limit=0', 'limit=101', 'limit=abc', 'limit=2.5', 'cursor=garbage', 'cursor=eyJwIjo1fQ.AAAAAAAAAAAAAAAAAAAAAA', 'other=1']) {
          const response = await t.get(`/watchlists?${query}`, user.access_token)
          assert.equal(response.statusCode, 400, query)
          assert.equal(code(response), 'VALIDATION_ERROR', query)
        }
      })
    })

    describe('pagination', () => {
      test('pages in creation order, each item exactly once, even with lists added between pages', async () => {
        const user = await registerVerifyLogin(t)
        const names: string[] = []
        for (let i = 0; i < 25; i++) {
          names.push(`L${i}`)
          await createOk(user, { name: `L${i}` })
        }
        const first = (await t.get('/watchlists?limit=10', user.access_token)).json().data
        assert.equal(first.watchlists.length, 10)
        assert.ok(first.next_cursor)
        for (let i = 25; i < 28; i++) {
          names.push(`L${i}`)
          await createOk(user, { name: `L${i}` })
        }
        const seen = first.watchlists.map((w: { name: string }) => w.name)
        let cursor = first.next_cursor as string | null
        while (cursor) {
          const page = (await t.get(`/watchlists?limit=10&cursor=${encodeURIComponent(cursor)}`, user.access_token)).json().data
          seen.push(...page.watchlists.map((w: { name: string }) => w.name))
          cursor = page.next_cursor
        }
        assert.deepEqual(seen, names)
      })

      test('default limit is 20; the last page has next_cursor null', async () => {
        const user = await registerVerifyLogin(t)
        for (let i = 0; i < 21; i++) await createOk(user, { name: `D${i}` })
        const first = (await t.get('/watchlists', user.access_token)).json().data
        assert.equal(first.watchlists.length, 20)
        const second = (await t.get(`/watchlists?cursor=${encodeURIComponent(first.next_cursor)}`, user.access_token)).json().data
        assert.equal(second.watchlists.length, 1)
        assert.equal(second.next_cursor, null)
        const exact = await registerVerifyLogin(t)
        await createOk(exact, { name: 'only' })
        assert.equal((await t.get('/watchlists', exact.access_token)).json().data.next_cursor, null)
      })

      test("another user's cursor is refused", async () => {
        const a = await registerVerifyLogin(t)
        const b = await registerVerifyLogin(t)
        for (let i = 0; i < 3; i++) await createOk(a, { name: `A${i}` })
        const cursor = (await t.get('/watchlists?limit=1', a.access_token)).json().data.next_cursor
        assert.equal(code(await t.get(`/watchlists?cursor=${encodeURIComponent(cursor)}`, b.access_token)), 'VALIDATION_ERROR')
      })
    })

    describe('ownership', () => {
      test("another user's list is 404 on every verb, leaks nothing and stays unchanged", async () => {
        const owner = await registerVerifyLogin(t)
        const intruder = await registerVerifyLogin(t)
        const list = await createOk(owner, { name: 'Private', symbols: ['SECRET'] })
        const attempts = [
          t.get(`/watchlists/${list.id}`, intruder.access_token),
          t.call('PATCH', `/watchlists/${list.id}`, intruder.access_token, { name: 'Pwned', symbols: [] }),
          t.call('POST', `/watchlists/${list.id}/symbols`, intruder.access_token, { symbol: 'EVIL' }),
          t.call('DELETE', `/watchlists/${list.id}/symbols/SECRET`, intruder.access_token),
          t.call('DELETE', `/watchlists/${list.id}`, intruder.access_token),
        ]
        const missing = await t.get('/watchlists/00000000-0000-4000-8000-000000000000', intruder.access_token)
        for (const response of await Promise.all(attempts)) {
          assert.equal(response.statusCode, 404)
          assert.equal(response.body, missing.body)
          assert.ok(!response.body.includes('SECRET') && !response.body.includes('Private'))
        }
        assert.deepEqual((await t.get('/watchlists', intruder.access_token)).json().data.watchlists, [])
        assert.deepEqual((await t.get(`/watchlists/${list.id}`, owner.access_token)).json().data.watchlist, list)
      })
    })

    describe('limits', () => {
      test('the 101st list is LIMIT_EXCEEDED (409)', async () => {
        const user = await registerVerifyLogin(t)
        for (let i = 0; i < 100; i++) await createOk(user, { name: `N${i}` })
        const response = await create(user, { name: 'one too many' })
        assert.equal(response.statusCode, 409)
        assert.equal(code(response), 'LIMIT_EXCEEDED')
      })

      test('a symbol added to a full list is LIMIT_EXCEEDED; one already there is still a no-op', async () => {
        const user = await registerVerifyLogin(t)
        const full = await createOk(user, { name: 'Full', symbols: Array.from({ length: 200 }, (_, i) => `S${i}`) })
        assert.equal(full.symbols.length, 200)
        const extra = await t.call('POST', `/watchlists/${full.id}/symbols`, user.access_token, { symbol: 'ONEMORE' })
        assert.equal(extra.statusCode, 409)
        assert.equal(code(extra), 'LIMIT_EXCEEDED')
        assert.equal((await t.call('POST', `/watchlists/${full.id}/symbols`, user.access_token, { symbol: 's7' })).statusCode, 200)
      })
    })

    describe('concurrency', () => {
      test('parallel symbol additions all land', async () => {
        const user = await registerVerifyLogin(t)
        const list = await createOk(user, { name: 'Race' })
        const symbols = Array.from({ length: 20 }, (_, i) => `R${i}`)
        const responses = await Promise.all(symbols.map((symbol) => t.call('POST', `/watchlists/${list.id}/symbols`, user.access_token, { symbol })))
        assert.ok(responses.every((r) => r.statusCode === 200))
        const final = (await t.get(`/watchlists/${list.id}`, user.access_token)).json().data.watchlist.symbols as string[]
        assert.deepEqual([...final].sort(), [...symbols].sort())
      })

      test('parallel additions to a nearly full list stop exactly at 200', async () => {
        const user = await registerVerifyLogin(t)
        const list = await createOk(user, { name: 'Nearly', symbols: Array.from({ length: 195 }, (_, i) => `S${i}`) })
        const responses = await Promise.all(
          Array.from({ length: 10 }, (_, i) => t.call('POST', `/watchlists/${list.id}/symbols`, user.access_token, { symbol: `NEW${i}` })),
        )
        assert.equal(responses.filter((r) => r.statusCode === 200).length, 5)
        assert.equal(responses.filter((r) => code(r) === 'LIMIT_EXCEEDED').length, 5)
        assert.equal((await t.get(`/watchlists/${list.id}`, user.access_token)).json().data.watchlist.symbols.length, 200)
      })

      test('two racing PATCHes of different members both land', async () => {
        const user = await registerVerifyLogin(t)
        const list = await createOk(user, { name: 'Before', symbols: ['A'] })
        const [a, b] = await Promise.all([
          t.call('PATCH', `/watchlists/${list.id}`, user.access_token, { name: 'After' }),
          t.call('PATCH', `/watchlists/${list.id}`, user.access_token, { symbols: ['B', 'C'] }),
        ])
        assert.equal(a.statusCode, 200)
        assert.equal(b.statusCode, 200)
        const final = (await t.get(`/watchlists/${list.id}`, user.access_token)).json().data.watchlist
        assert.equal(final.name, 'After')
        assert.deepEqual(final.symbols, ['B', 'C'])
      })

      test('parallel creations near the limit stop exactly at 100 lists', async () => {
        const user = await registerVerifyLogin(t)
        for (let i = 0; i < 97; i++) await createOk(user, { name: `P${i}` })
        const responses = await Promise.all(Array.from({ length: 8 }, (_, i) => create(user, { name: `Q${i}` })))
        assert.equal(responses.filter((r) => r.statusCode === 201).length, 3)
        assert.equal(responses.filter((r) => code(r) === 'LIMIT_EXCEEDED').length, 5)
        let total = 0
        let cursor: string | null = null
        do {
          const page: { watchlists: unknown[]; next_cursor: string | null } = (await t.get(`/watchlists?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, user.access_token)).json().data
          total += page.watchlists.length
          cursor = page.next_cursor
        } while (cursor)
        assert.equal(total, 100)
      })
    })

    describe('authentication and accounts', () => {
      test('no token is AUTH_REQUIRED, a disabled account ACCOUNT_DISABLED, an expired token TOKEN_EXPIRED', async () => {
        const user = await registerVerifyLogin(t)
        const list = await createOk(user, { name: 'Guarded' })
        assert.equal(code(await t.get('/watchlists')), 'AUTH_REQUIRED')
        assert.equal(code(await t.call('POST', '/watchlists', undefined, { name: 'x' })), 'AUTH_REQUIRED')

        await t.app.services.accounts.disable(user.email, 'suspended')
        for (const response of [await t.get('/watchlists', user.access_token), await t.get(`/watchlists/${list.id}`, user.access_token), await create(user, { name: 'x' })]) {
          assert.equal(response.statusCode, 403)
          assert.equal(code(response), 'ACCOUNT_DISABLED')
        }
        await t.app.services.accounts.enable(user.email)

        t.clock.advance(900 + 31)
        try {
          const expired = await t.get(`/watchlists/${list.id}`, user.access_token)
          assert.equal(expired.statusCode, 401)
          assert.equal(code(expired), 'TOKEN_EXPIRED')
        } finally {
          t.clock.advance(-(900 + 31))
        }
      })

      test("a deleted user's watchlists are deleted with the user", async () => {
        const user = await registerVerifyLogin(t)
        await createOk(user, { name: 'Gone soon', symbols: ['A'] })
        const db = t.app.services.db.kysely
        await db.deleteFrom('users').where('id', '=', user.userId).execute()
        assert.equal((await db.selectFrom('watchlists').select('id').where('user_id', '=', user.userId).execute()).length, 0)
      })
    })
  })
}

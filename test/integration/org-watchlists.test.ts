import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { claimsChanged } from '../../src/authz/claims.ts'
import { ORGANIZATION_LISTS_MAX } from '../../src/watchlists/schemas.ts'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

/**
 * Organisation watchlists (API.md, "Roles, permissions and organisations"): owned by an
 * organisation, read by its members with `watchlists:read`, changed with `watchlists:write`, their
 * permissions from the token's active organisation or else from their membership; invisible
 * (NOT_FOUND) to everyone else. Organisations and memberships are written here as the
 * organisations' service writes them: one transaction, the claims moved, the feed told.
 */

type User = Awaited<ReturnType<typeof registerVerifyLogin>>
type List = { id: string; name: string; symbols: string[]; organization_id?: string }

for (const engine of ENGINES) {
  describe(`organisation watchlists on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine)
    })
    after(async () => {
      await t.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined

    /** A change of memberships as an organisation's service makes it: the rows and claimsChanged in one transaction, then the feed here. */
    async function changeMemberships(write: (trx: Parameters<typeof claimsChanged>[0]) => Promise<string[]>) {
      const { db, feed } = t.app.services
      const changes = await db.kysely.transaction().execute(async (trx) => claimsChanged(trx, await write(trx)))
      feed.applyLocally(changes)
    }

    /** An organisation with these members (user, roles); returns its id. */
    async function organization(members: [User, string[]][]): Promise<string> {
      const id = randomUUID()
      const now = Date.now()
      await changeMemberships(async (trx) => {
        await trx.insertInto('organizations').values({ id, name: `Org ${id.slice(0, 8)}`, created_at: now, updated_at: now }).execute()
        for (const [index, [user, roles]] of members.entries()) {
          await trx.insertInto('memberships').values({ organization_id: id, user_id: user.userId, roles: roles.join(' '), joined_at: now + index }).execute()
        }
        return members.map(([user]) => user.userId)
      })
      return id
    }

    /** A fresh access token (the membership change made the older ones out of date), optionally for an active organisation. */
    async function signIn(user: User, organizationId?: string): Promise<string> {
      const login = await t.post('/auth/login', { email: user.email, password: PASSWORD, ...(organizationId ? { organization_id: organizationId } : {}) })
      assert.equal(login.statusCode, 200, login.body)
      return login.json().data.access_token as string
    }

    async function createOk(token: string, body: Record<string, unknown>): Promise<List> {
      const created = await t.post('/watchlists', body, token)
      assert.equal(created.statusCode, 201, created.body)
      return created.json().data.watchlist as List
    }

    /** A team of four: owner, admin and member of one organisation, and a stranger to it, each with a fresh token. */
    async function team() {
      const [owner, admin, member, stranger] = await Promise.all([1, 2, 3, 4].map(() => registerVerifyLogin(t)))
      const org = await organization([[owner!, ['owner']], [admin!, ['admin']], [member!, ['member']]])
      const tokens = {
        owner: await signIn(owner!),
        admin: await signIn(admin!),
        member: await signIn(member!),
        stranger: await signIn(stranger!),
      }
      return { org, owner: owner!, admin: admin!, member: member!, stranger: stranger!, tokens }
    }

    test('the owner creates a list for the organisation; a member reads it but may not change it (403); an admin may; a stranger sees nothing (404)', async () => {
      const { org, member, tokens } = await team()
      const shared = await createOk(tokens.owner, { name: 'Team semis', symbols: ['nvda', 'amd'], organization_id: org })
      assert.equal(shared.organization_id, org)
      assert.deepEqual(shared.symbols, ['NVDA', 'AMD'])

      // A member without an active organisation: their roles are read from the membership.
      const read = await t.get(`/watchlists/${shared.id}`, tokens.member)
      assert.equal(read.statusCode, 200, read.body)
      assert.deepEqual(read.json().data.watchlist, shared)
      const writes = [
        () => t.call('PATCH', `/watchlists/${shared.id}`, tokens.member, { name: 'Mine now' }),
        () => t.call('DELETE', `/watchlists/${shared.id}`, tokens.member),
        () => t.post(`/watchlists/${shared.id}/symbols`, { symbol: 'TSM' }, tokens.member),
        () => t.call('DELETE', `/watchlists/${shared.id}/symbols/AMD`, tokens.member),
        () => t.post('/watchlists', { name: 'Not allowed', organization_id: org }, tokens.member),
      ]
      for (const write of writes) {
        const refused = await write()
        assert.equal(refused.statusCode, 403, refused.body)
        assert.equal(code(refused), 'FORBIDDEN')
      }
      // The same member with the organisation active: the token's own claims decide, alike.
      const active = await signIn(member, org)
      assert.equal((await t.get(`/watchlists/${shared.id}`, active)).statusCode, 200)
      const activeWrite = await t.call('PATCH', `/watchlists/${shared.id}`, active, { name: 'Mine now' })
      assert.equal(activeWrite.statusCode, 403, activeWrite.body)
      assert.equal(code(activeWrite), 'FORBIDDEN')

      // The admin role holds watchlists:write.
      const renamed = await t.call('PATCH', `/watchlists/${shared.id}`, tokens.admin, { name: 'Team chips' })
      assert.equal(renamed.statusCode, 200, renamed.body)
      assert.equal(renamed.json().data.watchlist.name, 'Team chips')
      const added = await t.post(`/watchlists/${shared.id}/symbols`, { symbol: 'tsm' }, tokens.admin)
      assert.equal(added.statusCode, 200, added.body)
      assert.deepEqual(added.json().data.watchlist.symbols, ['NVDA', 'AMD', 'TSM'])
      const removed = await t.call('DELETE', `/watchlists/${shared.id}/symbols/nvda`, tokens.admin)
      assert.deepEqual(removed.json().data.watchlist.symbols, ['AMD', 'TSM'])
      assert.deepEqual((await t.get(`/watchlists/${shared.id}`, tokens.member)).json().data.watchlist.symbols, ['AMD', 'TSM'], 'the member reads what the admin wrote')

      // A stranger cannot tell the list, nor the organisation, from nothing at all.
      const strangers = [
        () => t.get(`/watchlists/${shared.id}`, tokens.stranger),
        () => t.call('PATCH', `/watchlists/${shared.id}`, tokens.stranger, { name: 'Taken' }),
        () => t.call('DELETE', `/watchlists/${shared.id}`, tokens.stranger),
        () => t.post(`/watchlists/${shared.id}/symbols`, { symbol: 'X' }, tokens.stranger),
        () => t.get(`/watchlists?organization_id=${org}`, tokens.stranger),
        () => t.post('/watchlists', { name: 'Intruder', organization_id: org }, tokens.stranger),
        () => t.get(`/watchlists?organization_id=${randomUUID()}`, tokens.owner),
        () => t.get('/watchlists?organization_id=not-an-id', tokens.owner),
      ]
      for (const attempt of strangers) {
        const refused = await attempt()
        assert.equal(refused.statusCode, 404, refused.body)
        assert.equal(code(refused), 'NOT_FOUND')
      }

      // The organisation's list is nobody's own: not in the maker's list, nor their export.
      assert.deepEqual((await t.get('/watchlists', tokens.owner)).json().data.watchlists, [])
      const exported = await t.get('/auth/me/export', tokens.owner)
      assert.equal(exported.statusCode, 200, exported.body)
      assert.deepEqual(exported.json().data.watchlists, [])

      const deleted = await t.call('DELETE', `/watchlists/${shared.id}`, tokens.admin)
      assert.equal(deleted.statusCode, 200, deleted.body)
      assert.equal((await t.get(`/watchlists/${shared.id}`, tokens.owner)).statusCode, 404)
    })

    test('a personal list stays invisible to the members of its owner\'s organisations', async () => {
      const { tokens } = await team()
      const own = await createOk(tokens.owner, { name: 'Mine', symbols: ['AAPL'] })
      assert.equal(own.organization_id, undefined)
      assert.deepEqual(Object.keys(own).sort(), ['created_at', 'id', 'name', 'symbols', 'updated_at'], 'a personal list looks as it always did')
      for (const token of [tokens.admin, tokens.member]) {
        for (const attempt of [
          () => t.get(`/watchlists/${own.id}`, token),
          () => t.call('PATCH', `/watchlists/${own.id}`, token, { name: 'Ours' }),
          () => t.call('DELETE', `/watchlists/${own.id}`, token),
          () => t.post(`/watchlists/${own.id}/symbols`, { symbol: 'MSFT' }, token),
        ]) {
          const refused = await attempt()
          assert.equal(refused.statusCode, 404, refused.body)
          assert.equal(code(refused), 'NOT_FOUND')
        }
      }
      assert.deepEqual((await t.get(`/watchlists/${own.id}`, tokens.owner)).json().data.watchlist, own)
    })

    test('GET /watchlists?organization_id= pages the organisation\'s lists in the order they were made, apart from anyone\'s own', async () => {
      const { org, tokens } = await team()
      const made: string[] = []
      for (const [index, token] of [tokens.owner, tokens.admin, tokens.owner, tokens.admin, tokens.owner].entries()) {
        made.push((await createOk(token, { name: `Shared ${index}`, organization_id: org })).id)
      }
      // Makers' own lists, made between and after, are neither listed there nor disturbed.
      const ownOfOwner = await createOk(tokens.owner, { name: 'Own' })
      const ownOfAdmin = await createOk(tokens.admin, { name: 'Own too', organization_id: null })
      assert.equal(ownOfAdmin.organization_id, undefined, 'organization_id null: the caller\'s own')
      made.push((await createOk(tokens.admin, { name: 'Shared 5', organization_id: org })).id)

      const first = await t.get(`/watchlists?organization_id=${org}&limit=4`, tokens.member)
      assert.equal(first.statusCode, 200, first.body)
      const cursor = first.json().data.next_cursor as string
      assert.ok(cursor)
      const second = await t.get(`/watchlists?organization_id=${org}&limit=4&cursor=${encodeURIComponent(cursor)}`, tokens.member)
      assert.equal(second.statusCode, 200, second.body)
      assert.equal(second.json().data.next_cursor, null)
      const listed = [...first.json().data.watchlists, ...second.json().data.watchlists] as List[]
      assert.deepEqual(listed.map((list) => list.id), made)
      assert.ok(listed.every((list) => list.organization_id === org))

      // A cursor belongs to its listing.
      const elsewhere = await t.get(`/watchlists?limit=4&cursor=${encodeURIComponent(cursor)}`, tokens.member)
      assert.equal(elsewhere.statusCode, 400, elsewhere.body)
      assert.equal(code(elsewhere), 'VALIDATION_ERROR')
      const anotherReader = await t.get(`/watchlists?organization_id=${org}&limit=4&cursor=${encodeURIComponent(cursor)}`, tokens.admin)
      assert.equal(code(anotherReader), 'VALIDATION_ERROR')

      assert.deepEqual((await t.get('/watchlists', tokens.owner)).json().data.watchlists.map((list: List) => list.id), [ownOfOwner.id])
      assert.deepEqual((await t.get('/watchlists', tokens.admin)).json().data.watchlists.map((list: List) => list.id), [ownOfAdmin.id])
    })

    test('creations racing in one organisation all land, each once, within its limit; the makers\' own lists are not counted against it', async () => {
      const { org, owner, tokens } = await team()
      const raced = await Promise.all(Array.from({ length: 8 }, (_, index) => t.post('/watchlists', { name: `Race ${index}`, organization_id: org }, index % 2 ? tokens.owner : tokens.admin)))
      for (const response of raced) assert.equal(response.statusCode, 201, response.body)
      const page = await t.get(`/watchlists?organization_id=${org}&limit=100`, tokens.member)
      assert.equal(page.json().data.watchlists.length, 8)

      // Fill the organisation up to its limit, as the owner's creations (positions unique per maker).
      const { db } = t.app.services
      const top = await db.kysely.selectFrom('watchlists').select((eb) => eb.fn.max<number>('position').as('top')).where('user_id', '=', owner.userId).executeTakeFirstOrThrow()
      const now = Date.now()
      const rows = Array.from({ length: ORGANIZATION_LISTS_MAX - 8 }, (_, index) => ({
        id: randomUUID(), user_id: owner.userId, organization_id: org, position: Number(top.top) + index + 1, name: `Filler ${index}`, symbols: '[]', created_at: now, updated_at: now,
      }))
      await db.kysely.insertInto('watchlists').values(rows).execute()
      const full = await t.post('/watchlists', { name: 'One too many', organization_id: org }, tokens.admin)
      assert.equal(full.statusCode, 409, full.body)
      assert.equal(code(full), 'LIMIT_EXCEEDED')
      // The owner made more than a user's limit in the organisation, and still has their own.
      const own = await t.post('/watchlists', { name: 'Still mine' }, tokens.owner)
      assert.equal(own.statusCode, 201, own.body)
      assert.deepEqual((await t.get('/watchlists', tokens.owner)).json().data.watchlists.map((list: List) => list.name), ['Still mine'])
    })

    test('a member who deletes their account leaves the lists they made to the organisation: the owner keeps them, the remaining members still read them', async () => {
      const { org, owner, tokens } = await team()
      const made = await createOk(tokens.admin, { name: 'Made by the admin', symbols: ['AAPL'], organization_id: org })
      const own = await createOk(tokens.admin, { name: 'The admin\'s own', symbols: ['MSFT'] })
      const deleted = await t.call('DELETE', '/auth/me', tokens.admin, { password: PASSWORD })
      assert.equal(deleted.statusCode, 200, deleted.body)
      const ownerToken = await signIn(owner)
      const kept = await t.get(`/watchlists/${made.id}`, ownerToken)
      assert.equal(kept.statusCode, 200, kept.body)
      assert.equal(kept.json().data.watchlist.name, 'Made by the admin')
      const listed = (await t.get(`/watchlists?organization_id=${org}`, ownerToken)).json().data.watchlists as List[]
      assert.deepEqual(listed.map((list) => list.id), [made.id])
      assert.equal((await t.get(`/watchlists/${own.id}`, ownerToken)).statusCode, 404, 'the admin\'s own list went with the account')
      const rows = await t.app.services.db.kysely.selectFrom('watchlists').select(['id', 'user_id']).where('id', 'in', [made.id, own.id]).execute()
      assert.deepEqual(rows, [{ id: made.id, user_id: owner.userId }])
    })

    test('after a membership is removed, the old token is out of date and the next one finds nothing (404)', async () => {
      const { org, member, tokens } = await team()
      const shared = await createOk(tokens.owner, { name: 'Before', organization_id: org })
      const active = await signIn(member, org)
      assert.equal((await t.get(`/watchlists/${shared.id}`, tokens.member)).statusCode, 200)
      assert.equal((await t.get(`/watchlists?organization_id=${org}`, active)).statusCode, 200)

      await changeMemberships(async (trx) => {
        await trx.deleteFrom('memberships').where('organization_id', '=', org).where('user_id', '=', member.userId).execute()
        return [member.userId]
      })
      for (const token of [tokens.member, active]) {
        const stale = await t.get(`/watchlists/${shared.id}`, token)
        assert.equal(stale.statusCode, 401, stale.body)
        assert.equal(code(stale), 'TOKEN_EXPIRED')
      }
      const fresh = await signIn(member)
      for (const attempt of [
        () => t.get(`/watchlists/${shared.id}`, fresh),
        () => t.get(`/watchlists?organization_id=${org}`, fresh),
        () => t.post('/watchlists', { name: 'After', organization_id: org }, fresh),
      ]) {
        const refused = await attempt()
        assert.equal(refused.statusCode, 404, refused.body)
        assert.equal(code(refused), 'NOT_FOUND')
      }
      assert.equal((await t.get(`/watchlists/${shared.id}`, tokens.owner)).statusCode, 200, 'the list itself stays the organisation\'s')
    })
  })
}

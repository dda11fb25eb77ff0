import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { GroupCommit } from '../../src/db/group-commit.ts'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

for (const engine of ENGINES) {
  describe(`group commit on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine)
    })
    after(() => t.close())

    const refreshedEvents = async (userId: string) =>
      (await t.app.services.db.kysely.selectFrom('audit_events').select('id').where('user_id', '=', userId).where('type', '=', 'token.refreshed').execute()).length

    test('concurrent refreshes share commits, and every answered refresh is already durable', async () => {
      const user = await registerVerifyLogin(t)
      const { commits } = t.app.services
      const before = { ...commits.stats }
      const answers = await Promise.all(
        Array.from({ length: 40 }, async () => {
          const response = await t.post('/auth/refresh', { refresh_token: user.refresh_token })
          // Acknowledged means committed: the row is there the moment the answer is.
          const seen = await refreshedEvents(user.userId)
          return { status: response.statusCode, seen }
        }),
      )
      assert.ok(answers.every((a) => a.status === 200))
      assert.ok(answers.every((a) => a.seen >= 1))
      assert.equal(await refreshedEvents(user.userId), 40)
      const groups = commits.stats.groups - before.groups
      const jobs = commits.stats.jobs - before.jobs
      assert.equal(jobs, 40)
      assert.ok(groups < jobs, `40 writes in ${groups} commits`)
      console.log(`${engine}: 40 concurrent refreshes in ${groups} commits`)
    })

    test('a write handed in the moment the previous one is acknowledged is committed too', async () => {
      const commits = new GroupCommit(t.app.services.db)
      const names = Array.from({ length: 3 }, (_, i) => `back-to-back-${i}-${Date.now()}`)
      const insert = (name: string) => (trx: typeof t.app.services.db.kysely) => trx.insertInto('secrets').values({ name, value: 'x', created_at: 1 }).execute()
      // One after another in one async flow: each run() comes while the drain that acknowledged
      // the previous write is still finishing. A write left waiting would never settle.
      const inTurn = (async () => {
        for (const name of names) await commits.run(insert(name))
        return 'committed'
      })()
      const stuck = new Promise((resolve) => setTimeout(() => resolve('still waiting after 2 s'), 2000).unref())
      assert.equal(await Promise.race([inTurn, stuck]), 'committed')
      const stored = await t.app.services.db.kysely.selectFrom('secrets').select('name').where('name', 'in', names).execute()
      assert.equal(stored.length, 3)
    })

    test('a write that fails does not sink the others of its group; it alone is refused', async () => {
      const commits = new GroupCommit(t.app.services.db)
      const names = ['group-a', 'group-b', 'group-c'].map((n) => `${n}-${Date.now()}`)
      const insert = (name: string) => (trx: typeof t.app.services.db.kysely) => trx.insertInto('secrets').values({ name, value: 'x', created_at: 1 }).execute()
      const results = await Promise.allSettled([
        commits.run(insert(names[0]!)),
        commits.run(insert(names[1]!)),
        // A duplicate of the first, in the same group: a unique violation.
        commits.run(insert(names[0]!)),
        commits.run(insert(names[2]!)),
      ])
      assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'fulfilled', 'rejected', 'fulfilled'])
      const stored = await t.app.services.db.kysely.selectFrom('secrets').select('name').where('name', 'in', names).execute()
      assert.deepEqual(stored.map((r) => r.name).sort(), [...names].sort())
    })
  })
}

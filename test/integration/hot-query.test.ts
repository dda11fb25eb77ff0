import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { hotQuery } from '../../src/db/hot-query.ts'
import { openDatabase, migrate } from '../../src/db/index.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'

for (const engine of ENGINES) {
  describe(`hot queries on ${engine}`, () => {
    test('answer exactly as the built query does, on a handle, in a transaction or over committed data, and compile once per dialect', async () => {
      const storage = await createStorage(engine)
      const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
      try {
        await migrate(db)
        const rows = Array.from({ length: 5 }, (_, i) => ({ name: `hot-${i}`, value: i % 2 === 0 ? 'even' : 'odd', created_at: i }))
        await db.kysely.insertInto('secrets').values(rows).execute()
        let builds = 0
        const query = hotQuery<{ value: string; after: number; limit: number }, { name: string }>((k, arg) => {
          builds++
          return k.selectFrom('secrets').select('name').where('value', '=', arg('value')).where('created_at', '>', arg('after')).where('name', 'like', 'hot-%').orderBy('created_at').limit(arg('limit'))
        })
        for (const args of [{ value: 'even', after: -1, limit: 10 }, { value: 'odd', after: 1, limit: 10 }, { value: 'even', after: 0, limit: 1 }]) {
          const expected = await db.kysely.selectFrom('secrets').select('name').where('value', '=', args.value).where('created_at', '>', args.after).where('name', 'like', 'hot-%').orderBy('created_at').limit(args.limit).execute()
          assert.deepEqual(await query(db.kysely, args), expected)
        }
        assert.deepEqual((await query(db.kysely, { value: 'even', after: -1, limit: 10 })).map((r) => r.name), ['hot-0', 'hot-2', 'hot-4'])
        assert.equal(builds, 1)
        // Inside a transaction (another handle, the same dialect) the plan is reused and runs on the
        // transaction's connection, so it sees the transaction's own writes.
        await db.kysely.transaction().execute(async (trx) => {
          await trx.insertInto('secrets').values({ name: 'hot-9', value: 'odd', created_at: 9 }).execute()
          assert.deepEqual((await query(trx, { value: 'odd', after: 5, limit: 10 })).map((r) => r.name), ['hot-9'])
        })
        assert.equal(builds, 1)
        assert.deepEqual((await query(db.kysely, { value: 'odd', after: 5, limit: 10 })).map((r) => r.name), ['hot-9'])
        // committed: the same answer from the same plan, outside any transaction (on SQLite on the
        // reader connection), over committed rows only and without waiting for a transaction.
        assert.deepEqual(await query.committed(db, { value: 'even', after: -1, limit: 10 }), await query(db.kysely, { value: 'even', after: -1, limit: 10 }))
        await db.kysely.transaction().execute(async (trx) => {
          await trx.insertInto('secrets').values({ name: 'hot-11', value: 'odd', created_at: 11 }).execute()
          assert.deepEqual((await query.committed(db, { value: 'odd', after: 5, limit: 10 })).map((r) => r.name), ['hot-9'])
        })
        assert.deepEqual((await query.committed(db, { value: 'odd', after: 5, limit: 10 })).map((r) => r.name), ['hot-9', 'hot-11'])
        assert.equal(builds, 1)
      } finally {
        await db.close()
        await storage.drop()
      }
    })

    test('write a literal value into the SQL, one plan per distinct value, and refuse anything but a safe integer', async () => {
      const storage = await createStorage(engine)
      const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
      try {
        await migrate(db)
        await db.kysely.insertInto('secrets').values(Array.from({ length: 4 }, (_, i) => ({ name: `lit-${i}`, value: 'v', created_at: i }))).execute()
        let builds = 0
        const query = hotQuery<{ value: string; limit: number }, { name: string }>(
          (k, arg) => {
            builds++
            return k.selectFrom('secrets').select('name').where('value', '=', arg('value')).orderBy('created_at').limit(arg('limit'))
          },
          { literal: ['limit'] },
        )
        const sent: { sql: string; parameters: readonly unknown[] }[] = []
        const watched = new Proxy(db.kysely, {
          get(target, property) {
            const value = Reflect.get(target, property, target)
            if (property !== 'executeQuery') return typeof value === 'function' ? value.bind(target) : value
            return (compiled: { sql: string; parameters: readonly unknown[] }) => {
              sent.push(compiled)
              return target.executeQuery(compiled as never)
            }
          },
        })
        for (const limit of [2, 3, 2, 3, 1]) {
          assert.deepEqual((await query(watched, { value: 'v', limit })).map((r) => r.name), ['lit-0', 'lit-1', 'lit-2'].slice(0, limit))
        }
        assert.equal(builds, 3)
        assert.match(sent[0]!.sql, /limit 2$/i)
        assert.deepEqual(sent[0]!.parameters, ['v'])
        assert.match(sent[4]!.sql, /limit 1$/i)
        for (const limit of [1.5, Number.NaN, '2; drop table users' as unknown as number]) {
          await assert.rejects(query(watched, { value: 'v', limit }), TypeError)
        }
        assert.equal(sent.length, 5)
      } finally {
        await db.close()
        await storage.drop()
      }
    })
  })
}

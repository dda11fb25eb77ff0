import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import pg from 'pg'
import { isDatabaseUnavailable, openDatabase, parsePostgresUrl } from '../../src/db/index.ts'

describe("DATABASE_URL in libpq's multi-host form", () => {
  const cases = [
    {
      name: 'one host: itself, and no session requirement',
      url: 'postgres://app@127.0.0.1:5432/portcullis',
      hosts: [{ host: '127.0.0.1', port: 5432 }],
      attrs: 'any',
      urls: ['postgres://app@127.0.0.1:5432/portcullis'],
    },
    {
      name: 'two hosts, read-write: one URL per host, the other parameters kept, target_session_attrs taken out',
      url: 'postgres://app:s3cret@db1.internal:5432,db2.internal:5433/portcullis?sslmode=require&target_session_attrs=read-write&application_name=pc',
      hosts: [{ host: 'db1.internal', port: 5432 }, { host: 'db2.internal', port: 5433 }],
      attrs: 'read-write',
      urls: [
        'postgres://app:s3cret@db1.internal:5432/portcullis?sslmode=require&application_name=pc',
        'postgres://app:s3cret@db2.internal:5433/portcullis?sslmode=require&application_name=pc',
      ],
    },
    {
      name: 'a host without a port takes the default; postgresql:// as libpq spells it',
      url: 'postgresql://app@h1,h2:6432/db?target_session_attrs=read-write',
      hosts: [{ host: 'h1', port: undefined }, { host: 'h2', port: 6432 }],
      attrs: 'read-write',
      urls: ['postgresql://app@h1/db', 'postgresql://app@h2:6432/db'],
    },
    {
      name: 'IPv6 addresses in brackets',
      url: 'postgres://app@[::1]:5432,[fd00::2]/db',
      hosts: [{ host: '::1', port: 5432 }, { host: 'fd00::2', port: undefined }],
      attrs: 'any',
      urls: ['postgres://app@[::1]:5432/db', 'postgres://app@[fd00::2]/db'],
    },
    {
      name: "a password holding '@' and ',' (percent-encoded) stays with the user",
      url: 'postgres://app:p%40ss%2Cword@h1:1,h2:2/db?target_session_attrs=any',
      hosts: [{ host: 'h1', port: 1 }, { host: 'h2', port: 2 }],
      attrs: 'any',
      urls: ['postgres://app:p%40ss%2Cword@h1:1/db', 'postgres://app:p%40ss%2Cword@h2:2/db'],
    },
    {
      name: 'one host that must be the primary',
      url: 'postgres://app@db:5432/db?target_session_attrs=read-write',
      hosts: [{ host: 'db', port: 5432 }],
      attrs: 'read-write',
      urls: ['postgres://app@db:5432/db'],
    },
  ]
  for (const c of cases) {
    test(c.name, () => {
      const target = parsePostgresUrl(c.url)
      assert.deepEqual(target.hosts, c.hosts)
      assert.equal(target.targetSessionAttrs, c.attrs)
      assert.deepEqual(target.urls, c.urls)
    })
  }

  test("each host's URL reads in pg as that host, with the user, password, database and parameters of the whole", () => {
    const target = parsePostgresUrl('postgres://app:p%40ss@db1:5432,db2:5433/portcullis?application_name=pc&target_session_attrs=read-write')
    // A Client parses its connection string when it is made; it connects only when asked.
    const [first, second] = target.urls.map((url) => new pg.Client({ connectionString: url }))
    assert.deepEqual([first!.host, first!.port, second!.host, second!.port], ['db1', 5432, 'db2', 5433])
    for (const client of [first!, second!]) {
      assert.equal(client.user, 'app')
      assert.equal(client.password, 'p@ss')
      assert.equal(client.database, 'portcullis')
      assert.equal((client as unknown as { connectionParameters: { application_name: string } }).connectionParameters.application_name, 'pc')
    }
  })

  const refused = [
    { name: 'a session requirement this service does not implement', url: 'postgres://app:s3cret@h1,h2/db?target_session_attrs=read-only', message: /target_session_attrs=read-only is not supported/ },
    { name: 'an empty host in a list', url: 'postgres://app:s3cret@h1,/db', message: /host 2 of 2 is not host\[:port\]/ },
    { name: 'a port out of range', url: 'postgres://app:s3cret@h1:70000,h2/db', message: /port 70000, outside 1-65535/ },
    { name: 'not a postgres URL', url: 'mysql://app:s3cret@h1/db', message: /not a postgres:\/\/ URL/ },
  ]
  for (const c of refused) {
    test(`refused at start, never quoting the password: ${c.name}`, () => {
      assert.throws(
        () => parsePostgresUrl(c.url),
        (error: Error) => c.message.test(error.message) && !error.message.includes('s3cret'),
      )
    })
  }

  test('openDatabase takes a multi-host URL (pg connects on the first query, so no server is needed)', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'portcullis-pg-url-'))
    const db = openDatabase({ databaseUrl: 'postgres://nobody@127.0.0.1:9,127.0.0.1:10/none?target_session_attrs=read-write', dataDir })
    try {
      assert.equal(db.engine, 'postgres')
      // Both hosts refuse: one error naming each host's failure, and one that answers 503.
      const error = (await db.ping().then(() => null, (e: unknown) => e)) as Error & { code?: string }
      assert.equal(error.code, '08001')
      assert.match(error.message, /^no database host gave a read-write session: 127\.0\.0\.1:9 .*ECONNREFUSED.*; 127\.0\.0\.1:10 .*ECONNREFUSED/)
      assert.ok(isDatabaseUnavailable(error))
    } finally {
      await db.close()
      rmSync(dataDir, { recursive: true, force: true })
    }
  })

  test('a write refused by a standby (read_only_sql_transaction) means the database is unavailable, not a bug', () => {
    assert.equal(isDatabaseUnavailable(Object.assign(new Error('cannot execute INSERT in a read-only transaction'), { code: '25006' })), true)
  })
})

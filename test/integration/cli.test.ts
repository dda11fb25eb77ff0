import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { runCli, type CliIo } from '../../src/cli.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within } from '../helpers/app.ts'

function capture(): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = []
  const stderr: string[] = []
  return { stdout, stderr, out: (line) => stdout.push(line), err: (line) => stderr.push(line) }
}

/** The line every command that opens a database starts stderr with. */
function databaseLine(storage: TestStorage): string {
  return storage.databaseUrl ? `portcullis: database ${storage.databaseUrl} (PostgreSQL)` : `portcullis: database ${path.join(storage.dataDir, 'portcullis.db')} (SQLite)`
}

/**
 * Asserts a table: the header row names the columns, and every value of every row starts where its
 * column's name starts, after at least two blanks.
 */
function assertTable(lines: string[], columns: string[]): void {
  const header = [...lines[0]!.matchAll(/\S+/g)]
  assert.deepEqual(header.map((match) => match[0]), columns)
  for (const line of lines.slice(1)) {
    for (const { index } of header) {
      assert.notEqual(line[index] ?? ' ', ' ', `a value at column ${index} of ${JSON.stringify(line)}`)
      if (index > 0) assert.equal(line.slice(index - 2, index), '  ', `two blanks before column ${index} of ${JSON.stringify(line)}`)
    }
  }
}

/** The URL with a password put in (the test server trusts local connections, so it is ignored there). */
function withPassword(databaseUrl: string): string {
  const url = new URL(databaseUrl)
  url.password = 'hunter2-secret'
  return url.toString()
}

async function tableCount(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    return Number((await client.query("select count(*) from information_schema.tables where table_schema = 'public'")).rows[0].count)
  } finally {
    await client.end()
  }
}

/** The JSON a `--json` list printed: an array of objects. */
function parsedList(stdout: string[]): Record<string, unknown>[] {
  const list = JSON.parse(stdout.join('\n')) as unknown
  assert.ok(Array.isArray(list), 'a JSON array')
  for (const item of list) assert.equal(typeof item, 'object')
  return list as Record<string, unknown>[]
}

for (const engine of ENGINES) {
  describe(`portcullis CLI on ${engine}`, () => {
    test('users list|verify|disable|enable act on the same database the service uses', async () => {
      const storage = await createStorage(engine)
      const t = await startTestApp(engine, { storage })
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      try {
        const pending = uniqueEmail('pending')
        await t.post('/auth/register', { email: pending, password: PASSWORD, full_name: 'Pending' })
        const active = await registerVerifyLogin(t)

        let io = capture()
        assert.equal(await runCli(['users', 'list', '--json'], env, io), 0)
        const listed = parsedList(io.stdout)
        assert.equal(listed.find((user) => user.email === pending)?.state, 'unverified')
        assert.equal(listed.find((user) => user.email === active.email)?.state, 'active')

        io = capture()
        assert.equal(await runCli(['users', 'verify', pending.toUpperCase()], env, io), 0)
        assert.equal((await t.post('/auth/login', { email: pending, password: PASSWORD })).statusCode, 200)

        io = capture()
        assert.equal(await runCli(['users', 'disable', active.email, '--reason', 'banned'], env, io), 0)
        assert.match(io.stdout[0]!, /disabled \(banned\)/)
        // The CLI is another writer: the running service learns of it through the revocation feed.
        await within(1000, async () => (await t.get('/auth/me', active.access_token)).json().error?.code === 'ACCOUNT_DISABLED')

        io = capture()
        assert.equal(await runCli(['users', 'enable', active.email], env, io), 0)
        assert.equal(io.stdout[0], `${active.email}: active`)
        await within(1000, async () => (await t.get('/auth/me', active.access_token)).statusCode === 200)

        io = capture()
        assert.equal(await runCli(['events', 'list', '--user', active.email, '--since', '1h', '--json'], env, io), 0)
        const events = parsedList(io.stdout)
        const types = events.map((event) => `${event.type}:${event.reason ?? '-'}`)
        for (const expected of ['account.registered:-', 'email.verified:-', 'login.succeeded:-', 'account.disabled:banned', 'account.enabled:-']) {
          assert.ok(types.includes(expected), `${expected} missing from ${types.join(', ')}`)
        }
        assert.ok(events.every((event) => event.user_id === active.userId))
        io = capture()
        assert.equal(await runCli(['events', 'list', '--since', '2999-01-01T00:00:00Z', '--json'], env, io), 0)
        assert.deepEqual(parsedList(io.stdout), [])
        assert.equal(await runCli(['events', 'list', '--since', 'soon'], env, capture()), 2)
        assert.equal(await runCli(['events', 'list', '--user', 'nobody@example.com'], env, capture()), 1)
      } finally {
        await t.close()
        await storage.drop()
      }
    })

    test('keys list and rotate; failures exit 1 with one line, usage errors exit 2', async () => {
      const storage = await createStorage(engine)
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      try {
        let io = capture()
        assert.equal(await runCli(['migrate'], env, io), 0)
        assert.equal(await runCli(['keys', 'rotate'], env, io), 0)
        assert.equal(await runCli(['keys', 'rotate'], env, io), 0)
        io = capture()
        assert.equal(await runCli(['keys', 'list'], env, io), 0)
        assert.equal(io.stdout.length, 3, 'the header and two keys')
        assert.match(io.stdout[1]!, / EdDSA +verifying /)
        assert.match(io.stdout[2]!, / EdDSA +signing /)
        assert.ok(!io.stdout.join('').includes('"d"'))

        io = capture()
        assert.equal(await runCli(['users', 'disable', 'nobody@example.com'], env, io), 1)
        assert.deepEqual(io.stderr, [databaseLine(storage), 'portcullis: no user with the e-mail address nobody@example.com'])

        for (const argv of [[], ['users'], ['users', 'frobnicate'], ['users', 'disable', 'a@example.com', '--reason', 'bored'], ['users', 'verify']]) {
          io = capture()
          assert.equal(await runCli(argv, env, io), 2, argv.join(' '))
          assert.match(io.stderr[0]!, /^portcullis: /)
        }

        io = capture()
        assert.equal(await runCli(['users', 'list'], { ...env, PORT: 'nope' }, io), 1)
        assert.match(io.stderr[0]!, /PORT/)
      } finally {
        await storage.drop()
      }
    })

    test('a command other than migrate refuses a database never set up and creates nothing; migrate sets it up, named without its password', async () => {
      const storage = await createStorage(engine)
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl && withPassword(storage.databaseUrl) }
      try {
        let io = capture()
        assert.equal(await runCli(['users', 'list'], env, io), 1)
        assert.deepEqual(io.stdout, [])
        if (engine === 'sqlite') {
          const file = path.join(storage.dataDir, 'portcullis.db')
          assert.deepEqual(io.stderr, [
            `portcullis: no database at ${file} (looked in DATA_DIR ${storage.dataDir}); run this from the service's directory, set DATA_DIR (or DATABASE_URL), or run \`portcullis migrate\` to create one`,
          ])
          assert.deepEqual(readdirSync(storage.dataDir), [])
        } else {
          assert.deepEqual(io.stderr, [`portcullis: the database ${storage.databaseUrl} (PostgreSQL) has no migrations applied; check DATABASE_URL, or run \`portcullis migrate\` to set it up`])
          assert.equal(await tableCount(storage.databaseUrl!), 0)
        }

        io = capture()
        assert.equal(await runCli(['migrate'], env, io), 0)
        assert.deepEqual(io.stderr, [databaseLine(storage)])
        assert.match(io.stdout[0]!, /^applied: 0001_initial, /)
        io = capture()
        assert.equal(await runCli(['users', 'list'], env, io), 0)
        assert.deepEqual(io.stderr, [databaseLine(storage)])
        assert.deepEqual(io.stdout, ['email  state  disabled_reason  user_id  created_at'])
        assert.ok(!io.stderr.join('\n').includes('hunter2'))
      } finally {
        await storage.drop()
      }
    })

    test('every list command prints a header row over aligned columns, and with --json a JSON array of objects', async () => {
      const storage = await createStorage(engine)
      const t = await startTestApp(engine, { storage })
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      try {
        await registerVerifyLogin(t)
        await t.post('/auth/register', { email: uniqueEmail('unverified'), password: PASSWORD, full_name: 'Unverified' })
        assert.equal(await runCli(['api-keys', 'create', '--name', 'support desk', '--scopes', 'users:read'], env, capture()), 0)
        assert.equal(await runCli(['clients', 'add', '--name', 'iOS app', '--type', 'public', '--redirect-uri', 'com.example.app:/cb'], env, capture()), 0)
        const lists: [string[], string[]][] = [
          [['users', 'list'], ['email', 'state', 'disabled_reason', 'user_id', 'created_at']],
          [['events', 'list'], ['at', 'type', 'reason', 'user_id', 'actor', 'ip', 'request_id', 'user_agent']],
          [['keys', 'list'], ['kid', 'alg', 'state', 'created_at', 'retires_at']],
          [['api-keys', 'list'], ['id', 'name', 'scopes', 'state', 'created_at', 'last_used_at', 'expires_at']],
          [['clients', 'list'], ['client_id', 'name', 'type', 'first_party', 'dynamic']],
        ]
        for (const [argv, columns] of lists) {
          const table = capture()
          assert.equal(await runCli(argv, env, table), 0, argv.join(' '))
          assert.deepEqual(table.stderr, [databaseLine(storage)], argv.join(' '))
          assertTable(table.stdout, columns)
          assert.ok(table.stdout.length > 1, `${argv.join(' ')} lists something`)

          const io = capture()
          assert.equal(await runCli([...argv, '--json'], env, io), 0, argv.join(' '))
          assert.deepEqual(io.stderr, [databaseLine(storage)], 'stderr has the database, stdout only the data')
          const listed = parsedList(io.stdout)
          assert.equal(listed.length, table.stdout.length - 1, argv.join(' '))
          for (const item of listed) for (const column of columns) assert.ok(column in item, `${column} in ${argv.join(' ')} --json`)
        }
      } finally {
        await t.close()
        await storage.drop()
      }
    })

    test('events list: newest first, --limit, --type and --user (an address or an id) narrow it', async () => {
      const storage = await createStorage(engine)
      const t = await startTestApp(engine, { storage })
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      // The CLI's events on the app's clock, a second apart, so "newest" is unambiguous.
      const cli = async (argv: string[]) => {
        const io = capture()
        const status = await runCli(argv, env, io, t.clock)
        t.clock.advance(1)
        return { status, io }
      }
      const events = async (...filters: string[]) => {
        const { status, io } = await cli(['events', 'list', ...filters, '--json'])
        assert.equal(status, 0, io.stderr.join('\n'))
        return parsedList(io.stdout) as { at: string; type: string; user_id: string | null }[]
      }
      try {
        const ada = await registerVerifyLogin(t)
        t.clock.advance(1)
        const bob = await registerVerifyLogin(t)
        t.clock.advance(1)
        for (const argv of [['users', 'disable', ada.email], ['users', 'disable', bob.email], ['users', 'enable', ada.email]]) assert.equal((await cli(argv)).status, 0)

        const all = await events()
        const times = all.map((event) => Date.parse(event.at))
        assert.deepEqual(times, [...times].sort((a, b) => b - a), 'newest first')
        assert.deepEqual(all.slice(0, 3).map((event) => [event.type, event.user_id]), [
          ['account.enabled', ada.userId],
          ['account.disabled', bob.userId],
          ['account.disabled', ada.userId],
        ])
        assert.ok(all.some((event) => event.type === 'account.registered' && event.user_id === bob.userId))

        assert.deepEqual(await events('--limit', '2'), all.slice(0, 2))
        assert.deepEqual(await events('--type', 'account.disabled'), all.filter((event) => event.type === 'account.disabled'))
        assert.equal((await events('--type', 'account.disabled')).length, 2)
        const ofAda = await events('--user', ada.email)
        assert.deepEqual(ofAda, all.filter((event) => event.user_id === ada.userId))
        assert.deepEqual(new Set(ofAda.map((event) => event.type)), new Set(['account.registered', 'email.verified', 'login.succeeded', 'account.disabled', 'account.enabled']))
        assert.deepEqual(await events('--user', ada.userId), ofAda)
        assert.deepEqual(await events('--user', bob.email, '--type', 'account.disabled', '--limit', '1'), [all[1]])

        const table = (await cli(['events', 'list', '--limit', '3'])).io.stdout
        assert.equal(table.length, 4, 'the header and three events')
        assert.match(table[1]!, / account\.enabled /)

        for (const bad of [['--limit', '0'], ['--limit', '1001'], ['--limit', 'ten'], ['--limit', '2.5'], ['--user', 'ada'], ['--type']]) {
          const { status, io } = await cli(['events', 'list', ...bad])
          assert.equal(status, 2, bad.join(' '))
          assert.match(io.stderr[1]!, /^usage: portcullis events list/)
        }
        const unknown = await cli(['events', 'list', '--user', 'nobody@example.com'])
        assert.equal(unknown.status, 1)
        assert.equal(unknown.io.stderr.at(-1), 'portcullis: no user with the e-mail address nobody@example.com')
      } finally {
        await t.close()
        await storage.drop()
      }
    })
  })
}

for (const engine of ENGINES) {
  test(`users delete and api-keys create|list|revoke on ${engine}`, async () => {
    const storage = await createStorage(engine)
    const t = await startTestApp(engine, { storage })
    const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
    try {
      const user = await registerVerifyLogin(t)
      let io = capture()
      assert.equal(await runCli(['users', 'delete', user.email], env, io), 0)
      assert.match(io.stdout[0]!, /deleted/)
      await within(1000, async () => (await t.get('/auth/me', user.access_token)).json().error?.code === 'INVALID_TOKEN')
      assert.equal(await runCli(['users', 'delete', user.email], env, capture()), 1)
      assert.equal((await t.post('/auth/register', { email: user.email, password: PASSWORD, full_name: 'Again' })).statusCode, 201)

      io = capture()
      assert.equal(await runCli(['api-keys', 'create', '--name', 'support desk', '--scopes', 'users:read,audit:read', '--expires', '90d'], env, io), 0)
      const key = io.stdout[0]!
      assert.match(key, /^pcl_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/)
      assert.deepEqual(io.stderr[0], databaseLine(storage))
      assert.match(io.stderr[1]!, /only time the key is shown/)
      const id = key.split('_')[1]!
      io = capture()
      assert.equal(await runCli(['api-keys', 'list', '--json'], env, io), 0)
      const listed = parsedList(io.stdout).find((summary) => summary.id === id)!
      assert.deepEqual([listed.name, listed.scopes, listed.state], ['support desk', ['users:read', 'audit:read'], 'active'])
      assert.ok(!io.stdout.join('').includes(key.slice(key.indexOf('_', 4) + 1)), 'the secret is never shown again')
      const stored = await t.app.services.db.kysely.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow()
      assert.ok(!JSON.stringify(stored).includes(key.slice(key.indexOf('_', 4) + 1)))
      assert.equal((await t.app.inject({ method: 'GET', url: `${t.base}/admin/users`, headers: { authorization: `Bearer ${key}` } })).statusCode, 200)

      assert.equal(await runCli(['api-keys', 'revoke', id], env, capture()), 0)
      await within(1000, async () => (await t.app.inject({ method: 'GET', url: `${t.base}/admin/users`, headers: { authorization: `Bearer ${key}` } })).statusCode === 401)
      io = capture()
      assert.equal(await runCli(['api-keys', 'revoke', id], env, io), 1)
      assert.deepEqual(io.stderr, [databaseLine(storage), `portcullis: no live API key with the id ${id}`])
      for (const argv of [
        ['api-keys', 'create', '--scopes', 'users:read'],
        ['api-keys', 'create', '--name', 'x', '--scopes', 'users:delete'],
        ['api-keys', 'create', '--name', 'x', '--scopes', 'users:read', '--expires', 'soon'],
        ['api-keys', 'create', '--name', 'x', '--scopes', 'users:read', '--colour', 'blue'],
        ['api-keys', 'revoke'],
      ]) {
        io = capture()
        assert.equal(await runCli(argv, env, io), 2, argv.join(' '))
        assert.match(io.stderr[1]!, /^usage: portcullis api-keys/)
      }
    } finally {
      await t.close()
      await storage.drop()
    }
  })
}

test('--help: the overview, each group, and every command answer with their usage and exit 0', async () => {
  let io = capture()
  assert.equal(await runCli(['--help'], {}, io), 0)
  const overview = io.stdout.join('\n')
  const names = [...overview.matchAll(/^  ([a-z-]+(?: [a-z]+)?)(?= )/gm)].map((m) => m[1]!)
  for (const expected of ['serve', 'migrate', 'users list', 'users delete', 'keys rewrap', 'api-keys create', 'api-keys revoke', 'events list']) assert.ok(names.includes(expected), expected)
  for (const name of names) {
    io = capture()
    assert.equal(await runCli([...name.split(' '), '--help'], {}, io), 0, name)
    assert.match(io.stdout[0]!, new RegExp(`^usage: portcullis ${name}`))
  }
  io = capture()
  assert.equal(await runCli(['api-keys', '--help'], {}, io), 0)
  assert.equal(io.stdout.join('\n').split('\n').length, 4, 'the usage line and the three api-keys commands')
})

test('from a directory without a database, users list refuses and creates nothing; migrate there creates one', () => {
  const cwd = realpathSync(mkdtempSync(path.join(tmpdir(), 'portcullis-cwd-')))
  const dataDir = path.join(cwd, 'data')
  const file = path.join(dataDir, 'portcullis.db')
  // As a newcomer runs it: the source CLI in its own process, with no DATA_DIR or DATABASE_URL.
  const cli = (argv: string[]) =>
    spawnSync(process.execPath, ['--import', import.meta.resolve('tsx'), fileURLToPath(new URL('../../src/cli.ts', import.meta.url)), ...argv], {
      cwd,
      encoding: 'utf8',
      env: { ...process.env, DATA_DIR: undefined, DATABASE_URL: undefined, NODE_ENV: 'development' },
    })
  try {
    const refused = cli(['users', 'list'])
    assert.equal(refused.status, 1)
    assert.equal(refused.stdout, '')
    assert.equal(
      refused.stderr,
      `portcullis: no database at ${file} (looked in DATA_DIR ${dataDir}); run this from the service's directory, set DATA_DIR (or DATABASE_URL), or run \`portcullis migrate\` to create one\n`,
    )
    assert.deepEqual(readdirSync(cwd), [], 'not even the data directory')

    const migrated = cli(['migrate'])
    assert.equal(migrated.status, 0, migrated.stderr)
    assert.equal(migrated.stderr, `portcullis: database ${file} (SQLite)\n`)
    assert.ok(existsSync(file))
    const listed = cli(['users', 'list'])
    assert.equal(listed.status, 0, listed.stderr)
    assert.equal(listed.stdout, 'email  state  disabled_reason  user_id  created_at\n')
  } finally {
    rmSync(cwd, { recursive: true, force: true })
  }
})

test('the installed bin runs the CLI and sets the exit status', () => {
  const result = spawnSync(process.execPath, ['bin/portcullis.mjs', 'no-such-command'], { encoding: 'utf8' })
  assert.equal(result.status, 2)
  assert.match(result.stderr, /unknown command: no-such-command/)
})

for (const engine of ENGINES) {
  test(`webhooks add|list|deliveries|rotate-secret|remove on ${engine}, and an account change made by the CLI writes its event`, async () => {
    const storage = await createStorage(engine)
    const t = await startTestApp(engine, { storage })
    const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
    try {
      let io = capture()
      assert.equal(await runCli(['webhooks', 'add', 'http://127.0.0.1:9/hooks', '--events', 'user.disabled,user.enabled', '--description', 'CRM'], env, io), 0)
      const added = JSON.parse(io.stdout.join('\n')) as { webhook: { id: string; events: string[] }; secret: string }
      assert.match(added.secret, /^whsec_/)
      assert.deepEqual(added.webhook.events, ['user.disabled', 'user.enabled'])
      assert.match(io.stderr.at(-1)!, /only time its secret is shown/)

      io = capture()
      assert.equal(await runCli(['webhooks', 'list'], env, io), 0)
      assertTable(io.stdout, ['id', 'url', 'events', 'enabled', 'disabled_reason'])
      assert.ok(!io.stdout.join('').includes(added.secret), 'the secret is never listed')

      // A disable through the CLI writes user.disabled for the endpoint, as the API would.
      const user = await registerVerifyLogin(t)
      assert.equal(await runCli(['users', 'disable', user.email], env, capture()), 0)
      io = capture()
      assert.equal(await runCli(['webhooks', 'deliveries', added.webhook.id, '--json'], env, io), 0)
      assert.deepEqual(parsedList(io.stdout).map((delivery) => delivery.type), ['user.disabled'])

      io = capture()
      assert.equal(await runCli(['webhooks', 'rotate-secret', added.webhook.id], env, io), 0)
      const rotated = JSON.parse(io.stdout.join('\n')) as { secret: string }
      assert.notEqual(rotated.secret, added.secret)
      io = capture()
      assert.equal(await runCli(['webhooks', 'remove', added.webhook.id], env, io), 0)
      assert.equal(await runCli(['webhooks', 'remove', added.webhook.id], env, capture()), 1)

      io = capture()
      assert.equal(await runCli(['webhooks', 'add', 'ftp://example.com', '--events', 'user.nothing'], env, io), 1)
      assert.match(io.stderr.at(-1)!, /url .*; events must be among/)
      for (const argv of [['webhooks', 'add', 'https://example.com/h'], ['webhooks', 'deliveries', 'x', '--limit', '0']]) {
        io = capture()
        assert.equal(await runCli(argv, env, io), 2, argv.join(' '))
        assert.match(io.stderr.join('\n'), /usage: portcullis webhooks/)
      }
    } finally {
      await t.close()
      await storage.drop()
    }
  })
}

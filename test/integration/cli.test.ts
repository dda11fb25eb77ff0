import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { describe, test } from 'node:test'
import { runCli, type CliIo } from '../../src/cli.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within } from '../helpers/app.ts'

function capture(): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = []
  const stderr: string[] = []
  return { stdout, stderr, out: (line) => stdout.push(line), err: (line) => stderr.push(line) }
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
        assert.equal(await runCli(['users', 'list'], env, io), 0)
        const listed = io.stdout.join('\n')
        assert.match(listed, new RegExp(`${pending}\\tunverified`))
        assert.match(listed, new RegExp(`${active.email}\\tactive`))

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
        assert.equal(await runCli(['events', 'list', '--user', active.email, '--since', '1h'], env, io), 0)
        const types = io.stdout.map((line) => line.split('\t').slice(1, 3).join(':'))
        for (const expected of ['account.registered:-', 'email.verified:-', 'login.succeeded:-', 'account.disabled:banned', 'account.enabled:-']) {
          assert.ok(types.includes(expected), `${expected} missing from ${types.join(', ')}`)
        }
        assert.ok(io.stdout.every((line) => line.split('\t')[3] === active.userId))
        io = capture()
        assert.equal(await runCli(['events', 'list', '--since', '2999-01-01T00:00:00Z'], env, io), 0)
        assert.deepEqual(io.stdout, [])
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
        assert.equal(io.stdout.length, 2)
        assert.match(io.stdout[0]!, /\tEdDSA\tverifying\t/)
        assert.match(io.stdout[1]!, /\tEdDSA\tsigning\t/)
        assert.ok(!io.stdout.join('').includes('"d"'))

        io = capture()
        assert.equal(await runCli(['users', 'disable', 'nobody@example.com'], env, io), 1)
        assert.deepEqual(io.stderr, ['portcullis: no user with the e-mail address nobody@example.com'])

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
      assert.match(io.stderr[0]!, /only time the key is shown/)
      const id = key.split('_')[1]!
      io = capture()
      assert.equal(await runCli(['api-keys', 'list'], env, io), 0)
      const row = io.stdout.find((line) => line.startsWith(id))!.split('\t')
      assert.deepEqual([row[1], row[2], row[6]], ['support desk', 'users:read,audit:read', 'active'])
      assert.ok(!io.stdout.join('').includes(key.slice(key.indexOf('_', 4) + 1)), 'the secret is never shown again')
      const stored = await t.app.services.db.kysely.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow()
      assert.ok(!JSON.stringify(stored).includes(key.slice(key.indexOf('_', 4) + 1)))
      assert.equal((await t.app.inject({ method: 'GET', url: `${t.base}/admin/users`, headers: { authorization: `Bearer ${key}` } })).statusCode, 200)

      assert.equal(await runCli(['api-keys', 'revoke', id], env, capture()), 0)
      await within(1000, async () => (await t.app.inject({ method: 'GET', url: `${t.base}/admin/users`, headers: { authorization: `Bearer ${key}` } })).statusCode === 401)
      io = capture()
      assert.equal(await runCli(['api-keys', 'revoke', id], env, io), 1)
      assert.match(io.stderr[0]!, /no live API key/)
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

test('the installed bin runs the CLI and sets the exit status', () => {
  const result = spawnSync(process.execPath, ['bin/portcullis.mjs', 'no-such-command'], { encoding: 'utf8' })
  assert.equal(result.status, 2)
  assert.match(result.stderr, /unknown command: no-such-command/)
})

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import bcrypt from 'bcryptjs'
import { argon2i, argon2id } from '@noble/hashes/argon2.js'
import { pbkdf2 } from '@noble/hashes/pbkdf2.js'
import { scrypt } from '@noble/hashes/scrypt.js'
import { sha256, sha512 } from '@noble/hashes/sha2.js'
import { runCli } from '../../src/cli.ts'
import { ENGINES } from '../helpers/db.ts'
import { startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { oathtool } from '../helpers/totp.ts'
import { LogCapture } from '../helpers/logs.ts'

/**
 * Moving in (docs/migrating.md): accounts imported through the admin API and the CLI sign in with
 * the passwords they had, whatever hash their old system kept, and the first sign-in replaces it
 * with Portcullis's argon2id. Every hash here is made by an implementation other than the
 * service's (bcryptjs, @noble/hashes, Firebase's published vector). The converters of other
 * systems' exports: test/integration/import-recipes.test.ts.
 */

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64').replace(/=+$/, '')
const salt = () => randomBytes(16)

/** The hashes another system would hand over, of `password`, each in its own format. */
function foreignHashes(password: string): Record<string, string> {
  const bcryptHash = bcrypt.hashSync(password, 5)
  const s1 = salt()
  const s2 = salt()
  const s3 = salt()
  const s4 = salt()
  return {
    'bcrypt $2b$': bcryptHash,
    'bcrypt $2a$': bcryptHash.replace(/^\$2b\$/, '$2a$'),
    'bcrypt $2y$': bcryptHash.replace(/^\$2b\$/, '$2y$'),
    'argon2id PHC': `$argon2id$v=19$m=1024,t=2,p=1$${b64(s1)}$${b64(argon2id(password, s1, { m: 1024, t: 2, p: 1, dkLen: 32 }))}`,
    'argon2i PHC': `$argon2i$v=19$m=1024,t=2,p=1$${b64(s2)}$${b64(argon2i(password, s2, { m: 1024, t: 2, p: 1, dkLen: 32 }))}`,
    'scrypt PHC': `$scrypt$ln=12,r=8,p=1$${b64(s3)}$${b64(scrypt(password, s3, { N: 2 ** 12, r: 8, p: 1, dkLen: 32 }))}`,
    'PBKDF2 Django': `pbkdf2_sha256$20000$plainsalt1234$${Buffer.from(pbkdf2(sha256, password, 'plainsalt1234', { c: 20000, dkLen: 32 })).toString('base64')}`,
    'PBKDF2 PHC sha512': `$pbkdf2-sha512$i=20000,l=64$${b64(s4)}$${b64(pbkdf2(sha512, password, s4, { c: 20000, dkLen: 64 }))}`,
  }
}

/** Firebase's published example (github.com/firebase/scrypt): the project's parameters and one user's salt and hash. */
const FIREBASE_ENV = {
  FIREBASE_HASH_KEY: 'jxspr8Ki0RYycVU8zykbdLGjFQ3McFUH0uiiTvC8pVMXAn210wjLNmdZJzxUECKbm0QsEmYUSDzZvpjeJ9WmXA==',
  FIREBASE_SALT_SEPARATOR: 'Bw==',
  FIREBASE_ROUNDS: '8',
  FIREBASE_MEM_COST: '14',
}
const FIREBASE_USER = { password: 'user1password', hash: { algorithm: 'firebase-scrypt', salt: '42xEC+ixf3L2lw==', hash: 'lSrfV15cpx95/sZS2W9c9Kp6i/LVgQNDNC/qzrCnh1SAyZvqmZqAjTdn3aoItz+VHjoZilo78198JAdRuid5lQ==' } }

const LEGACY_SECRET = 'legacy-shared-secret-0123456789'

/** The old system lazy migration asks: a loopback server that knows one password per address. */
class OldSystem {
  readonly passwords = new Map<string, string>()
  calls: { email: string; authorization: string | undefined }[] = []
  /** What it answers besides yes and no: a status, or 'hang' (never answers). */
  failure: number | 'hang' | null = null
  private server!: Server

  async start(): Promise<string> {
    this.server = createServer((request, response) => {
      let body = ''
      request.on('data', (chunk) => (body += chunk))
      request.on('end', () => {
        const { email, password } = JSON.parse(body) as { email: string; password: string }
        this.calls.push({ email, authorization: request.headers.authorization })
        if (this.failure === 'hang') return
        if (this.failure !== null) return void response.writeHead(this.failure).end()
        const right = request.headers.authorization === `Bearer ${LEGACY_SECRET}` && this.passwords.get(email) === password
        response.writeHead(right ? 200 : 401, { 'content-type': 'application/json' }).end('{}')
      })
    })
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/verify`
  }

  close(): Promise<void> {
    this.server.closeAllConnections()
    return new Promise((resolve) => this.server.close(() => resolve()))
  }
}

for (const engine of ENGINES) {
  describe(`moving in: importing accounts on ${engine}`, () => {
    let t: TestApp
    let key: string
    const old = new OldSystem()
    const logs = new LogCapture()
    before(async () => {
      const url = await old.start()
      t = await startTestApp(engine, { env: { ...FIREBASE_ENV, LEGACY_VERIFY_URL: url, LEGACY_VERIFY_SECRET: LEGACY_SECRET, LOG_LEVEL: 'info' }, overrides: { logStream: logs } })
      key = (await t.app.services.apiKeys.create({ name: 'import', scopes: ['users:read', 'users:write', 'audit:read'], expiresAt: null })).key
    })
    after(async () => {
      await t.close()
      await old.close()
    })

    const importUsers = (users: unknown[], extra: Record<string, unknown> = {}) => t.call('POST', '/admin/users/import', key, { users, ...extra })
    const login = (email: string, password: string) => t.post('/auth/login', { email, password })
    const storedHash = async (email: string) => (await t.app.services.db.kysely.selectFrom('users').select('password_hash').where('email', '=', email).executeTakeFirstOrThrow()).password_hash
    const eventsOf = async (userId: string) => (await t.call('GET', `/admin/events?user_id=${userId}&limit=100`, key)).json().data.events as { type: string; reason: string | null }[]

    test('each accepted format signs in with the password it was made from; the first sign-in replaces the hash with argon2id (audited) and a wrong password leaves it', async () => {
      const password = 'the old passphrase of mine'
      const hashes = { ...foreignHashes(password) }
      const lines = Object.entries(hashes).map(([format], i) => ({ email: uniqueEmail(`fmt${i}`), email_verified: true, full_name: format, password_hash: hashes[format] }))
      const firebase = { email: uniqueEmail('firebase'), email_verified: true, password_hash: FIREBASE_USER.hash }
      const imported = await importUsers([...lines, firebase])
      assert.equal(imported.statusCode, 200, imported.body)
      assert.deepEqual(imported.json().data, { imported: lines.length + 1, skipped: [] })

      for (const line of [...lines, { ...firebase, password_hash: 'firebase', full_name: 'Firebase scrypt' }]) {
        const original = line.email === firebase.email ? FIREBASE_USER.password : password
        const before = await storedHash(line.email)
        assert.ok(!before.startsWith('$argon2id$v=19$m=256'), `${line.full_name}: kept as imported until a sign-in`)
        const wrong = await login(line.email, `${original}!`)
        assert.equal(wrong.statusCode, 401, `${line.full_name}: ${wrong.body}`)
        assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS')
        assert.equal(await storedHash(line.email), before, `${line.full_name}: a wrong password changes nothing`)

        const first = await login(line.email, original)
        assert.equal(first.statusCode, 200, `${line.full_name}: ${first.body}`)
        const after = await storedHash(line.email)
        assert.match(after, /^\$argon2id\$/, `${line.full_name}: rehashed with argon2id`)
        assert.notEqual(after, before, `${line.full_name}: the imported hash is gone`)
        const userId = (await t.call('GET', '/auth/me', first.json().data.access_token)).json().data.user_id as string
        const rehashed = (await eventsOf(userId)).filter((event) => event.type === 'password.rehashed')
        assert.equal(rehashed.length, 1, `${line.full_name}: one password.rehashed event`)
        assert.equal((await login(line.email, original)).statusCode, 200, `${line.full_name}: signs in again with the new hash`)
        assert.equal(await storedHash(line.email), after, `${line.full_name}: not rehashed twice`)
      }
    })

    test('lines that cannot be imported are listed by index and reason, never with their hash, and the rest go on; a second import of the same lines skips each as email_exists', async () => {
      const good = uniqueEmail('good')
      const taken = uniqueEmail('taken')
      const lines = [
        { email: good, password_hash: bcrypt.hashSync('good password 1', 4) },
        { email: uniqueEmail('md5'), password_hash: '5f4dcc3b5aa765d61d8327deb882cf99' },
        { email: uniqueEmail('costly'), password_hash: `$2b$15$${'a'.repeat(53)}` },
        { email: uniqueEmail('scrypt-costly'), password_hash: `$scrypt$ln=18,r=8,p=1$${b64(salt())}$${b64(salt())}${b64(salt())}` },
        { email: uniqueEmail('pbkdf2-costly'), password_hash: `pbkdf2_sha256$2000000$abcdefghijkl$${b64(salt())}${b64(salt())}` },
        { email: 'not an address', password_hash: bcrypt.hashSync('x', 4) },
        { email: uniqueEmail('role'), roles: ['no-such-role'] },
        { email: uniqueEmail('idp'), identities: [{ provider: 'nowhere', subject: '1' }] },
        { email: taken },
        { email: ` ${taken.toUpperCase()} ` },
      ]
      const first = await importUsers(lines)
      assert.equal(first.statusCode, 200, first.body)
      const { data } = first.json()
      assert.equal(data.imported, 2)
      assert.deepEqual(data.skipped.map((s: { index: number; reason: string }) => [s.index, s.reason]), [
        [1, 'weak_hash'], [2, 'hash_too_costly'], [3, 'hash_too_costly'], [4, 'hash_too_costly'], [5, 'invalid'], [6, 'unknown_role'], [7, 'unknown_provider'], [9, 'email_exists'],
      ])
      assert.equal(data.skipped[0].email, lines[1]!.email)
      for (const line of lines) if (typeof line.password_hash === 'string') assert.ok(!first.body.includes(line.password_hash), 'no hash in the answer')

      const logged = logs.lines.join('\n')
      assert.ok(logged.includes('/admin/users/import'), 'the log is read')
      for (const line of lines) if (typeof line.password_hash === 'string') assert.ok(!logged.includes(line.password_hash), 'no hash in the log')

      const again = await importUsers(lines)
      assert.equal(again.json().data.imported, 0, 'idempotent')
      assert.deepEqual(again.json().data.skipped.filter((s: { reason: string }) => s.reason === 'email_exists').map((s: { index: number }) => s.index), [0, 8, 9])
    })

    test('dry_run checks every line and what exists, and writes nothing', async () => {
      const email = uniqueEmail('dry')
      const response = await importUsers([{ email, password_hash: bcrypt.hashSync('whatever you like', 4) }, { email: uniqueEmail('dry-weak'), password_hash: 'abc' }], { dry_run: true })
      assert.equal(response.statusCode, 200, response.body)
      assert.deepEqual(response.json().data.imported, 1)
      assert.deepEqual(response.json().data.skipped.map((s: { reason: string }) => s.reason), ['weak_hash'])
      assert.equal(await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', email).executeTakeFirst(), undefined)
    })

    test('more than 1000 lines or a key without users:write are refused', async () => {
      const many = Array.from({ length: 1001 }, (_, i) => ({ email: `many${i}@example.com` }))
      const tooMany = await importUsers(many)
      assert.equal(tooMany.statusCode, 400)
      assert.equal(tooMany.json().error.code, 'VALIDATION_ERROR')
      const reader = (await t.app.services.apiKeys.create({ name: 'reader', scopes: ['users:read'], expiresAt: null })).key
      const refused = await t.call('POST', '/admin/users/import', reader, { users: [{ email: uniqueEmail('x') }] })
      assert.equal(refused.statusCode, 403)
      assert.equal(refused.json().error.code, 'INSUFFICIENT_SCOPE')
    })

    test('ids, roles, app_metadata and a TOTP secret come along: the second factor is asked for, and the tokens carry the roles', async () => {
      const email = uniqueEmail('factor')
      const userId = crypto.randomUUID()
      const secret = 'JBSWY3DPEHPK3PXPJBSWY3DP'
      const response = await importUsers([{
        email, user_id: userId, email_verified: true, created_at: '2021-03-04T05:06:07.000Z',
        password_hash: bcrypt.hashSync('second factor person', 4), roles: ['viewer'], app_metadata: { plan: 'pro' }, totp_secret: secret.toLowerCase(),
      }])
      assert.deepEqual(response.json().data, { imported: 1, skipped: [] }, response.body)
      const first = await login(email, 'second factor person')
      assert.equal(first.statusCode, 403, first.body)
      assert.equal(first.json().error.code, 'MFA_REQUIRED')
      const verified = await t.post('/auth/mfa/verify', { mfa_token: first.json().error.mfa.mfa_token, method: 'totp', code: oathtool(secret, t.clock.now()) })
      assert.equal(verified.statusCode, 200, verified.body)
      assert.equal((await t.call('GET', '/auth/me', verified.json().data.access_token)).json().data.user_id, userId, 'the id is kept')
      const claims = JSON.parse(Buffer.from((verified.json().data.access_token as string).split('.')[1]!, 'base64url').toString()) as Record<string, unknown>
      assert.deepEqual(claims.roles, ['viewer'])
      assert.deepEqual(claims.app_metadata, { plan: 'pro' })
      const view = (await t.call('GET', `/admin/users/${userId}`, key)).json().data.user
      assert.equal(view.created_at, '2021-03-04T05:06:07.000Z')
      const stored = await t.app.services.db.kysely.selectFrom('mfa_factors').select(['secret', 'confirmed_at']).where('user_id', '=', userId).executeTakeFirstOrThrow()
      assert.ok(stored.confirmed_at !== null, 'a confirmed factor')
      assert.ok(!stored.secret!.toUpperCase().includes(secret), 'the secret is sealed')
    })

    test('user.created webhook events are written only when the import asks for them', async () => {
      await t.app.services.webhooks.create({ url: 'http://127.0.0.1:9/hooks', events: ['user.created'] })
      const deliveriesFor = async (email: string) => {
        const user = await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', email).executeTakeFirstOrThrow()
        return (await t.app.services.db.kysely.selectFrom('webhook_deliveries').select('type').where('user_id', '=', user.id).execute()).map((row) => row.type)
      }
      const quiet = uniqueEmail('quiet')
      const loud = uniqueEmail('loud')
      await importUsers([{ email: quiet }])
      await importUsers([{ email: loud }], { events: true })
      assert.deepEqual(await deliveriesFor(quiet), [])
      assert.deepEqual(await deliveriesFor(loud), ['user.created'])
    })

    test('lazy migration: only a legacy account asks the old system, with the secret; a yes signs in and stores argon2id, after which it never asks again; a no is INVALID_CREDENTIALS', async () => {
      const email = uniqueEmail('legacy')
      old.passwords.set(email, 'what the old system knew')
      old.calls = []
      assert.deepEqual((await importUsers([{ email, email_verified: true, password: 'legacy' }])).json().data, { imported: 1, skipped: [] })
      const native = uniqueEmail('not-legacy')
      await importUsers([{ email: native, email_verified: true, password_hash: bcrypt.hashSync('mine alone here', 4) }])
      assert.equal((await login(native, 'wrong password here')).statusCode, 401)
      assert.equal(old.calls.length, 0, 'an account with a hash never causes a call')

      const wrong = await login(email, 'not what it knew')
      assert.equal(wrong.statusCode, 401)
      assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS')
      assert.deepEqual(old.calls, [{ email, authorization: `Bearer ${LEGACY_SECRET}` }])
      const right = await login(email, 'what the old system knew')
      assert.equal(right.statusCode, 200, right.body)
      assert.match(await storedHash(email), /^\$argon2id\$/)
      assert.equal(old.calls.length, 2)
      old.passwords.delete(email)
      assert.equal((await login(email, 'what the old system knew')).statusCode, 200, 'its own hash now')
      assert.equal(old.calls.length, 2, 'never asked again')
    })

    test('lazy migration: the old system down or failing is 503 LEGACY_UNAVAILABLE for that account only, and does not count against it', async () => {
      const email = uniqueEmail('legacy-down')
      old.passwords.set(email, 'still the old one')
      await importUsers([{ email, email_verified: true, password: 'legacy' }])
      const other = uniqueEmail('unaffected')
      await importUsers([{ email: other, email_verified: true, password_hash: bcrypt.hashSync('unaffected password', 4) }])
      old.failure = 500
      try {
        for (let i = 0; i < 12; i++) {
          const down = await login(email, 'still the old one')
          assert.equal(down.statusCode, 503, down.body)
          assert.equal(down.json().error.code, 'LEGACY_UNAVAILABLE')
        }
        assert.equal((await login(other, 'unaffected password')).statusCode, 200, 'other accounts sign in')
        // No answer at all: given up after 5 s.
        old.failure = 'hang'
        const started = Date.now()
        const silent = await login(email, 'still the old one')
        assert.equal(silent.json().error?.code, 'LEGACY_UNAVAILABLE', silent.body)
        assert.ok(Date.now() - started >= 4900, 'waited for the timeout')
      } finally {
        old.failure = null
      }
      // Thirteen unjudged attempts: none counted, so no delay stands in the way now.
      assert.equal((await login(email, 'still the old one')).statusCode, 200)
    })

    test('an imported account keeps the login order: the password first, then the account\'s state (disabled, unverified) only to its owner', async () => {
      const disabled = uniqueEmail('imported-disabled')
      const unverified = uniqueEmail('imported-unverified')
      const hash = bcrypt.hashSync('state comes second', 4)
      await importUsers([{ email: disabled, email_verified: true, disabled: true, password_hash: hash }, { email: unverified, password_hash: hash }])
      for (const email of [disabled, unverified]) {
        const wrong = await login(email, 'not the password at all')
        assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS', 'a wrong password learns nothing')
      }
      assert.equal((await login(disabled, 'state comes second')).json().error.code, 'ACCOUNT_DISABLED')
      assert.equal((await login(unverified, 'state comes second')).json().error.code, 'EMAIL_NOT_VERIFIED')
    })

    test('an imported account keeps every login rule: past ten wrong passwords it waits, even with the right one', async () => {
      const email = uniqueEmail('limited')
      await importUsers([{ email, email_verified: true, password_hash: bcrypt.hashSync('the right one here', 4) }])
      for (let i = 0; i < 10; i++) assert.equal((await login(email, `wrong ${i} password`)).statusCode, 401)
      const throttled = await login(email, 'the right one here')
      assert.equal(throttled.statusCode, 429)
      assert.equal(throttled.json().error.code, 'RATE_LIMITED')
      assert.ok(!(await storedHash(email)).startsWith('$argon2id$'), 'not judged, not rehashed')
    })

    test('the CLI imports a JSON Lines file: each line not imported by its number, exit 1 when one was refused, 0 when all are imported or already here; --dry-run writes nothing', async () => {
      const env = { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl, ...FIREBASE_ENV }
      const first = uniqueEmail('cli1')
      const second = uniqueEmail('cli2')
      const hash = bcrypt.hashSync('from the command line', 4)
      const file = path.join(t.storage.dataDir, `import-${engine}.jsonl`)
      writeFileSync(file, [JSON.stringify({ email: first, email_verified: true, password_hash: hash }), '', '{not json', JSON.stringify({ email: second, password_hash: 'md5:abc' }), JSON.stringify({ email: uniqueEmail('cli3'), email_verified: true })].join('\n'))
      const run = async (args: string[]) => {
        const out: string[] = []
        const err: string[] = []
        const status = await runCli(['users', 'import', ...args], env, { out: (line) => out.push(line), err: (line) => err.push(line) })
        return { status, out, err }
      }
      const dry = await run(['--dry-run', file])
      assert.equal(dry.status, 1, dry.out.join('\n'))
      assert.equal(await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', first).executeTakeFirst(), undefined, 'a dry run writes nothing')

      const done = await run([file])
      assert.equal(done.status, 1)
      assert.ok(done.out.some((line) => line.startsWith('line 3: invalid: not valid JSON')), done.out.join('\n'))
      assert.ok(done.out.some((line) => line.startsWith(`line 4 (${second}): weak_hash`)), done.out.join('\n'))
      assert.ok(!done.out.join('\n').includes(hash), 'no hash in the output')
      assert.match(done.out.at(-1)!, /^imported 2 of 4 lines; 0 already here, 2 refused/)
      assert.equal((await login(first, 'from the command line')).statusCode, 200)

      writeFileSync(file, JSON.stringify({ email: first, email_verified: true, password_hash: hash }))
      const again = await run([file])
      assert.equal(again.status, 0, again.out.join('\n'))
      assert.match(again.out.at(-1)!, /^imported 0 of 1 lines; 1 already here, 0 refused/)
    })
  })
}

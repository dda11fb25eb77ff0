import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { after, before, describe, test } from 'node:test'
import bcrypt from 'bcryptjs'
import { NO_PASSWORD } from '../../src/auth/passwords.ts'
import { runCli } from '../../src/cli.ts'
import { convertedLines, type Converted, type Source } from '../../src/imports/converters.ts'
import { ENGINES } from '../helpers/db.ts'
import { startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

/**
 * The recipes of docs/migrating.md: each system's own export (test/fixtures/import/, made as its
 * README says) goes through `portcullis users import --from X`, and its users sign in with the
 * passwords they had there. The hashes in the fixtures come from bcryptjs, @noble/hashes and
 * Firebase's published example, never from the service; Cognito, which exports no hashes, is asked
 * through a loopback stand-in for the old system (lazy migration).
 */

const FIXTURES = path.join(import.meta.dirname, '..', 'fixtures', 'import')
const fixture = (name: string) => path.join(FIXTURES, name)

/** Firebase's published example project (github.com/firebase/scrypt), whose parameters the fixture's hashes were made with. */
const FIREBASE_ENV = {
  FIREBASE_HASH_KEY: 'jxspr8Ki0RYycVU8zykbdLGjFQ3McFUH0uiiTvC8pVMXAn210wjLNmdZJzxUECKbm0QsEmYUSDzZvpjeJ9WmXA==',
  FIREBASE_SALT_SEPARATOR: 'Bw==',
  FIREBASE_ROUNDS: '8',
  FIREBASE_MEM_COST: '14',
}
const LEGACY_SECRET = 'recipes-legacy-secret-4f1c9e'

/** The Cognito fixture's users and the passwords Cognito knows them by (test/fixtures/import/README.md). */
const COGNITO_PASSWORDS = new Map([
  ['louis.armstrong@cognito.example.com', 'what a wonderful world'],
  ['sarah.vaughan@cognito.example.com', 'divine one 1924'],
  ['count.basie@cognito.example.com', "one o'clock jump"],
  ['dizzy.gillespie@cognito.example.com', 'salt peanuts 1942'],
  ['chet.baker@cognito.example.com', "let's get lost"],
])

/** The system being left, as lazy migration asks it: the Cognito pool's passwords behind a bearer secret. */
class OldSystem {
  calls: { email: string; authorization: string | undefined }[] = []
  private server!: Server

  async start(): Promise<string> {
    this.server = createServer((request, response) => {
      let body = ''
      request.on('data', (chunk) => (body += chunk))
      request.on('end', () => {
        const { email, password } = JSON.parse(body) as { email: string; password: string }
        this.calls.push({ email, authorization: request.headers.authorization })
        const right = request.headers.authorization === `Bearer ${LEGACY_SECRET}` && COGNITO_PASSWORDS.get(email) === password
        response.writeHead(right ? 200 : 401).end()
      })
    })
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/verify`
  }

  callsFor(email: string): number {
    return this.calls.filter((call) => call.email === email).length
  }

  close(): Promise<void> {
    this.server.closeAllConnections()
    return new Promise((resolve) => this.server.close(() => resolve()))
  }
}

async function collect(records: AsyncIterable<Converted>): Promise<Converted[]> {
  const all: Converted[] = []
  for await (const record of records) all.push(record)
  return all
}

/** A file's bytes as a stream of `size`-byte chunks: a multi-byte character or a token split anywhere. */
function chunked(file: string, size: number): Readable {
  const bytes = readFileSync(file)
  const chunks: Buffer[] = []
  for (let at = 0; at < bytes.length; at += size) chunks.push(bytes.subarray(at, at + size))
  return Readable.from(chunks)
}

/**
 * Each system's export of three users, the second without an address (a phone-only user), in that
 * system's own shape; the other two as given.
 */
function exportWithoutAddress(system: Source, first: string, third: string): string {
  const hash = bcrypt.hashSync('a password of theirs', 4)
  switch (system) {
    case 'auth0':
      return [
        { _id: { $oid: '1' }, email: first, email_verified: true, passwordHash: hash, tenant: 't', connection: 'Username-Password-Authentication' },
        { user_id: 'sms|6000000000000000000000a1', phone_number: '+15550100', phone_verified: true, connection: 'sms', created_at: '2022-01-01T00:00:00.000Z' },
        { _id: { $oid: '3' }, email: third, email_verified: true, passwordHash: hash, tenant: 't', connection: 'Username-Password-Authentication' },
      ].map((record) => JSON.stringify(record)).join('\n') + '\n'
    case 'firebase':
      return JSON.stringify({ users: [
        { localId: 'a1', email: first, emailVerified: true, createdAt: '1600000000000' },
        { localId: 'a2', phoneNumber: '+15550100', createdAt: '1600000000000', providerUserInfo: [{ providerId: 'phone', rawId: '+15550100', phoneNumber: '+15550100' }] },
        { localId: 'a3', email: third, emailVerified: true, createdAt: '1600000000000' },
      ] }, null, 2)
    case 'supabase':
      return [
        { id: crypto.randomUUID(), email: first, encrypted_password: hash, email_confirmed_at: '2023-01-01T00:00:00+00:00', created_at: '2023-01-01T00:00:00+00:00', deleted_at: null },
        { id: crypto.randomUUID(), email: null, phone: '15550100', encrypted_password: '', email_confirmed_at: null, created_at: '2023-01-01T00:00:00+00:00', deleted_at: null },
        { id: crypto.randomUUID(), email: third, encrypted_password: hash, email_confirmed_at: '2023-01-01T00:00:00+00:00', created_at: '2023-01-01T00:00:00+00:00', deleted_at: null },
      ].map((record) => JSON.stringify(record).replace(/\\/g, '\\\\')).join('\n') + '\n'
    case 'cognito': {
      const user = (attributes: Record<string, string>) => ({
        Username: attributes.sub, Attributes: Object.entries(attributes).map(([Name, Value]) => ({ Name, Value })),
        UserCreateDate: '2022-01-01T00:00:00.000000+00:00', Enabled: true, UserStatus: 'CONFIRMED',
      })
      return JSON.stringify({ Users: [
        user({ sub: crypto.randomUUID(), email: first, email_verified: 'true' }),
        user({ sub: crypto.randomUUID(), phone_number: '+15550100', phone_number_verified: 'true' }),
        user({ sub: crypto.randomUUID(), email: third, email_verified: 'true' }),
      ] }, null, 4)
    }
  }
}

const SUMMARY = /^(?:imported|dry run: would import) (\d+) of (\d+) lines; (\d+) already here, (\d+) refused \(\d+\.\d s\)$/

for (const engine of ENGINES) {
  describe(`moving in from another system's export on ${engine}`, () => {
    let t: TestApp
    const old = new OldSystem()
    const scratch = mkdtempSync(path.join(tmpdir(), 'portcullis-recipes-'))
    before(async () => {
      const url = await old.start()
      t = await startTestApp(engine, { env: { ...FIREBASE_ENV, LEGACY_VERIFY_URL: url, LEGACY_VERIFY_SECRET: LEGACY_SECRET } })
    })
    after(async () => {
      await t.close()
      await old.close()
      rmSync(scratch, { recursive: true, force: true })
    })

    /** `portcullis users import ...` on the app's database, with the project's Firebase parameters as the app has them. */
    async function importCli(...args: string[]) {
      const out: string[] = []
      const err: string[] = []
      const code = await runCli(['users', 'import', ...args], { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl, ...FIREBASE_ENV }, { out: (line) => out.push(line), err: (line) => err.push(line) })
      const summary = SUMMARY.exec(out.at(-1) ?? '')
      assert.ok(summary, `a summary last: ${out.join('\n')}\n${err.join('\n')}`)
      const [imported, lines, present, refused] = summary.slice(1).map(Number)
      return { code, out, err, reported: out.slice(0, -1), totals: { imported, lines, present, refused } }
    }
    const login = (email: string, password: string) => t.post('/auth/login', { email, password })
    /** Signs in with the password and returns what /auth/me says of the account. */
    async function signIn(email: string, password: string) {
      const response = await login(email, password)
      assert.equal(response.statusCode, 200, `${email}: ${response.body}`)
      return (await t.get('/auth/me', response.json().data.access_token)).json().data as Record<string, unknown>
    }
    /** The right password of an account that may not sign in: the answer that only the password's owner gets. */
    async function refusedAfterPassword(email: string, password: string, code: string) {
      const wrong = await login(email, `${password} but wrong`)
      assert.equal(wrong.statusCode, 401, `${email}: ${wrong.body}`)
      const right = await login(email, password)
      assert.equal(right.statusCode, 403, `${email}: ${right.body}`)
      assert.equal(right.json().error.code, code)
    }
    const storedHash = async (email: string) => (await t.app.services.db.kysely.selectFrom('users').select('password_hash').where('email', '=', email).executeTakeFirst())?.password_hash
    const noHashIn = (lines: string[]) => assert.ok(!/\$2[ab]\$|lSrfV15c|U0srVaJG|v0O6FE3D/.test(lines.join('\n')), 'no hash in the output')

    test('auth0: the password hash export (merged with the user export) signs in with the old passwords; a dry run writes nothing; a second run finds every user already here', async () => {
      const dry = await importCli('--from', 'auth0', '--dry-run', fixture('auth0.ndjson'))
      assert.equal(dry.code, 0, dry.out.join('\n'))
      assert.match(dry.out.at(-1)!, /^dry run: would import 4 of 4 lines; 0 already here, 0 refused/)
      assert.equal(await storedHash('ada.lovelace@auth0.example.com'), undefined, 'nothing written')

      const run = await importCli('--from', 'auth0', fixture('auth0.ndjson'))
      assert.equal(run.code, 0, run.out.join('\n'))
      assert.deepEqual(run.totals, { imported: 4, lines: 4, present: 0, refused: 0 })
      assert.deepEqual(run.reported, [])

      assert.match((await storedHash('ada.lovelace@auth0.example.com'))!, /^\$2b\$10\$/, 'kept as Auth0 made it until the first sign-in')
      const ada = await signIn('ada.lovelace@auth0.example.com', 'analytical engine 1843')
      assert.match((await storedHash('ada.lovelace@auth0.example.com'))!, /^\$argon2id\$/, 'rehashed at the first sign-in')
      assert.equal(ada.full_name, 'Ada Lovelace')
      assert.equal(ada.email_verified, true)
      assert.equal(ada.created_at, '2021-03-05T16:35:16.775Z')
      assert.deepEqual(ada.app_metadata, { plan: 'pro' })
      assert.notEqual(ada.user_id, '60425dc43519d90068f82973')

      const grace = await signIn('grace.hopper@auth0.example.com', 'compiler pioneer 1952')
      assert.equal(grace.full_name, 'grace.hopper', "Auth0's default name (the address) is not kept")
      await refusedAfterPassword('alan.turing@auth0.example.com', 'enigma was broken', 'EMAIL_NOT_VERIFIED')
      await refusedAfterPassword('hedy.lamarr@auth0.example.com', 'frequency hopping 1942', 'ACCOUNT_DISABLED')

      const again = await importCli('--from', 'auth0', fixture('auth0.ndjson'))
      assert.equal(again.code, 0)
      assert.deepEqual(again.totals, { imported: 0, lines: 4, present: 4, refused: 0 })
      assert.deepEqual(again.reported.map((line) => line.replace(/: an account.*/, '')), [
        'line 1 (ada.lovelace@auth0.example.com): email_exists', 'line 2 (grace.hopper@auth0.example.com): email_exists',
        'line 3 (alan.turing@auth0.example.com): email_exists', 'line 4 (hedy.lamarr@auth0.example.com): email_exists',
      ])
      noHashIn([...dry.out, ...run.out, ...again.out, ...run.err])
    })

    test('firebase: auth:export JSON signs in with the old passwords (Firebase scrypt with the project parameters); a provider-only user comes without password or link', async () => {
      const run = await importCli('--from', 'firebase', fixture('firebase.json'))
      assert.equal(run.code, 0, run.out.join('\n'))
      assert.deepEqual(run.totals, { imported: 4, lines: 4, present: 0, refused: 0 })

      const one = await signIn('user1@firebase.example.com', 'user1password')
      assert.equal(one.full_name, 'User One')
      assert.equal(one.created_at, new Date(1486676565000).toISOString())
      const emilie = await signIn('emilie.du.chatelet@firebase.example.com', 'la physique 1740')
      assert.equal(emilie.full_name, 'Émilie du Châtelet')
      assert.deepEqual(emilie.app_metadata, { plan: 'team' }, 'the custom claims')
      assert.match((await storedHash('emilie.du.chatelet@firebase.example.com'))!, /^\$argon2id\$/)
      await refusedAfterPassword('mary.jackson@firebase.example.com', 'wind tunnel 1958', 'ACCOUNT_DISABLED')

      const dorothy = await login('dorothy.vaughan@firebase.example.com', 'anything at all')
      assert.equal(dorothy.statusCode, 401, 'no password to sign in with')
      const links = await t.app.services.db.kysely.selectFrom('user_identities').select('subject').where('subject', 'in', ['109876543210987654321', '104857600000000000001']).execute()
      assert.deepEqual(links, [], 'no provider configured for them: no identity linked')

      const again = await importCli('--from', 'firebase', fixture('firebase.json'))
      assert.deepEqual([again.code, again.totals], [0, { imported: 0, lines: 4, present: 4, refused: 0 }])
      noHashIn([...run.out, ...again.out])
    })

    test('supabase: the \\copy of auth.users keeps ids, names and app_metadata, signs in with the old passwords, imports bans disabled and reports the deleted user by its line', async () => {
      const run = await importCli('--from', 'supabase', fixture('supabase.jsonl'))
      assert.equal(run.code, 1, 'a refused record')
      assert.deepEqual(run.totals, { imported: 4, lines: 5, present: 0, refused: 1 })
      assert.deepEqual(run.reported, ['line 5: invalid: deleted in Supabase (deleted_at is set): not imported'])

      const nina = await signIn('nina.simone@supabase.example.com', 'feeling good 1965')
      assert.equal(nina.user_id, 'cd35a9ba-ce40-4b3b-9b59-4328caac1d47')
      assert.equal(nina.full_name, 'Nina "High Priestess" Simone', "COPY's escapes undone")
      assert.deepEqual(nina.app_metadata, { plan: 'team' }, "without Supabase's provider keys")
      assert.equal(nina.created_at, '2023-04-01T09:29:41.654Z')
      const john = await signIn('john.coltrane@supabase.example.com', 'a love supreme 1965')
      assert.equal(john.full_name, 'John Coltrane', 'a ban that has ended leaves the account open')
      await refusedAfterPassword('billie.holiday@supabase.example.com', 'strange fruit 1939', 'ACCOUNT_DISABLED')
      await refusedAfterPassword('ella.fitzgerald@supabase.example.com', 'a tisket a tasket', 'EMAIL_NOT_VERIFIED')
      assert.equal(await storedHash('miles.davis@supabase.example.com'), undefined, 'the deleted user is not imported')

      const again = await importCli('--from', 'supabase', fixture('supabase.jsonl'))
      assert.deepEqual([again.code, again.totals], [1, { imported: 0, lines: 5, present: 4, refused: 1 }])
      noHashIn([...run.out, ...again.out])
    })

    test('cognito: list-users imports confirmed users for lazy migration; the first sign-in asks the old system until it says yes, never after; federated and unconfirmed users have no password to ask about', async () => {
      const run = await importCli('--from', 'cognito', fixture('cognito.json'))
      assert.equal(run.code, 0, run.out.join('\n'))
      assert.deepEqual(run.totals, { imported: 5, lines: 5, present: 0, refused: 0 })

      const louis = 'louis.armstrong@cognito.example.com'
      const wrong = await login(louis, 'what a wonderful world!')
      assert.equal(wrong.statusCode, 401, wrong.body)
      assert.equal(old.callsFor(louis), 1, 'the old system said no')
      const me = await signIn(louis, 'what a wonderful world')
      assert.equal(me.user_id, '4af7eb3f-9474-4acc-8252-9045aa826660', 'the sub is kept')
      assert.equal(me.full_name, 'Louis Armstrong')
      assert.equal(me.created_at, '2022-01-10T11:12:13.456Z')
      await signIn(louis, 'what a wonderful world')
      assert.equal(old.callsFor(louis), 2, 'asked until the first success, never after')
      assert.ok(old.calls.every((call) => call.authorization === `Bearer ${LEGACY_SECRET}`))

      const sarah = await signIn('sarah.vaughan@cognito.example.com', 'divine one 1924')
      assert.equal(sarah.full_name, 'Sarah Vaughan', 'given_name and family_name')
      assert.equal(sarah.user_id, '8c12d892-704d-4c81-8392-6f8b9f45e644')
      await refusedAfterPassword('count.basie@cognito.example.com', "one o'clock jump", 'ACCOUNT_DISABLED')

      // A federated user and one whose sign-up never finished: no password Cognito would check.
      for (const email of ['dizzy.gillespie@cognito.example.com', 'chet.baker@cognito.example.com']) {
        assert.equal((await login(email, COGNITO_PASSWORDS.get(email)!)).statusCode, 401, email)
        assert.equal(old.callsFor(email), 0, `${email}: never asked about`)
        assert.equal(await storedHash(email), NO_PASSWORD, `${email}: no password`)
      }

      const again = await importCli('--from', 'cognito', fixture('cognito.json'))
      assert.deepEqual([again.code, again.totals], [0, { imported: 0, lines: 5, present: 5, refused: 0 }])
    })

    test('a record without an address is reported by its place in the export, and the others are imported', async () => {
      for (const system of ['auth0', 'firebase', 'supabase', 'cognito'] as const) {
        const first = uniqueEmail(`${system}-first`)
        const third = uniqueEmail(`${system}-third`)
        const file = path.join(scratch, `${system}-export`)
        writeFileSync(file, exportWithoutAddress(system, first, third))
        const run = await importCli('--from', system, file)
        assert.equal(run.code, 1, `${system}: ${run.out.join('\n')}`)
        assert.deepEqual(run.totals, { imported: 2, lines: 3, present: 0, refused: 1 }, system)
        assert.equal(run.reported.length, 1, system)
        assert.match(run.reported[0]!, /^line 2: invalid: no email (address|attribute) \(/, system)
        for (const email of [first, third]) assert.notEqual(await storedHash(email), undefined, `${system}: ${email} imported`)
      }
    })
  })
}

describe('reading the exports', () => {
  test('Firebase and Cognito exports read the same in one piece and a byte at a time (characters and tokens split across chunks)', async () => {
    for (const [system, file] of [['firebase', 'firebase.json'], ['cognito', 'cognito.json']] as const) {
      const whole = await collect(convertedLines(system, chunked(fixture(file), 1 << 20)))
      const bytewise = await collect(convertedLines(system, chunked(fixture(file), 1)))
      assert.equal(whole.length, system === 'firebase' ? 4 : 5)
      assert.deepEqual(bytewise, whole, system)
    }
    const [, emilie] = await collect(convertedLines('firebase', chunked(fixture('firebase.json'), 7)))
    assert.equal((emilie as { line: { full_name: string } }).line.full_name, 'Émilie du Châtelet')
  })

  test('Firebase provider links come along only for the providers given, named by the first label of the providerId', async () => {
    const linked = await collect(convertedLines('firebase', chunked(fixture('firebase.json'), 4096), { providers: new Set(['google']) }))
    const identities = linked.map((record) => (record as { line: { identities?: unknown } }).line.identities)
    assert.deepEqual(identities, [undefined, [{ provider: 'google', subject: '104857600000000000001' }], [{ provider: 'google', subject: '109876543210987654321' }], undefined])
    const unlinked = await collect(convertedLines('firebase', chunked(fixture('firebase.json'), 4096), { providers: new Set(['apple']) }))
    assert.ok(unlinked.every((record) => (record as { line: { identities?: unknown } }).line.identities === undefined))
  })

  test('a cut-short export reports its last record; a file that is not the export stops with what it is not', async () => {
    const bytes = readFileSync(fixture('firebase.json'))
    const cut = await collect(convertedLines('firebase', Readable.from([bytes.subarray(0, bytes.indexOf('Dorothy'))])))
    assert.deepEqual(cut.map((record) => ('error' in record ? record.error : 'line')), ['line', 'line', 'the file ends inside this record (was the export cut short?)'])
    await assert.rejects(collect(convertedLines('cognito', Readable.from(['[{"Username": "x"}]']))), /not the JSON of `aws cognito-idp list-users`: the file is not a JSON object/)
    await assert.rejects(collect(convertedLines('firebase', Readable.from(['{"Users": []}']))), /no "users" list/)
    const notJson = await collect(convertedLines('auth0', Readable.from(['{"email": "a@example.com"}\n\n{oops\n'])))
    assert.deepEqual(notJson.map((record) => [record.number, 'error' in record ? record.error : 'line']), [[1, 'line'], [3, 'not valid JSON']])
  })
})

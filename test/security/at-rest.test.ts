import assert from 'node:assert/strict'
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { sql, type Kysely } from 'kysely'
import { runCli } from '../../src/cli.ts'
import { KeySealer } from '../../src/auth/key-encryption.ts'
import { migrate, openDatabase } from '../../src/db/index.ts'
import { up as cutCodesFromSubjects } from '../../src/db/migrations/0020_mail_subjects.ts'
import { sealMail } from '../../src/mail/outbox.ts'
import { signingKeys } from '../../src/db/repositories.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within, type TestApp } from '../helpers/app.ts'
import { MailCatcher, mailParts, mailText, signInCodeFromMail, tokenFromMail } from '../helpers/mail.ts'
import { oathtool } from '../helpers/totp.ts'
import { Writable } from 'node:stream'
import type { AddressInfo } from 'node:net'
import { SMTPServer } from 'smtp-server'
import { LogCapture } from '../helpers/logs.ts'
import { formOf, OpBrowser } from '../helpers/op-browser.ts'
import { startTestProvider } from '../helpers/oidc-provider.ts'
import { SoftAuthenticator, type CreationOptionsJSON, type RequestOptionsJSON } from '../helpers/webauthn.ts'

/** A secret a flow produced; `short` for the 6-digit code, which is looked for only standing alone. */
interface Secret {
  what: string
  value: string
  short?: boolean
}

/**
 * Whether the secret shows in the text. A long one anywhere; the 6-digit code only where it starts
 * a word and is not part of a longer number or a decimal, as it stands in a subject, a body line or
 * a JSON string: any six digits occur somewhere inside timestamps, ids and hashes. What follows it
 * may be a letter: SQLite stores a row's values back to back, so in the raw file a subject ending
 * in the code runs straight into the next column's text.
 */
function shows(text: string, secret: Secret): boolean {
  if (!secret.short) return text.includes(secret.value)
  return new RegExp(`(?<![\\w-]|\\d\\.)${secret.value}(?!\\d|\\.\\d)`).test(text)
}

/** Types whose values cannot hold text; every other column of PostgreSQL is read. */
const NOT_TEXT = ['smallint', 'integer', 'bigint', 'numeric', 'real', 'double precision', 'boolean', 'date', 'interval', 'timestamp without time zone', 'timestamp with time zone', 'time without time zone', 'time with time zone']

/**
 * Every text value of every column of every table, as `table.column` -> values, found from the
 * database's own catalogue rather than a list written here, so that a table or a column added
 * later is scanned without anyone remembering to: on PostgreSQL every column whose type can hold
 * text (read as text), on SQLite every value stored as text or bytes, whatever its column's
 * declared type says (SQLite keeps text in any column).
 */
async function textColumns(db: Kysely<any>, engine: 'sqlite' | 'postgres'): Promise<Map<string, string[]>> {
  const found = new Map<string, string[]>()
  if (engine === 'postgres') {
    const columns = (
      await sql<{ table: string; column: string }>`select c.table_name as "table", c.column_name as "column" from information_schema.columns c
        join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
        where c.table_schema = 'public' and t.table_type = 'BASE TABLE' and c.data_type not in (${sql.join(NOT_TEXT)})`.execute(db)
    ).rows
    for (const { table, column } of columns) {
      const rows = (await sql<{ value: string }>`select ${sql.ref(column)}::text as value from ${sql.table(table)} where ${sql.ref(column)} is not null`.execute(db)).rows
      found.set(`${table}.${column}`, rows.map((row) => row.value))
    }
    return found
  }
  const tables = (await sql<{ name: string }>`select name from sqlite_master where type = 'table'`.execute(db)).rows
  for (const { name: table } of tables) {
    for (const { name: column } of (await sql<{ name: string }>`select name from pragma_table_info(${table})`.execute(db)).rows) {
      const rows = (await sql<{ value: string | Buffer }>`select ${sql.ref(column)} as value from ${sql.table(table)} where typeof(${sql.ref(column)}) in ('text', 'blob')`.execute(db)).rows
      found.set(`${table}.${column}`, rows.map((row) => (typeof row.value === 'string' ? row.value : Buffer.from(row.value).toString('latin1'))))
    }
  }
  return found
}

/** The running app's text columns. */
function textColumnsOf(t: TestApp): Promise<Map<string, string[]>> {
  return textColumns(t.app.services.db.kysely, t.app.services.db.engine)
}

/** Asserts that no text value of any column shows any of the secrets. */
function assertNoSecretIn(columns: Map<string, string[]>, secrets: Secret[]): void {
  for (const [column, values] of columns) {
    for (const value of values) for (const secret of secrets) assert.ok(!shows(value, secret), `${secret.what} in the clear in ${column}`)
  }
}

/**
 * A copy of the stored data as a thief would have it: on SQLite the database file and its WAL as
 * raw bytes (free pages and old frames included), on PostgreSQL every text column of every table.
 */
async function snapshot(storage: TestStorage, t?: TestApp): Promise<string> {
  if (storage.engine === 'sqlite') {
    const file = path.join(storage.dataDir, 'portcullis.db')
    return [file, `${file}-wal`].filter((f) => existsSync(f)).map((f) => readFileSync(f).toString('latin1')).join('\n')
  }
  const join = (columns: Map<string, string[]>) => [...columns.values()].flat().join('\n')
  if (t) return join(await textColumnsOf(t))
  const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
  try {
    return join(await textColumns(db.kysely, 'postgres'))
  } finally {
    await db.close()
  }
}

const QUEUE = { pollMs: 25, retryBaseMs: 1000 }

for (const engine of ENGINES) {
  describe(`data at rest on ${engine}`, () => {
    test('copies taken while mail waits for a relay that is down, and after keys rewrap, hold no working link or sign-in code, subjects included', async () => {
      const storage = await createStorage(engine)
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      const oldKek = randomBytes(32).toString('base64')
      const newKek = randomBytes(32).toString('base64')
      const port = await freePort()
      const relay = new MailCatcher()
      const copies: { when: string; text: string }[] = []
      const email = uniqueEmail('at-rest')
      // An account that signs in with an e-mailed code: its mail waits with the others.
      const coded = uniqueEmail('at-rest-code')
      try {
        const down = await startTestApp(engine, { storage, env: { SMTP_URL: `smtp://127.0.0.1:${port}`, KEY_ENCRYPTION_KEY: oldKek }, overrides: { mailQueue: QUEUE } })
        try {
          assert.equal((await down.post('/auth/register', { email, password: PASSWORD, full_name: 'At Rest' })).statusCode, 201)
          assert.equal((await down.post('/auth/forgot-password', { email })).statusCode, 202)
          assert.equal((await down.post('/auth/register', { email: coded, password: PASSWORD, full_name: 'At Rest Code' })).statusCode, 201)
          assert.equal((await down.post('/auth/email/start', { email: coded })).statusCode, 202)
          await down.app.services.background.drain()
          const outbox = () => down.app.services.db.kysely.selectFrom('mail_outbox').select(['kind', 'subject', 'last_error']).execute()
          await within(5000, async () => (await outbox()).filter((r) => r.last_error !== null).length === 4)
          const queued = await outbox()
          assert.ok(queued.some((row) => row.kind === 'sign_in_code'), 'the sign-in mail waits too')
          for (const row of queued) assert.match(row.subject, /^enc:v1:/, `the subject of the waiting ${row.kind} mail is sealed`)
          copies.push({ when: 'while the mail was queued', text: await snapshot(storage, down) })
        } finally {
          await down.close()
        }
        if (engine === 'sqlite') copies.push({ when: 'after the queueing instance stopped', text: await snapshot(storage) })

        const quiet = { out() {}, err() {} }
        assert.equal(await runCli(['keys', 'rewrap'], { ...env, OLD_KEY_ENCRYPTION_KEY: oldKek, KEY_ENCRYPTION_KEY: newKek }, quiet), 0)
        copies.push({ when: 'after keys rewrap', text: await snapshot(storage) })

        // Only the new key opens the queued mail now: the relay comes back and both links arrive.
        await relay.start(port)
        const up = await startTestApp(engine, { storage, env: { SMTP_URL: `smtp://127.0.0.1:${port}`, KEY_ENCRYPTION_KEY: newKek }, overrides: { mailQueue: QUEUE } })
        try {
          up.clock.advance(60)
          const [first, second] = [await relay.next(email), await relay.next(email)]
          const byLink = (link: string) => tokenFromMail([first!, second!].find((mail) => mailText(mail).includes(link))!)
          const verify = byLink('/verify-email?token=')
          const reset = byLink('/reset-password?token=')
          const codedMail = [await relay.next(coded), await relay.next(coded)]
          const code = signInCodeFromMail(codedMail.find((mail) => mailText(mail).includes('/sign-in/email?token='))!)
          await within(5000, async () => (await up.app.services.db.kysely.selectFrom('mail_outbox').select('id').where('sent_at', 'is', null).execute()).length === 0)
          copies.push({ when: 'after delivery', text: await snapshot(storage, up) })

          const secrets: Secret[] = [
            { what: 'the verification token', value: verify },
            { what: 'the reset token', value: reset },
            { what: 'the e-mailed sign-in code', value: code, short: true },
          ]
          for (const copy of copies) {
            // The scan reads real data: the address is stored in the clear, so it must be found.
            assert.ok(copy.text.includes(email), `the copy ${copy.when} holds the data it should`)
            for (const secret of secrets) assert.ok(!shows(copy.text, secret), `${secret.what} in the clear in the copy ${copy.when}`)
          }
          // And all three were working credentials, not stale ones.
          assert.equal((await up.post('/auth/verify-email', { token: verify })).statusCode, 200)
          assert.equal((await up.post('/auth/reset-password', { token: reset, password: 'a brand new passphrase' })).statusCode, 200)
          assert.equal((await up.post('/auth/email/verify', { email: coded, code })).statusCode, 200)
        } finally {
          await up.close()
        }
      } finally {
        await relay.close()
        await storage.drop()
      }
    })

    test('after a full flow, no column of any table (nor, on SQLite, the raw file and WAL) holds a private key, a password, a token, an API key, a TOTP secret or a recovery code in the clear', async () => {
      const t = await startTestApp(engine)
      const secrets: Secret[] = []
      try {
        const env = { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl }
        assert.equal(await runCli(['keys', 'rotate'], env, { out() {}, err() {} }), 0)
        await t.app.services.keys.reload()

        const user = await registerVerifyLogin(t)
        secrets.push({ what: 'password', value: PASSWORD }, { what: 'access token', value: user.access_token }, { what: 'refresh token', value: user.refresh_token })
        const refreshed = (await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().data.access_token
        secrets.push({ what: 'refreshed access token', value: refreshed })
        await t.post('/watchlists', { name: 'Kept', symbols: ['AAPL'] }, user.access_token)
        await t.post('/auth/forgot-password', { email: user.email })
        const resetToken = tokenFromMail(await t.mail.next(user.email))
        const newPassword = 'another long passphrase'
        assert.equal((await t.post('/auth/reset-password', { token: resetToken, password: newPassword })).statusCode, 200)
        secrets.push({ what: 'reset token', value: resetToken }, { what: 'new password', value: newPassword })

        // A second factor: its secret, its recovery codes and a login's mfa_token.
        const factorOwner = await registerVerifyLogin(t)
        const enrolment = (await t.post('/auth/mfa/totp', undefined, factorOwner.access_token)).json().data
        const confirmed = (await t.post(`/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: oathtool(enrolment.secret, t.clock.now()) }, factorOwner.access_token)).json().data
        t.clock.advance(30)
        const mfaToken = (await t.post('/auth/login', { email: factorOwner.email, password: PASSWORD })).json().error.mfa.mfa_token as string
        assert.equal((await t.post('/auth/mfa/verify', { mfa_token: mfaToken, method: 'totp', code: oathtool(enrolment.secret, t.clock.now()) })).statusCode, 200)
        secrets.push({ what: 'TOTP secret', value: enrolment.secret }, { what: 'mfa_token', value: mfaToken })
        for (const code of confirmed.recovery_codes as string[]) secrets.push({ what: 'recovery code', value: code }, { what: 'recovery code, normalised', value: code.replace('-', '').toUpperCase() })

        const leaving = await registerVerifyLogin(t)
        assert.equal((await t.call('DELETE', '/auth/me', leaving.access_token, { password: PASSWORD })).statusCode, 200)

        const out: string[] = []
        await runCli(['api-keys', 'create', '--name', 'ops', '--scopes', 'users:read,users:write,audit:read'], env, { out: (line) => out.push(line), err() {} })
        const apiKey = out[0]!
        secrets.push({ what: 'API key', value: apiKey }, { what: 'API key secret', value: apiKey.slice(apiKey.indexOf('_', 4) + 1) })
        // An initial access token for dynamic client registration (issue 43), printed once.
        const registration: string[] = []
        assert.equal(await runCli(['clients', 'registration-token'], env, { out: (line) => registration.push(line), err() {} }), 0)
        secrets.push({ what: 'registration token', value: registration[0]! })
        const admin = (method: 'GET' | 'POST', path: string) => t.app.inject({ method, url: t.base + path, headers: { authorization: `Bearer ${apiKey}` } })
        assert.equal((await admin('POST', `/admin/users/${user.userId}/revoke-sessions`)).statusCode, 200)
        assert.equal((await admin('GET', '/admin/events')).statusCode, 200)

        // A webhook endpoint (its signing secret) and a change of address (its mailed token): the
        // change also writes a webhook payload, which must carry neither.
        const hook = await t.app.services.webhooks.create({ url: 'http://127.0.0.1:9/hooks', events: ['*'] })
        secrets.push({ what: 'webhook secret', value: hook.secret }, { what: 'webhook secret key', value: hook.secret.slice('whsec_'.length) })
        const mover = await registerVerifyLogin(t, uniqueEmail('at-rest-move'))
        const moved = uniqueEmail('at-rest-moved')
        assert.equal((await t.post('/auth/me/email', { new_email: moved, password: PASSWORD }, mover.access_token)).statusCode, 202)
        const changeToken = tokenFromMail(await t.mail.next(moved))
        assert.equal((await t.app.inject({ method: 'POST', url: '/confirm-email-change', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `token=${changeToken}` })).statusCode, 200)
        secrets.push({ what: 'address change token', value: changeToken })
        // An organisation's invitation: its mailed link token, to an address with no account yet.
        const organization = await t.post('/auth/organizations', { name: 'At rest' }, mover.access_token)
        assert.equal(organization.statusCode, 201, organization.body)
        const invitedAddress = uniqueEmail('at-rest-invited')
        // Founding it changed the owner's claims: the access token is refreshed first.
        const ownerToken = (await t.post('/auth/refresh', { refresh_token: mover.refresh_token })).json().data.access_token
        const invitation = await t.post(`/auth/organizations/${organization.json().data.organization.id}/invitations`, { email: invitedAddress, roles: ['member'] }, ownerToken)
        assert.equal(invitation.statusCode, 201, invitation.body)
        secrets.push({ what: 'invitation token', value: tokenFromMail(await t.mail.next(invitedAddress)) })
        await t.app.services.background.drain()
        await t.app.services.mailQueue.flush()

        for (const row of await signingKeys.list(t.app.services.db.kysely)) {
          const jwk = JSON.parse(t.app.services.sealer.open(row.private_jwk, `signing_key:${row.kid}`)) as { d: string }
          secrets.push({ what: `private key ${row.kid}`, value: jwk.d })
        }

        // On SQLite also the raw database file and its WAL: free pages and old frames included.
        if (engine === 'sqlite') {
          const raw = await snapshot(t.storage)
          assert.ok(raw.includes(factorOwner.email), 'the raw scan reads the data')
          for (const secret of secrets) assert.ok(!raw.includes(secret.value), `${secret.what} in the clear in the SQLite file or its WAL`)
        }
        const columns = await textColumnsOf(t)
        for (const column of ['users.email', 'api_keys.id', 'signing_keys.private_jwk', 'audit_events.type', 'mail_outbox.subject', 'mail_outbox.body_text', 'mfa_factors.secret', 'mfa_recovery_codes.code_hash', 'mfa_challenges.token_hash', 'email_changes.token_hash', 'invitations.token_hash', 'registration_tokens.token_hash', 'webhook_endpoints.secret', 'webhook_deliveries.payload']) {
          assert.ok(columns.has(column), `the scan found ${column}`)
        }
        assert.ok(columns.get('users.email')!.includes(factorOwner.email), 'the scan reads the data')
        assertNoSecretIn(columns, secrets)
        for (const [column, values] of columns) for (const value of values) assert.doesNotMatch(value, /"d"\s*:/, `a private JWK in ${column}`)
      } finally {
        await t.close()
      }
    })

    test('a provider sign-in, passkey ceremonies and an e-mailed sign-in leave no state, flow cookie, login code, link token or passkey challenge in the clear, in any column or any log line', async () => {
      const lines: string[] = []
      const log = new Writable({ write(chunk: Buffer, _encoding, done) { lines.push(chunk.toString('utf8')); done() } })
      const publicUrl = 'http://localhost:4000'
      const provider = await startTestProvider({ redirectUris: [`${publicUrl}/api/v1/auth/oidc/test/callback`] })
      const t = await startTestApp(engine, {
        env: { LOG_LEVEL: 'debug', PUBLIC_URL: publicUrl, OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: provider.issuer, OIDC_TEST_CLIENT_ID: provider.clientId, OIDC_TEST_CLIENT_SECRET: provider.clientSecret },
        overrides: { logStream: log },
      })
      const secrets: Secret[] = []
      try {
        // A provider sign-in to the end, and one whose ID token fails (its refusal is logged).
        const who = { sub: 'at-rest', email: uniqueEmail('at-rest-oidc'), email_verified: true }
        provider.addAccount(who)
        // The application's PKCE verifier for its login code: kept by the application, never by the service.
        const verifier = randomBytes(32).toString('base64url')
        const challenge = createHash('sha256').update(verifier).digest('base64url')
        secrets.push({ what: 'code verifier', value: verifier })
        const signIn = async () => {
          const start = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/test/start?redirect_to=${encodeURIComponent(`${publicUrl}/back`)}&code_challenge=${challenge}&code_challenge_method=S256` })
          const cookie = /portcullis_oidc=([^;]+)/.exec(String(start.headers['set-cookie']))![1]!
          const authorization = new URL(String(start.headers.location))
          const back = new URL(await provider.signIn(authorization.href, who.sub))
          secrets.push({ what: 'state', value: authorization.searchParams.get('state')! }, { what: 'flow cookie', value: cookie }, { what: 'provider code', value: back.searchParams.get('code')! })
          const done = await t.app.inject({ method: 'GET', url: `${back.pathname}${back.search}`, headers: { cookie: `portcullis_oidc=${cookie}` } })
          return new URL(String(done.headers.location))
        }
        const loginCode = (await signIn()).searchParams.get('code')!
        secrets.push({ what: 'login code', value: loginCode })
        const session = (await t.post('/auth/oidc/exchange', { code: loginCode, code_verifier: verifier })).json().data
        secrets.push({ what: 'access token', value: session.access_token }, { what: 'refresh token', value: session.refresh_token })
        provider.tamper({ nonce: 'not-the-nonce' })
        assert.equal((await signIn()).searchParams.get('error'), 'provider_error')
        provider.tamper(null)

        // A passkey: registration and a passwordless login, each challenge recorded.
        const device = new SoftAuthenticator()
        const creation = (await t.post('/auth/passkeys/register/options', undefined, session.access_token)).json().data.options as CreationOptionsJSON
        assert.equal((await t.post('/auth/passkeys/register', { credential: device.register(creation, { origin: publicUrl }) }, session.access_token)).statusCode, 201)
        const started = (await t.post('/auth/passkeys/login/options')).json().data as { challenge_id: string; options: RequestOptionsJSON }
        assert.equal((await t.post('/auth/passkeys/login', { challenge_id: started.challenge_id, credential: device.authenticate(started.options, { origin: publicUrl }) })).statusCode, 200)
        secrets.push({ what: 'registration challenge', value: creation.challenge }, { what: 'login challenge', value: started.options.challenge })

        // An e-mailed sign-in: its link's token, the browser cookie it is bound to, and the login code of the link.
        const mailed = await registerVerifyLogin(t, uniqueEmail('at-rest-mailed'))
        const startMailed = await t.post('/auth/email/start', { email: mailed.email, redirect_to: `${publicUrl}/back` })
        await t.app.services.background.drain()
        await t.app.services.mailQueue.flush()
        const emailCookie = /portcullis_email=([^;]+)/.exec(String(startMailed.headers['set-cookie']))![1]!
        const signInMail = await t.mail.next(mailed.email)
        const mailedText = mailText(signInMail)
        const emailCode = signInCodeFromMail(signInMail)
        const linkToken = /token=([A-Za-z0-9_-]+)/.exec(mailedText)![1]!
        // The code is looked for in every text column too (standing alone: any six digits occur inside timestamps and ids).
        secrets.push({ what: 'e-mailed link token', value: linkToken }, { what: 'e-mail browser cookie', value: emailCookie }, { what: 'e-mailed sign-in code', value: emailCode, short: true })
        const pressed = await t.app.inject({ method: 'POST', url: '/sign-in/email', headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin', cookie: `portcullis_email=${emailCookie}` }, payload: `token=${linkToken}` })
        secrets.push({ what: 'e-mailed login code', value: new URL(String(pressed.headers.location)).searchParams.get('code')! })
        await t.app.services.background.drain()

        if (engine === 'sqlite') {
          const raw = await snapshot(t.storage)
          assert.ok(raw.includes(who.email), 'the raw scan reads the data')
          for (const secret of secrets) assert.ok(!raw.includes(secret.value), `${secret.what} in the clear in the SQLite file or its WAL`)
        }
        const columns = await textColumnsOf(t)
        for (const column of ['oidc_flows.state_hash', 'login_codes.code_hash', 'user_identities.subject', 'webauthn_challenges.challenge_hash', 'email_sign_ins.code_sealed', 'mail_outbox.subject']) assert.ok(columns.has(column), `the scan found ${column}`)
        // The subjects are read (sealed, kept with the record of the sent mail), and one of them was the sign-in mail's.
        const subjects = columns.get('mail_outbox.subject')!
        assert.ok(subjects.length > 0 && subjects.every((subject) => subject.startsWith('enc:v1:')), 'every subject is sealed')
        const subject = /^Subject: (.*)\r?$/m.exec(signInMail.raw)![1]!
        assert.match(subject, /sign-in code/)
        assert.ok(!shows(subject, { what: 'code', value: emailCode, short: true }), `the code in the subject: ${subject}`)
        assertNoSecretIn(columns, secrets)
        const logged = lines.join('')
        assert.match(logged, /identity provider sign-in refused/, 'the log was captured, the refusal included')
        for (const secret of secrets) assert.ok(!shows(logged, secret), `${secret.what} in a log line`)
      } finally {
        await t.close()
        await provider.close()
      }
    })

    test("an operator's console sign-in through the provider leaves neither the console's cookie nor the provider's cookies, code or TOTP code in the clear, in any column or any log line", async () => {
      const lines: string[] = []
      const log = new Writable({ write(chunk: Buffer, _encoding, done) { lines.push(chunk.toString('utf8')); done() } })
      const port = await freePort()
      const origin = `http://localhost:${port}`
      const t = await startTestApp(engine, { env: { LOG_LEVEL: 'debug', PUBLIC_URL: origin }, overrides: { logStream: log } })
      try {
        await t.app.listen({ port, host: '127.0.0.1' })
        // An operator: the role and a confirmed second factor, as the console asks (docs/console.md).
        const operator = await registerVerifyLogin(t)
        const enrolment = (await t.post('/auth/mfa/totp', { name: 'Phone' }, operator.access_token)).json().data as { factor_id: string; secret: string }
        assert.equal((await t.post(`/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: oathtool(enrolment.secret, t.clock.now()) }, operator.access_token)).statusCode, 200)
        t.clock.advance(30)
        await t.app.services.roles.setUserRoles(operator.userId, ['operator'], { ip: null, userAgent: null, requestId: null, actor: 'cli' })

        const browser = new OpBrowser(origin)
        let page = await browser.go(`${origin}/console/users`)
        page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: operator.email, password: PASSWORD })
        const totp = oathtool(enrolment.secret, t.clock.now())
        page = await browser.submit(formOf(page, { actionEndsWith: '/mfa' }), { code: totp })
        assert.equal(page.status, 200, page.body.slice(0, 300))
        assert.match(page.body, /<h1>Users<\/h1>/)

        const secrets: Secret[] = [{ what: 'password', value: PASSWORD }, { what: 'TOTP secret', value: enrolment.secret }, { what: 'TOTP code', value: totp, short: true }]
        // Every cookie the sign-in set (the console's session, the provider's session and interaction cookies) and the authorization code it carried back.
        for (const answer of browser.history) {
          for (const line of answer.headers.getSetCookie()) {
            const [name, value] = line.split(';')[0]!.split('=') as [string, string]
            if (value && value.length >= 16) secrets.push({ what: `cookie ${name}`, value })
          }
          const code = answer.location ? new URL(answer.location).searchParams.get('code') : null
          if (code) secrets.push({ what: 'authorization code', value: code })
        }
        const cookieNames = secrets.map((secret) => secret.what)
        assert.ok(cookieNames.includes('cookie portcullis_console'), `the console's cookie was seen: ${cookieNames.join(', ')}`)
        assert.ok(cookieNames.includes('authorization code'), 'the code was seen')

        if (engine === 'sqlite') {
          const raw = await snapshot(t.storage)
          assert.ok(raw.includes(operator.email), 'the raw scan reads the data')
          for (const secret of secrets) assert.ok(!shows(raw, secret), `${secret.what} in the clear in the SQLite file or its WAL`)
        }
        const columns = await textColumnsOf(t)
        for (const column of ['console_sessions.id_hash', 'op_records.payload']) assert.ok(columns.get(column)?.length, `the scan read rows of ${column}`)
        assertNoSecretIn(columns, secrets)
        const logged = lines.join('')
        assert.match(logged, /"path":"\/console\/users"/, 'the log was captured, the console included')
        // The library's interaction cookies hold the interaction's uid, which is also the path of the
        // pages it serves (/oauth/interaction/{uid}, logged like any path): an identifier, useless
        // without the cookies' signatures (the .sig cookies), which stay out of the log with the rest.
        assert.ok(cookieNames.some((name) => name.endsWith('.sig')), `the signed cookies were seen: ${cookieNames.join(', ')}`)
        for (const secret of secrets.filter((secret) => !/^cookie _interaction(_resume)?$/.test(secret.what))) assert.ok(!shows(logged, secret), `${secret.what} in a log line`)
      } finally {
        await t.close()
      }
    })

    test("a relay that quotes the mail it refuses: neither the queue's log lines nor last_error hold its subject, link or code", async () => {
      // A real SMTP server that refuses each mail twice (451, then 550), quoting in its answer the
      // subject, the link and the code, as a filtering relay may.
      const seen: { subject: string; link: string; code: string }[] = []
      const relay = new SMTPServer({
        authOptional: true,
        disabledCommands: ['STARTTLS', 'AUTH'],
        logger: false,
        onData(stream, _session, callback) {
          const chunks: Buffer[] = []
          stream.on('data', (chunk: Buffer) => chunks.push(chunk))
          stream.on('end', () => {
            const raw = Buffer.concat(chunks).toString('utf8')
            const text = mailParts(raw).parts['text/plain'] ?? ''
            const quoted = { subject: /^Subject: (.*)\r?$/m.exec(raw)![1]!, link: /^(https?:\/\/\S+)$/m.exec(text)![1]!, code: /^([A-Za-z0-9_-]{6,})$/m.exec(text)![1]! }
            const before = seen.filter((mail) => mail.link === quoted.link).length
            seen.push(quoted)
            callback(Object.assign(new Error(`refused "${quoted.subject}" for ${quoted.link} (${quoted.code})`), { responseCode: before === 0 ? 451 : 550 }))
          })
        },
      })
      await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
      const log = new LogCapture()
      const t = await startTestApp(engine, {
        env: { SMTP_URL: `smtp://127.0.0.1:${(relay.server.address() as AddressInfo).port}`, LOG_LEVEL: 'info' },
        overrides: { mailQueue: QUEUE, logStream: log },
      })
      try {
        const email = uniqueEmail('at-rest-quoted')
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Quoted' })).statusCode, 201)
        assert.equal((await t.post('/auth/email/start', { email })).statusCode, 202)
        await t.app.services.background.drain()
        const rows = () => t.app.services.db.kysely.selectFrom('mail_outbox').select(['kind', 'last_error', 'failed_at']).execute()
        await within(5000, async () => (await rows()).filter((row) => row.last_error !== null).length === 2)
        t.clock.advance(1)
        await within(5000, async () => (await rows()).filter((row) => row.failed_at !== null).length === 2)
        await t.app.services.mailQueue.flush()

        assert.deepEqual((await rows()).map((row) => row.kind).sort(), ['sign_in_code', 'verification'])
        assert.equal(seen.length, 4, 'each mail was refused twice, quoted each time')
        const retried = log.messages(/^mail delivery failed; will retry$/)
        const givenUp = log.messages(/^mail given up$/)
        assert.equal(retried.length, 2)
        assert.equal(givenUp.length, 2)
        // What the relay said stays useful: its code and its words, without the mail's.
        for (const row of await rows()) assert.match(row.last_error ?? '', /550 refused "\[mail content\]" for \[mail content\] \(\[mail content\]\)/)
        const secrets: Secret[] = seen.flatMap((mail) => [
          { what: 'the subject', value: mail.subject },
          { what: 'the link', value: mail.link },
          { what: 'the code or token', value: mail.code, short: mail.code.length === 6 },
        ])
        assert.ok(seen.some((mail) => /^\d{6}$/.test(mail.code)), 'the sign-in code was among them')
        const logged = log.lines.join('\n')
        const errors = (await rows()).map((row) => row.last_error ?? '').join('\n')
        for (const secret of secrets) {
          assert.ok(!shows(logged, secret), `${secret.what} in a log line: ${secret.value}`)
          assert.ok(!shows(errors, secret), `${secret.what} in last_error: ${secret.value}`)
        }
      } finally {
        await t.close()
        await new Promise<void>((resolve) => relay.close(() => resolve()))
      }
    })

    test('mail an earlier release left (the code in a clear subject) is cleaned on upgrade and sealed at start; the export opens sealed subjects, before and after keys rewrap', async () => {
      const storage = await createStorage(engine)
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      const oldKek = randomBytes(32)
      const newKek = randomBytes(32)
      const recipient = uniqueEmail('at-rest-legacy')
      const waitingId = randomUUID()
      const recordId = randomUUID()
      try {
        const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
        try {
          await migrate(db)
          const now = Date.now()
          // As the earlier release stored them: bodies sealed, the subject in the clear with the
          // code; one mail still waiting, and the record of one sent a minute ago.
          const bodies = sealMail(new KeySealer(oldKek), waitingId, { subject: '', text: 'Or type this code where you asked to sign in:\n123456\n', html: '<p>123456</p>' })
          await db.kysely
            .insertInto('mail_outbox')
            .values([
              { ...bodies, id: waitingId, user_id: null, kind: 'sign_in_code', recipient, subject: 'Your Portcullis sign-in code: 123456', created_at: now, next_attempt_at: now, attempts: 0 },
              { id: recordId, user_id: null, kind: 'sign_in_code', recipient, subject: 'Your Portcullis sign-in code: 654321', body_text: '', body_html: '', created_at: now - 60_000, next_attempt_at: now - 60_000, attempts: 1, sent_at: now - 59_000 },
            ])
            .execute()
          // The upgrade's migration, as it runs on a database that holds them.
          await cutCodesFromSubjects(db.kysely)
          const subjects = await db.kysely.selectFrom('mail_outbox').select(['id', 'subject']).execute()
          assert.deepEqual(subjects.map((row) => row.subject), ['Your Portcullis sign-in code', 'Your Portcullis sign-in code'])
        } finally {
          await db.close()
        }

        const app = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: oldKek.toString('base64') } })
        let exporter = ''
        try {
          const stored = await app.app.services.db.kysely.selectFrom('mail_outbox').select(['id', 'subject']).where('id', '=', waitingId).executeTakeFirstOrThrow()
          assert.match(stored.subject, /^enc:v1:/, 'the waiting mail is sealed whole at start')
          const sent = await app.mail.next(recipient)
          assert.match(sent.raw, /^Subject: Your Portcullis sign-in code\r?$/m)
          assert.equal(signInCodeFromMail(sent), '123456', 'and still goes out whole')

          const user = await registerVerifyLogin(app, uniqueEmail('at-rest-export'))
          exporter = user.email
          const exported = (await app.get('/auth/me/export', user.access_token)).json().data
          assert.deepEqual(exported.mail.map((mail: { subject: string }) => mail.subject), ['Verify your e-mail address'], 'the export shows the subject in the clear')
          const atRest = await app.app.services.db.kysely.selectFrom('mail_outbox').select('subject').where('recipient', '=', user.email).executeTakeFirstOrThrow()
          assert.match(atRest.subject, /^enc:v1:/, 'while the record keeps it sealed')
        } finally {
          await app.close()
        }

        const quiet = { out() {}, err() {} }
        assert.equal(await runCli(['keys', 'rewrap'], { ...env, OLD_KEY_ENCRYPTION_KEY: oldKek.toString('base64'), KEY_ENCRYPTION_KEY: newKek.toString('base64') }, quiet), 0)
        // Only the new key now: the records of sent mail were rewrapped too, so the export still reads them.
        const after = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: newKek.toString('base64') } })
        try {
          const access = (await after.post('/auth/login', { email: exporter, password: PASSWORD })).json().data.access_token as string
          const exported = (await after.get('/auth/me/export', access)).json().data
          assert.deepEqual(exported.mail.map((mail: { subject: string }) => mail.subject), ['Verify your e-mail address'])
        } finally {
          await after.close()
        }
      } finally {
        await storage.drop()
      }
    })
  })
}

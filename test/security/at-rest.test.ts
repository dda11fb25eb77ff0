import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { sql } from 'kysely'
import { runCli } from '../../src/cli.ts'
import { signingKeys } from '../../src/db/repositories.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within, type TestApp } from '../helpers/app.ts'
import { MailCatcher, mailText, tokenFromMail } from '../helpers/mail.ts'
import { oathtool } from '../helpers/totp.ts'
import { Writable } from 'node:stream'
import { startTestProvider } from '../helpers/oidc-provider.ts'
import { SoftAuthenticator, type CreationOptionsJSON, type RequestOptionsJSON } from '../helpers/webauthn.ts'

/** Every value of every column of every table, as text, table by table. */
async function everyValue(t: TestApp): Promise<Map<string, string>> {
  const db = t.app.services.db.kysely
  const tables =
    t.app.services.db.engine === 'postgres'
      ? (await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE'`.execute(db)).rows
      : (await sql<{ name: string }>`select name from sqlite_master where type = 'table'`.execute(db)).rows
  const dump = new Map<string, string>()
  for (const { name } of tables) {
    const rows = (await sql<Record<string, unknown>>`select * from ${sql.table(name)}`.execute(db)).rows
    dump.set(name, rows.map((row) => Object.values(row).map((value) => String(value)).join('\u0000')).join('\n'))
  }
  return dump
}

/**
 * A copy of the stored data as a thief would have it: on SQLite the database file and its WAL as
 * raw bytes (free pages and old frames included), on PostgreSQL every column of every table.
 */
async function snapshot(storage: TestStorage, t?: TestApp): Promise<string> {
  if (storage.engine === 'sqlite') {
    const file = path.join(storage.dataDir, 'portcullis.db')
    return [file, `${file}-wal`].filter((f) => existsSync(f)).map((f) => readFileSync(f).toString('latin1')).join('\n')
  }
  if (t) return [...(await everyValue(t)).values()].join('\n')
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: storage.databaseUrl })
  await client.connect()
  try {
    const tables = (await client.query<{ name: string }>(`select table_name as name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE'`)).rows
    const texts: string[] = []
    for (const { name } of tables) {
      for (const row of (await client.query(`select * from "${name}"`)).rows) texts.push(Object.values(row).map(String).join('\u0000'))
    }
    return texts.join('\n')
  } finally {
    await client.end()
  }
}

const QUEUE = { pollMs: 25, retryBaseMs: 1000 }

for (const engine of ENGINES) {
  describe(`data at rest on ${engine}`, () => {
    test('copies taken while mail waits for a relay that is down, and after keys rewrap, hold no working link', async () => {
      const storage = await createStorage(engine)
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      const oldKek = randomBytes(32).toString('base64')
      const newKek = randomBytes(32).toString('base64')
      const port = await freePort()
      const relay = new MailCatcher()
      const copies: { when: string; text: string }[] = []
      const email = uniqueEmail('at-rest')
      try {
        const down = await startTestApp(engine, { storage, env: { SMTP_URL: `smtp://127.0.0.1:${port}`, KEY_ENCRYPTION_KEY: oldKek }, overrides: { mailQueue: QUEUE } })
        try {
          assert.equal((await down.post('/auth/register', { email, password: PASSWORD, full_name: 'At Rest' })).statusCode, 201)
          assert.equal((await down.post('/auth/forgot-password', { email })).statusCode, 202)
          await down.app.services.background.drain()
          const failedBoth = async () => (await down.app.services.db.kysely.selectFrom('mail_outbox').select('last_error').execute()).filter((r) => r.last_error !== null).length === 2
          await within(5000, failedBoth)
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
          copies.push({ when: 'after delivery', text: await snapshot(storage, up) })

          for (const copy of copies) {
            // The scan reads real data: the address is stored in the clear, so it must be found.
            assert.ok(copy.text.includes(email), `the copy ${copy.when} holds the data it should`)
            assert.ok(!copy.text.includes(verify), `the verification token in the clear in the copy ${copy.when}`)
            assert.ok(!copy.text.includes(reset), `the reset token in the clear in the copy ${copy.when}`)
          }
          // And both were working credentials, not stale ones.
          assert.equal((await up.post('/auth/verify-email', { token: verify })).statusCode, 200)
          assert.equal((await up.post('/auth/reset-password', { token: reset, password: 'a brand new passphrase' })).statusCode, 200)
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
      const secrets: { what: string; value: string }[] = []
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
        const dump = await everyValue(t)
        assert.ok(dump.has('users') && dump.has('api_keys') && dump.has('signing_keys') && dump.has('audit_events') && dump.has('mail_outbox') && dump.has('mfa_factors') && dump.has('mfa_recovery_codes') && dump.has('mfa_challenges') && dump.has('email_changes') && dump.has('webhook_endpoints') && dump.has('webhook_deliveries'))
        for (const [table, text] of dump) {
          for (const secret of secrets) assert.ok(!text.includes(secret.value), `${secret.what} in the clear in ${table}`)
          assert.doesNotMatch(text, /"d"\s*:/, `a private JWK in ${table}`)
        }
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
      const secrets: { what: string; value: string }[] = []
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
        const mailedText = mailText(await t.mail.next(mailed.email))
        const emailCode = /^(\d{6})$/m.exec(mailedText)![1]!
        const linkToken = /token=([A-Za-z0-9_-]+)/.exec(mailedText)![1]!
        secrets.push({ what: 'e-mailed link token', value: linkToken }, { what: 'e-mail browser cookie', value: emailCookie })
        // The 6-digit code is too short to look for everywhere (a timestamp may hold it): its own row and the mail's are checked.
        const row = await t.app.services.db.kysely.selectFrom('email_sign_ins').selectAll().where('email', '=', mailed.email).executeTakeFirstOrThrow()
        assert.ok(!Object.values(row).map(String).some((value) => value === emailCode || value.includes(`code: ${emailCode}`)), 'the code in the clear in its row')
        for (const mail of await t.app.services.db.kysely.selectFrom('mail_outbox').select(['body_text', 'body_html']).execute()) assert.ok(!mail.body_text.includes(emailCode) && !mail.body_html.includes(emailCode), 'the code in a mail at rest')
        const pressed = await t.app.inject({ method: 'POST', url: '/sign-in/email', headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin', cookie: `portcullis_email=${emailCookie}` }, payload: `token=${linkToken}` })
        secrets.push({ what: 'e-mailed login code', value: new URL(String(pressed.headers.location)).searchParams.get('code')! })
        await t.app.services.background.drain()

        if (engine === 'sqlite') {
          const raw = await snapshot(t.storage)
          assert.ok(raw.includes(who.email), 'the raw scan reads the data')
          for (const secret of secrets) assert.ok(!raw.includes(secret.value), `${secret.what} in the clear in the SQLite file or its WAL`)
        }
        const dump = await everyValue(t)
        assert.ok(dump.has('oidc_flows') && dump.has('login_codes') && dump.has('user_identities') && dump.has('webauthn_challenges') && dump.has('email_sign_ins'))
        for (const [table, text] of dump) for (const secret of secrets) assert.ok(!text.includes(secret.value), `${secret.what} in the clear in ${table}`)
        const logged = lines.join('')
        assert.match(logged, /identity provider sign-in refused/, 'the log was captured, the refusal included')
        for (const secret of secrets) assert.ok(!logged.includes(secret.value), `${secret.what} in a log line`)
      } finally {
        await t.close()
        await provider.close()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { sql } from 'kysely'
import { runCli } from '../../src/cli.ts'
import { signingKeys } from '../../src/db/repositories.ts'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { tokenFromMail } from '../helpers/mail.ts'

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

for (const engine of ENGINES) {
  describe(`data at rest on ${engine}`, () => {
    test('after a full flow, no column of any table holds a private key, a password, a token or an API key in the clear', async () => {
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

        const leaving = await registerVerifyLogin(t)
        assert.equal((await t.call('DELETE', '/auth/me', leaving.access_token, { password: PASSWORD })).statusCode, 200)

        const out: string[] = []
        await runCli(['api-keys', 'create', '--name', 'ops', '--scopes', 'users:read,users:write,audit:read'], env, { out: (line) => out.push(line), err() {} })
        const apiKey = out[0]!
        secrets.push({ what: 'API key', value: apiKey }, { what: 'API key secret', value: apiKey.slice(apiKey.indexOf('_', 4) + 1) })
        const admin = (method: 'GET' | 'POST', path: string) => t.app.inject({ method, url: t.base + path, headers: { authorization: `Bearer ${apiKey}` } })
        assert.equal((await admin('POST', `/admin/users/${user.userId}/revoke-sessions`)).statusCode, 200)
        assert.equal((await admin('GET', '/admin/events')).statusCode, 200)
        await t.app.services.background.drain()
        await t.app.services.mailQueue.flush()

        for (const row of await signingKeys.list(t.app.services.db.kysely)) {
          const jwk = JSON.parse(t.app.services.sealer.open(row.private_jwk, `signing_key:${row.kid}`)) as { d: string }
          secrets.push({ what: `private key ${row.kid}`, value: jwk.d })
        }

        const dump = await everyValue(t)
        assert.ok(dump.has('users') && dump.has('api_keys') && dump.has('signing_keys') && dump.has('audit_events') && dump.has('mail_outbox'))
        for (const [table, text] of dump) {
          for (const secret of secrets) assert.ok(!text.includes(secret.value), `${secret.what} in the clear in ${table}`)
          assert.doesNotMatch(text, /"d"\s*:/, `a private JWK in ${table}`)
        }
      } finally {
        await t.close()
      }
    })
  })
}

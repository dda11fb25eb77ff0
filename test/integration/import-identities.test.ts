import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { ENGINES } from '../helpers/db.ts'
import { startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'

// An imported account's provider identity (docs/migrating.md): "Sign in with ..." keeps working after
// the move, through a real OpenID provider (oidc-provider on loopback, test/helpers/oidc-provider.ts).
const PUBLIC_URL = 'http://localhost:4000'
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`

for (const engine of ENGINES) {
  describe(`an imported provider identity on ${engine}`, () => {
    let provider: TestProvider
    let t: TestApp
    before(async () => {
      provider = await startTestProvider({ redirectUris: [CALLBACK] })
      t = await startTestApp(engine, {
        env: { PUBLIC_URL, APP_URL: `${APP}/`, OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: provider.issuer, OIDC_TEST_CLIENT_ID: provider.clientId, OIDC_TEST_CLIENT_SECRET: provider.clientSecret },
      })
    })
    after(async () => {
      await t?.close()
      await provider?.close()
    })

    test('signing in with the provider opens the imported account by its subject, even when the provider now gives another address; the subject cannot be imported twice', async () => {
      const key = (await t.app.services.apiKeys.create({ name: 'import', scopes: ['users:write'], expiresAt: null })).key
      const userId = crypto.randomUUID()
      const subject = `imported-${randomBytes(6).toString('hex')}`
      const imported = await t.call('POST', '/admin/users/import', key, { users: [{ email: uniqueEmail('moved'), email_verified: true, user_id: userId, identities: [{ provider: 'test', subject }] }] })
      assert.deepEqual(imported.json().data, { imported: 1, skipped: [] }, imported.body)
      const twice = await t.call('POST', '/admin/users/import', key, { users: [{ email: uniqueEmail('other'), identities: [{ provider: 'test', subject }] }] })
      assert.deepEqual(twice.json().data.skipped.map((s: { reason: string }) => s.reason), ['identity_exists'])

      // The provider's account has another address than the imported one: the subject decides.
      provider.addAccount({ sub: subject, email: uniqueEmail('elsewhere'), email_verified: true, name: 'Moved Person' })
      const verifier = randomBytes(32).toString('base64url')
      const challenge = createHash('sha256').update(verifier).digest('base64url')
      const query = new URLSearchParams({ redirect_to: `${APP}/after-login`, code_challenge: challenge, code_challenge_method: 'S256' })
      const started = await t.app.inject({ method: 'GET', url: `/api/v1/auth/oidc/test/start?${query}` })
      assert.equal(started.statusCode, 302, started.body)
      const browser = /portcullis_oidc=([^;]+)/.exec(String(started.headers['set-cookie']))![1]!
      const back = new URL(await provider.signIn(String(started.headers.location), subject))
      const returned = await t.app.inject({ method: 'GET', url: `${back.pathname}${back.search}`, headers: { cookie: `portcullis_oidc=${browser}` } })
      assert.equal(returned.statusCode, 302, returned.body)
      const landing = new URL(String(returned.headers.location))
      assert.equal(landing.searchParams.get('error'), null)
      const exchanged = await t.post('/auth/oidc/exchange', { code: landing.searchParams.get('code'), code_verifier: verifier })
      assert.equal(exchanged.statusCode, 200, exchanged.body)
      const me = (await t.call('GET', '/auth/me', exchanged.json().data.access_token)).json().data
      assert.equal(me.user_id, userId, 'the imported account')
    })
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import * as client from 'openid-client'
import { runCli } from '../../src/cli.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'

/**
 * Dynamic client registration (RFC 7591; API.md, "Agents and MCP clients"; docs/provider.md):
 * off by default, `open` or `token`; public clients only, each refusal a clear OAuth error with
 * nothing stored; listed as dynamic; limited per IP; removed after 30 days unused. A registered
 * client then signs a person in with the real relying party (openid-client).
 */

const REDIRECT_URI = 'http://127.0.0.1:8976/callback'

for (const engine of ENGINES) {
  describe(`dynamic client registration on ${engine}`, () => {
    let t: TestApp
    let issuer: string
    let key: string
    before(async () => {
      const port = await freePort()
      issuer = `http://localhost:${port}`
      t = await startTestApp(engine, { env: { PUBLIC_URL: issuer, OP_REGISTRATION: 'open', RATE_LIMIT_CLIENT_REGISTRATION_PER_IP: '1000' } })
      await t.app.listen({ port, host: '127.0.0.1' })
      key = (await t.app.services.apiKeys.create({ name: 'clients', scopes: ['clients:read', 'clients:write'], expiresAt: null })).key
    })
    after(async () => {
      await t?.close()
    })

    const registerClient = (body: unknown, headers: Record<string, string> = {}) =>
      t.app.inject({ method: 'POST', url: '/oauth/register', headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify(body) })
    const clientCount = async () => (await t.app.services.db.kysely.selectFrom('op_clients').select((e) => e.fn.countAll().as('n')).executeTakeFirstOrThrow()).n

    test('discovery names the registration endpoint; a public client registers and is listed as dynamic, without a secret', async () => {
      const discovery = (await t.app.inject({ method: 'GET', url: '/.well-known/oauth-authorization-server' })).json()
      assert.equal(discovery.registration_endpoint, `${issuer}/oauth/register`)
      const response = await registerClient({ client_name: 'Agent One', redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], scope: 'openid offline_access' })
      assert.equal(response.statusCode, 201, response.body)
      const body = response.json()
      assert.equal(body.token_endpoint_auth_method, 'none')
      assert.equal(body.client_secret, undefined)
      assert.deepEqual(body.redirect_uris, [REDIRECT_URI])
      assert.equal(body.client_name, 'Agent One')
      assert.equal(response.headers['cache-control'], 'no-store')
      const listed = (await t.call('GET', `/admin/clients/${body.client_id}`, key)).json().data.client
      assert.equal(listed.dynamic, true)
      assert.equal(listed.type, 'public')
      assert.equal(listed.first_party, false)
    })

    test('each refusal is a clear OAuth error and stores nothing: a confidential method, keys, a secret, a plain-http or fragment redirect, another grant, no redirect', async () => {
      const before = await clientCount()
      const cases: [unknown, string][] = [
        [{ redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'client_secret_basic' }, 'invalid_client_metadata'],
        [{ redirect_uris: [REDIRECT_URI], token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'https://agent.example/jwks' }, 'invalid_client_metadata'],
        [{ redirect_uris: [REDIRECT_URI], client_secret: 'mine' }, 'invalid_client_metadata'],
        [{ redirect_uris: ['http://agent.example.com/cb'] }, 'invalid_redirect_uri'],
        [{ redirect_uris: ['https://agent.example.com/cb#x'] }, 'invalid_redirect_uri'],
        [{ redirect_uris: [REDIRECT_URI], grant_types: ['client_credentials'] }, 'invalid_client_metadata'],
        [{ client_name: 'No redirect' }, 'invalid_redirect_uri'],
        [['not', 'an', 'object'], 'invalid_client_metadata'],
      ]
      for (const [body, error] of cases) {
        const response = await registerClient(body)
        assert.equal(response.statusCode, 400, JSON.stringify(body))
        assert.equal(response.json().error, error, JSON.stringify(body))
        assert.ok(response.json().error_description.length > 10, 'says why')
      }
      assert.equal(await clientCount(), before)
    })

    test('a registered client signs a person in, with the consent page (it is third-party); unused for 30 days it is removed, a used one stays', async () => {
      const registered = (await registerClient({ client_name: 'Agent Two', redirect_uris: [REDIRECT_URI] })).json()
      const idle = (await registerClient({ client_name: 'Idle agent', redirect_uris: [REDIRECT_URI] })).json()
      const server = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as client.ServerMetadata
      const config = new client.Configuration(server, registered.client_id, {}, client.None())
      client.allowInsecureRequests(config)
      const user = await registerVerifyLogin(t)
      const browser = new OpBrowser(issuer)
      const verifier = client.randomPKCECodeVerifier()
      const checks = { pkceCodeVerifier: verifier, expectedState: client.randomState() }
      const url = client.buildAuthorizationUrl(config, { redirect_uri: REDIRECT_URI, scope: 'openid', code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', state: checks.expectedState })
      let page: Page = await browser.go(url.href)
      page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      assert.ok(formsOf(page).some((form) => form.action.endsWith('/consent')), 'a dynamic client is always asked for consent')
      assert.match(page.body, /Agent Two/)
      page = await browser.submit(formOf(page, { actionEndsWith: '/consent' }), {})
      const tokens = await client.authorizationCodeGrant(config, new URL(page.location!), checks)
      assert.ok(tokens.id_token)

      t.clock.advance(20 * 24 * 3600)
      // Used again on day 20 (a refresh would do; a new sign-in here).
      await t.app.services.clients.used(registered.client_id)
      t.clock.advance(11 * 24 * 3600)
      assert.ok((await t.app.services.registration.removeUnused()) >= 1)
      assert.equal((await t.call('GET', `/admin/clients/${idle.client_id}`, key)).statusCode, 404, 'the idle one is gone')
      assert.equal((await t.call('GET', `/admin/clients/${registered.client_id}`, key)).statusCode, 200, 'the used one stays')
      assert.equal((await t.call('DELETE', `/admin/clients/${registered.client_id}`, key)).statusCode, 200, 'operators remove them like any other')
    })
  })

  describe(`dynamic registration's modes on ${engine}`, () => {
    test('off by default: no endpoint in discovery, and the path registers nothing', async () => {
      const t = await startTestApp(engine)
      try {
        assert.equal((await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' })).json().registration_endpoint, undefined)
        const response = await t.app.inject({ method: 'POST', url: '/oauth/register', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ redirect_uris: [REDIRECT_URI] }) })
        assert.notEqual(response.statusCode, 201)
        assert.equal((await t.app.services.clients.list()).filter((c) => c.dynamic).length, 0)
      } finally {
        await t.close()
      }
    })

    test('token: an initial access token from the CLI registers one client; none, a wrong one or the same again is invalid_token; past the per-IP limit, 429', async () => {
      const t = await startTestApp(engine, { env: { OP_REGISTRATION: 'token', RATE_LIMIT_CLIENT_REGISTRATION_PER_IP: '4' } })
      try {
        const out: string[] = []
        assert.equal(await runCli(['clients', 'registration-token', '--expires', '1h'], { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl, OP_REGISTRATION: 'token' }, { out: (line) => out.push(line), err() {} }), 0)
        const token = out[0]!
        const register = (authorization?: string) => t.app.inject({ method: 'POST', url: '/oauth/register', headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) }, payload: JSON.stringify({ redirect_uris: [REDIRECT_URI] }) })
        const none = await register()
        assert.equal(none.statusCode, 401)
        assert.equal(none.json().error, 'invalid_token')
        assert.equal((await register('Bearer pcr_wrong')).json().error, 'invalid_token')
        assert.equal((await register(`Bearer ${token}`)).statusCode, 201)
        assert.equal((await register(`Bearer ${token}`)).json().error, 'invalid_token', 'one registration a token')
        const limited = await register(`Bearer ${token}`)
        assert.equal(limited.statusCode, 429)
        assert.ok(limited.headers['retry-after'])
        assert.equal((await t.app.services.clients.list()).filter((c) => c.dynamic).length, 1)
      } finally {
        await t.close()
      }
    })
  })
}

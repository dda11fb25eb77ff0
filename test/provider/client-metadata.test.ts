import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import * as client from 'openid-client'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { DocumentHost } from '../helpers/document-host.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'

/**
 * Client ID metadata documents in the provider (API.md, "Agents and MCP clients"; the fetch's own
 * rules: test/unit/client-metadata.test.ts): a client_id that is an https URL is its document's
 * client: fetched once and shared through the database, third-party (the consent page names it,
 * where it sends the person back and, for a program on this computer, a warning), public with PKCE;
 * a document that breaks a rule is invalid_client with the reason, on a page, never a redirect.
 * The document is served over real https (test/helpers/document-host.ts); the relying party is
 * openid-client.
 */

const CALLBACK = 'http://127.0.0.1:33418/callback'

for (const engine of ENGINES) {
  describe(`client ID metadata documents on ${engine}`, () => {
    let t: TestApp
    let issuer: string
    let server: client.ServerMetadata
    const host = new DocumentHost()

    before(async () => {
      await host.start()
      const port = await freePort()
      issuer = `http://localhost:${port}`
      t = await startTestApp(engine, { env: { PUBLIC_URL: issuer }, overrides: { clientMetadata: { resolve: host.resolve, ca: host.ca } } })
      await t.app.listen({ port, host: '127.0.0.1' })
      server = (await (await fetch(`${issuer}/.well-known/oauth-authorization-server`)).json()) as client.ServerMetadata
    })
    after(async () => {
      await t?.close()
      await host.close()
    })

    const rp = (clientId: string) => {
      const config = new client.Configuration(server, clientId, {}, client.None())
      client.allowInsecureRequests(config)
      return config
    }
    /** The person's side up to the consent page (or whatever page stops the flow). */
    async function start(clientId: string, redirectUri = CALLBACK) {
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)
      const verifier = client.randomPKCECodeVerifier()
      const checks = { pkceCodeVerifier: verifier, expectedState: client.randomState() }
      const url = client.buildAuthorizationUrl(config, { redirect_uri: redirectUri, scope: 'openid offline_access', prompt: 'consent', code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', state: checks.expectedState })
      const page: Page = await browser.go(url.href)
      return { config, browser, checks, page }
    }

    test('discovery says so; a document\'s client signs a person in after a consent page that names it, where it goes back to and warns of a loopback-only app; fetched once for two sign-ins', async () => {
      assert.equal((server as Record<string, unknown>).client_id_metadata_document_supported, true)
      const clientId = host.document('/agents/desk.json', { client_name: 'Desk Agent', redirect_uris: [CALLBACK], grant_types: ['authorization_code', 'refresh_token'], token_endpoint_auth_method: 'none', unknown_field: 'ignored' }, { 'cache-control': 'max-age=3600' })
      const user = await registerVerifyLogin(t)
      for (let round = 0; round < 2; round++) {
        let { config, browser, checks, page } = await start(clientId)
        page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
        assert.ok(formsOf(page).some((form) => form.action.endsWith('/consent')), `always asked: ${page.body.slice(0, 200)}`)
        assert.match(page.body, /Desk Agent/)
        assert.match(page.body, /is not registered with/)
        assert.match(page.body, /127\.0\.0\.1:33418/)
        assert.match(page.body, /sends you back to a program on this computer/)
        page = await browser.submit(formOf(page, { actionEndsWith: '/consent' }), {})
        const tokens = await client.authorizationCodeGrant(config, new URL(page.location!), checks)
        assert.ok(tokens.refresh_token, 'its refresh grant')
        const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token!)
        assert.ok(refreshed.access_token)
      }
      assert.equal(host.hits('/agents/desk.json'), 1, 'fetched once, then from the shared cache')
    })

    test('a document that breaks a rule is invalid_client on a page, with the reason, never a redirect: another id, a redirect not listed, a secret method, a redirecting or huge document', async () => {
      const cases: [string, string, RegExp][] = [
        ['/bad/other-id.json', host.serve('/bad/other-id.json', { body: JSON.stringify({ client_id: `${host.origin}/someone-else.json`, redirect_uris: [CALLBACK] }) }), /client_id/],
        ['/bad/secret.json', host.document('/bad/secret.json', { redirect_uris: [CALLBACK], token_endpoint_auth_method: 'client_secret_basic' }), /client_secret_basic|token_endpoint_auth_method/],
        ['/bad/redirect.json', host.serve('/bad/redirect.json', { status: 302, headers: { location: `${host.origin}/agents/desk.json` } }), /redirect/],
        ['/bad/huge.json', host.document('/bad/huge.json', { redirect_uris: [CALLBACK], padding: 'x'.repeat(6000) }), /larger than/],
      ]
      for (const [name, clientId, reason] of cases) {
        const { page } = await start(clientId)
        assert.ok(!page.location, `${name}: no redirect to the client`)
        assert.equal(page.status, 400, `${name}: ${page.body.slice(0, 300)}`)
        assert.match(page.body, /invalid_client/, name)
        assert.match(page.body, reason, name)
      }
      const listed = host.document('/agents/listed.json', { redirect_uris: [CALLBACK] })
      const unlisted = await start(listed, 'http://127.0.0.1:33418/elsewhere')
      assert.ok(!unlisted.page.location)
      assert.match(unlisted.page.body, /redirect_uri/)
    })
  })
}

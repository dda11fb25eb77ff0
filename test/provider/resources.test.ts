import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import * as client from 'openid-client'
import { runCli } from '../../src/cli.ts'
import type { ClientCreate } from '../../src/provider/schemas.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'

/**
 * Resources operators register (API.md, "Agents and MCP clients"; docs/provider.md, "Resources"):
 * the admin API, and what a registration changes in the provider: a token asked for with resource=
 * its URI has that audience and only its scopes, the consent page names it, an unknown resource is
 * invalid_target, and the audience is the one consented to. Driven by a real relying party
 * (openid-client) and the provider's own pages.
 */

const REDIRECT_URI = 'https://rp.example/cb'
const MCP = 'https://mcp.example.com/mcp'

type User = Awaited<ReturnType<typeof registerVerifyLogin>>

for (const engine of ENGINES) {
  describe(`registered resources on ${engine}`, () => {
    let t: TestApp
    let issuer: string
    let api: string
    let server: client.ServerMetadata
    let key: string
    let readKey: string

    before(async () => {
      const port = await freePort()
      issuer = `http://localhost:${port}`
      api = `${issuer}/api/v1`
      t = await startTestApp(engine, { env: { PUBLIC_URL: issuer } })
      await t.app.listen({ port, host: '127.0.0.1' })
      server = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as client.ServerMetadata
      key = (await t.app.services.apiKeys.create({ name: 'resources', scopes: ['clients:read', 'clients:write'], expiresAt: null })).key
      readKey = (await t.app.services.apiKeys.create({ name: 'resources-read', scopes: ['clients:read'], expiresAt: null })).key
      const created = await t.call('POST', '/admin/resources', key, { uri: MCP, name: 'Acme MCP', scopes: [{ name: 'tools:read', description: 'Use the read-only tools' }, { name: 'tools:write', description: 'Use the tools that change things' }] })
      assert.equal(created.statusCode, 201, created.body)
    })
    after(async () => {
      await t?.close()
    })

    const register = async (fields: Partial<ClientCreate> = {}) =>
      (await t.app.services.clients.create({ name: 'Agent', type: 'public', redirect_uris: [REDIRECT_URI], scopes: ['openid', 'offline_access'], ...fields } as ClientCreate)).client.client_id
    const rp = (clientId: string) => {
      const config = new client.Configuration(server, clientId, {}, client.None())
      client.allowInsecureRequests(config)
      return config
    }

    /** The person's side of a code flow with PKCE up to the redirect back: the consent page seen, and where the browser lands. */
    async function authorize(config: client.Configuration, user: User, parameters: Record<string, string>) {
      const browser = new OpBrowser(issuer)
      const verifier = client.randomPKCECodeVerifier()
      const checks = { pkceCodeVerifier: verifier, expectedState: client.randomState() }
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: REDIRECT_URI, prompt: 'consent', code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', state: checks.expectedState, ...parameters,
      })
      let page: Page = await browser.go(url.href)
      if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/login'))) page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      let consent: Page | null = null
      if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/consent'))) {
        consent = page
        page = await browser.submit(formOf(page, { actionEndsWith: '/consent' }), {})
      }
      return { consent, location: page.location ? new URL(page.location) : null, page, checks }
    }

    test('the admin API registers, lists, changes and removes resources; it refuses a URI twice, the built-in one, http, a fragment and an OpenID scope', async () => {
      const uri = `https://api-${engine}.example.com/v2`
      const created = await t.call('POST', '/admin/resources', key, { uri, name: 'Reports API', scopes: [{ name: 'reports:read', description: 'Read reports' }] })
      assert.equal(created.statusCode, 201, created.body)
      const { id } = created.json().data.resource
      assert.deepEqual(created.json().data.resource.scopes, [{ name: 'reports:read', description: 'Read reports' }])
      for (const [body, field] of [
        [{ uri, name: 'Again', scopes: [] }, 'uri'],
        [{ uri: api, name: 'Built in', scopes: [] }, 'uri'],
        [{ uri: 'http://api.example.com/x', name: 'Plain', scopes: [] }, 'uri'],
        [{ uri: 'https://api.example.com/x#frag', name: 'Fragment', scopes: [] }, 'uri'],
        [{ uri: 'https://api.example.com/y', name: 'OIDC', scopes: [{ name: 'email', description: 'x' }] }, 'scopes.0.name'],
      ] as const) {
        const refused = await t.call('POST', '/admin/resources', key, body)
        assert.equal(refused.statusCode, 400, refused.body)
        assert.equal(refused.json().error.details[0].field, field, refused.body)
      }
      assert.equal((await t.call('POST', '/admin/resources', readKey, { uri: 'https://x.example.com/', name: 'X', scopes: [] })).json().error.code, 'INSUFFICIENT_SCOPE')
      assert.ok((await t.call('GET', '/admin/resources', readKey)).json().data.resources.some((r: { id: string }) => r.id === id))
      const changed = await t.call('PATCH', `/admin/resources/${id}`, key, { scopes: [{ name: 'reports:export', description: 'Export reports' }] })
      assert.deepEqual(changed.json().data.resource.scopes.map((s: { name: string }) => s.name), ['reports:export'])
      assert.equal((await t.call('DELETE', `/admin/resources/${id}`, key)).statusCode, 200)
      assert.equal((await t.call('GET', `/admin/resources/${id}`, readKey)).statusCode, 404)
    })

    test('the CLI adds, lists and removes resources', async () => {
      const env = { DATA_DIR: t.storage.dataDir, DATABASE_URL: t.storage.databaseUrl, PUBLIC_URL: issuer }
      const run = async (args: string[]) => {
        const out: string[] = []
        const err: string[] = []
        return { status: await runCli(args, env, { out: (line) => out.push(line), err: (line) => err.push(line) }), out, err }
      }
      const uri = `https://cli-${engine}.example.com/mcp`
      const added = await run(['resources', 'add', uri, '--name', 'CLI MCP', '--scope', 'tools:read=Use the read-only tools'])
      assert.equal(added.status, 0, added.err.join('\n'))
      const id = /^resource ([0-9a-f-]{36}): /.exec(added.out[0]!)![1]!
      const listed = JSON.parse((await run(['resources', 'list', '--json'])).out.join('\n')) as { id: string; uri: string; scopes: { name: string }[] }[]
      assert.deepEqual(listed.find((r) => r.id === id)?.scopes.map((s) => s.name), ['tools:read'])
      assert.equal((await run(['resources', 'add', uri, '--name', 'Twice'])).status, 1, 'a URI twice')
      assert.equal((await run(['resources', 'add', uri])).status, 2, '--name is required')
      assert.equal((await run(['resources', 'remove', id])).status, 0)
      assert.equal(await t.app.services.resources.find(uri), null)
    })

    test('a token for a registered resource has it as audience and only its scopes, and the consent page names it; the watchlists API refuses that token', async () => {
      const user = await registerVerifyLogin(t)
      // The client may ask for the API's watchlists:read too; a token for the MCP server still carries only its own scopes.
      const config = rp(await register({ scopes: ['openid', 'offline_access', 'watchlists:read'] }))
      const { consent, location, checks, page } = await authorize(config, user, { scope: 'openid tools:read watchlists:read', resource: MCP })
      assert.ok(consent, `the consent page was shown: ${location} ${page.status} ${page.body.slice(0, 500)}`)
      assert.match(consent.body, /Acme MCP/)
      assert.match(consent.body, /mcp\.example\.com/)
      assert.match(consent.body, /Use the read-only tools/)
      assert.doesNotMatch(consent.body, /Use the tools that change things/, 'only the scopes asked for')
      const tokens = await client.authorizationCodeGrant(config, location!, checks, { resource: MCP })
      const claims = decodeJwt(tokens.access_token)
      assert.equal(claims.aud, MCP)
      assert.equal(claims.scope, 'tools:read')
      const refused = await fetch(`${api}/watchlists`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
      assert.equal(refused.status, 401)
    })

    test('an unknown resource is invalid_target; a token request for another resource than the one consented to is refused', async () => {
      const user = await registerVerifyLogin(t)
      const config = rp(await register())
      const unknown = await authorize(config, user, { scope: 'openid tools:read', resource: 'https://unknown.example.com/' })
      const error = unknown.location?.searchParams.get('error') ?? unknown.page.body
      assert.match(String(error), /invalid_target/)

      const { location, checks } = await authorize(config, user, { scope: 'openid tools:read', resource: MCP })
      await assert.rejects(client.authorizationCodeGrant(config, location!, checks, { resource: api }), (e: { error?: string }) => e.error === 'invalid_target' || e.error === 'invalid_grant')
    })
  })
}

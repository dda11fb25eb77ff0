import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { decodeJwt } from 'jose'
import { SCOPES, startMcpServer, type RunningMcpServer } from '../../examples/mcp/server.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { DocumentHost } from '../helpers/document-host.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'

/**
 * examples/mcp (`npm run example:mcp`): the MCP server on the official MCP TypeScript SDK,
 * protected by Portcullis, driven by that SDK's own client (Client, StreamableHTTPClientTransport,
 * its OAuth flow) as an agent would: the 401 sends it to the RFC 9728 metadata, that to
 * Portcullis's discovery; it becomes a client by its client ID metadata document (served over real
 * https, test/helpers/document-host.ts) or, without one, by dynamic registration; the person signs
 * in and consents on the provider's own pages (test/helpers/op-browser.ts, playing the browser the
 * agent would open); the tokens are for the MCP server alone (aud), with only the scopes approved.
 * A tool whose scope the token lacks is refused with 403 insufficient_scope, and the SDK asks the
 * person for the wider scope by itself.
 *
 * On SQLite only: this tests the example and the SDK's way through Portcullis, not an engine; every
 * piece of the provider it uses runs on both engines in test/provider/ (client-metadata,
 * registration, resources). One flow each, as a person would go through it.
 */

/** Where the agent's person is sent back: a program on this computer (nothing listens; the redirect is read, not followed). */
const REDIRECT_URL = 'http://127.0.0.1:33419/callback'
const AGENT = { name: 'portcullis-test-agent', version: '1.0.0' }

/** One request the agent made to the MCP endpoint, as answered. */
interface Seen {
  method: string
  status: number
  challenge: string | null
}

/**
 * The agent's side of OAuth for the SDK (its OAuthClientProvider), in memory, and the person at the
 * browser it would open: redirectToAuthorization signs in if asked, consents, and keeps the code
 * from the redirect back, checking its state and iss (RFC 9207) as the agent's callback would.
 */
class Agent implements OAuthClientProvider {
  readonly browser: OpBrowser
  /** Each authorization URL the SDK opened, and each consent page the person saw. */
  readonly authorizations: URL[] = []
  readonly consents: Page[] = []
  /** How many times the person had to sign in. */
  signIns = 0
  /** The code of the last authorization, for transport.finishAuth. */
  code: string | null = null
  private information: OAuthClientInformationMixed | undefined
  private saved: OAuthTokens | undefined
  private verifier = ''
  private expectedState = ''

  constructor(
    private readonly issuer: string,
    private readonly email: string,
    readonly clientMetadataUrl?: string,
  ) {
    this.browser = new OpBrowser(issuer)
  }

  get redirectUrl(): string {
    return REDIRECT_URL
  }

  /** What dynamic registration sends (the document says the same for the other path). */
  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'Notes Agent', redirect_uris: [REDIRECT_URL], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' }
  }

  state(): string {
    this.expectedState = randomBytes(16).toString('base64url')
    return this.expectedState
  }

  clientInformation() {
    return this.information
  }

  saveClientInformation(information: OAuthClientInformationMixed): void {
    this.information = information
  }

  tokens() {
    return this.saved
  }

  saveTokens(tokens: OAuthTokens): void {
    this.saved = tokens
  }

  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier
  }

  codeVerifier(): string {
    return this.verifier
  }

  async redirectToAuthorization(url: URL): Promise<void> {
    this.authorizations.push(url)
    this.code = null
    let page = await this.browser.go(url.href)
    if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/login'))) {
      page = await this.browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: this.email, password: PASSWORD })
      this.signIns++
    }
    assert.ok(formsOf(page).some((form) => form.action.endsWith('/consent')), `a consent page: ${page.status} ${page.body.slice(0, 500)}`)
    this.consents.push(page)
    page = await this.browser.submit(formOf(page, { actionEndsWith: '/consent' }), {})
    assert.ok(page.location?.startsWith(`${REDIRECT_URL}?`), `back to the agent: ${page.status} ${page.location} ${page.body.slice(0, 500)}`)
    const back = new URL(page.location!)
    assert.equal(back.searchParams.get('state'), this.expectedState)
    assert.equal(back.searchParams.get('iss'), this.issuer)
    this.code = back.searchParams.get('code')
    assert.ok(this.code, `a code: ${back.href}`)
  }

  get clientId(): string | undefined {
    return this.information?.client_id
  }

  /** The current access token's claims. */
  claims() {
    assert.ok(this.saved, 'the agent holds a token')
    return decodeJwt(this.saved.access_token)
  }
}

const engine = 'sqlite'

describe(`examples/mcp with the MCP SDK's client on ${engine}`, () => {
  let t: TestApp
  let issuer: string
  let mcp: RunningMcpServer
  let key: string
  const host = new DocumentHost()
  const refusals: string[] = []

  before(async () => {
    await host.start()
    const port = await freePort()
    issuer = `http://localhost:${port}`
    t = await startTestApp(engine, { env: { PUBLIC_URL: issuer, OP_REGISTRATION: 'open' }, overrides: { clientMetadata: { resolve: host.resolve, ca: host.ca } } })
    await t.app.listen({ port, host: '127.0.0.1' })
    mcp = await startMcpServer({ port: 0, issuer, log: (line) => refusals.push(line) })
    key = (await t.app.services.apiKeys.create({ name: 'mcp', scopes: ['clients:read', 'clients:write'], expiresAt: null })).key
    // What `npm run example:mcp` tells the operator to do, through the admin API here.
    const registered = await t.call('POST', '/admin/resources', key, { uri: mcp.resource, name: 'Notes (MCP example)', scopes: Object.entries(SCOPES).map(([name, description]) => ({ name, description })) })
    assert.equal(registered.statusCode, 201, registered.body)
  })
  after(async () => {
    await mcp?.close()
    await t?.close()
    await host.close()
  })

  /** The SDK's transport to the MCP server for `agent`, recording what the MCP endpoint answered. */
  function connectTo(agent: Agent, seen: Seen[] = []) {
    const recording = async (input: string | URL, init?: RequestInit): Promise<Response> => {
      const response = await fetch(input, init)
      if (String(input) === mcp.resource) seen.push({ method: init?.method ?? 'GET', status: response.status, challenge: response.headers.get('www-authenticate') })
      return response
    }
    const transport = new StreamableHTTPClientTransport(new URL(mcp.resource), { authProvider: agent, fetch: recording })
    return { transport, client: new Client(AGENT), seen }
  }
  const json = (result: unknown) => JSON.parse(((result as CallToolResult).content[0] as { text: string }).text)

  test('client ID metadata document: the 401 leads the SDK to Portcullis, the person approves tools:read for the MCP server, whoami works; add_note is 403 insufficient_scope until the SDK has the person approve tools:write', async () => {
    const user = await registerVerifyLogin(t)
    const clientId = host.document('/agents/notes-agent.json', { client_name: 'Notes Agent', redirect_uris: [REDIRECT_URL], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' })
    const agent = new Agent(issuer, user.email, clientId)

    // 1. No token: 401 naming the metadata and the scope to ask for first; the SDK discovers, the
    //    person signs in and consents, and the SDK stops at the redirect, as an agent does.
    let { transport, client, seen } = connectTo(agent)
    await assert.rejects(client.connect(transport), UnauthorizedError)
    assert.equal(seen[0]?.status, 401)
    assert.equal(seen[0]?.challenge, `Bearer scope="tools:read", resource_metadata="${mcp.metadataUrl}"`)
    assert.equal(agent.clientId, clientId, 'the document\'s URL is the client_id (no registration)')
    const asked = agent.authorizations[0]!
    assert.equal(`${asked.origin}${asked.pathname}`, `${issuer}/oauth/authorize`)
    assert.equal(asked.searchParams.get('client_id'), clientId)
    assert.equal(asked.searchParams.get('resource'), mcp.resource)
    assert.equal(asked.searchParams.get('scope'), 'tools:read')
    assert.equal(asked.searchParams.get('code_challenge_method'), 'S256')
    const consent = agent.consents[0]!.body
    assert.match(consent, /Notes Agent/)
    assert.match(consent, /Notes \(MCP example\)/, 'the consent page names the resource')
    assert.match(consent, new RegExp(SCOPES['tools:read']))
    assert.doesNotMatch(consent, new RegExp(SCOPES['tools:write']))
    await transport.finishAuth(agent.code!)
    let claims = agent.claims()
    assert.equal(claims.aud, mcp.resource, 'for the MCP server alone, exactly as registered')
    assert.equal(claims.iss, issuer)
    assert.equal(claims.sub, user.userId)
    assert.equal(claims.client_id, clientId)
    assert.equal(claims.scope, 'tools:read')

    // 2. Connected again with the token: the tools, and whoami acting for the person.
    ;({ transport, client, seen } = connectTo(agent))
    await client.connect(transport)
    assert.deepEqual((await client.listTools()).tools.map((tool) => tool.name).sort(), ['add_note', 'list_notes', 'whoami'])
    assert.deepEqual(json(await client.callTool({ name: 'whoami', arguments: {} })), { sub: user.userId, client_id: clientId, scope: ['tools:read'] })

    // 3. add_note needs tools:write: 403 naming the scopes the call needs; the SDK asks the person
    //    again for them (signed in already: the consent page only), and nothing was written.
    await assert.rejects(client.callTool({ name: 'add_note', arguments: { text: 'buy milk' } }), UnauthorizedError)
    const refused = seen.at(-1)!
    assert.equal(refused.status, 403)
    assert.equal(refused.challenge, `Bearer error="insufficient_scope", scope="tools:read tools:write", resource_metadata="${mcp.metadataUrl}"`)
    assert.equal(agent.authorizations.length, 2)
    assert.equal(agent.authorizations[1]!.searchParams.get('scope'), 'tools:read tools:write')
    assert.equal(agent.signIns, 1, 'not asked to sign in again')
    assert.match(agent.consents[1]!.body, new RegExp(SCOPES['tools:write']))
    assert.deepEqual(json(await client.callTool({ name: 'list_notes', arguments: {} })), { notes: [] }, 'the refused call changed nothing')

    await transport.finishAuth(agent.code!)
    claims = agent.claims()
    assert.equal(claims.aud, mcp.resource)
    assert.equal(claims.scope, 'tools:read tools:write')
    assert.deepEqual(json(await client.callTool({ name: 'add_note', arguments: { text: 'buy milk' } })), { added: 'buy milk', count: 1 })
    assert.deepEqual(json(await client.callTool({ name: 'list_notes', arguments: {} })), { notes: ['buy milk'] })
    await client.close()
    assert.equal(host.hits('/agents/notes-agent.json'), 1, 'Portcullis fetched the document once for both authorizations')
  })

  test('dynamic registration: without a document the SDK registers itself at /oauth/register, and the person\'s approval gets it a token for the MCP server alone', async () => {
    const user = await registerVerifyLogin(t)
    const agent = new Agent(issuer, user.email)
    let { transport, client } = connectTo(agent)
    await assert.rejects(client.connect(transport), UnauthorizedError)
    const clientId = agent.clientId
    assert.ok(clientId && !clientId.startsWith('https://'), `registered: ${clientId}`)
    const listed = (await t.call('GET', `/admin/clients/${clientId}`, key)).json().data.client
    assert.equal(listed.dynamic, true)
    assert.equal(listed.type, 'public')
    assert.equal(listed.name, 'Notes Agent')
    assert.match(agent.consents[0]!.body, /Notes Agent/)
    await transport.finishAuth(agent.code!)
    const claims = agent.claims()
    assert.equal(claims.aud, mcp.resource)
    assert.equal(claims.client_id, clientId)
    assert.equal(claims.scope, 'tools:read')

    ;({ transport, client } = connectTo(agent))
    await client.connect(transport)
    assert.ok((await client.listTools()).tools.some((tool) => tool.name === 'whoami'))
    assert.deepEqual(json(await client.callTool({ name: 'whoami', arguments: {} })), { sub: user.userId, client_id: clientId, scope: ['tools:read'] })
    await client.close()
  })

  test('a token for another audience (Portcullis\'s own API) is 401 invalid_token with the metadata, and the refusal is logged without the token', async () => {
    const user = await registerVerifyLogin(t)
    const response = await fetch(mcp.resource, {
      method: 'POST',
      headers: { authorization: `Bearer ${user.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    })
    assert.equal(response.status, 401)
    assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer error="invalid_token", error_description="[^"]+", scope="tools:read", resource_metadata="/)
    assert.ok(refusals.some((line) => line.includes('401 audience')), refusals.join('\n'))
    assert.ok(!refusals.some((line) => line.includes(user.access_token)))
    const metadata = await (await fetch(mcp.metadataUrl)).json()
    assert.deepEqual(metadata, { resource: mcp.resource, authorization_servers: [issuer], scopes_supported: ['tools:read', 'tools:write'], bearer_methods_supported: ['header'], resource_name: 'Notes (Portcullis MCP example)' })
  })
})

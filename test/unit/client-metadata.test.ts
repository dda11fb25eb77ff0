import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import { after, before, describe, test } from 'node:test'
import {
  ClientMetadataDocuments, ClientMetadataError, isMetadataDocumentUrl, lifetimeMs,
  MAX_LIFETIME_MS, MIN_LIFETIME_MS, type ClientMetadataDocumentsOptions,
} from '../../src/provider/client-metadata.ts'
import type { ResolvedAddress } from '../../src/webhooks/sender.ts'

// Client ID metadata documents (API.md, "Agents and MCP clients"): fetched over real sockets from
// loopback servers of this file's own, in development mode (where an http loopback document URL is
// allowed); the production address guard is tested with the real policy and a `resolve` that makes
// a public-looking name answer with loopback, and a listener that counts whether anything reached it.

const NOW = Date.UTC(2026, 0, 15, 12, 0, 0)
const MINUTE = 60_000

type Handler = (request: IncomingMessage, response: ServerResponse) => void

/** A loopback HTTP server whose answer each test sets per path, counting the requests each path got. */
class DocumentServer {
  readonly hits = new Map<string, number>()
  private readonly routes = new Map<string, Handler>()
  private readonly server: Server

  constructor() {
    this.server = createHttpServer((request, response) => {
      const path = request.url ?? ''
      this.hits.set(path, (this.hits.get(path) ?? 0) + 1)
      const handler = this.routes.get(path)
      if (handler) return handler(request, response)
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found')
    })
  }

  async start(): Promise<void> {
    this.server.listen(0, '127.0.0.1')
    await once(this.server, 'listening')
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port
  }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`
  }

  /** Serves `handler` at a fresh path and returns the document's URL. */
  route(handler: Handler): string {
    const path = `/clients/${this.routes.size + 1}.json`
    this.routes.set(path, handler)
    return this.url(path)
  }

  /** Serves a JSON document made for its own URL (`client_id` set to it unless `document` says otherwise). */
  json(document: (url: string) => Record<string, unknown>, headers: Record<string, string> = {}): string {
    let url = ''
    url = this.route((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(document(url)))
    })
    return url
  }

  hitsOf(url: string): number {
    return this.hits.get(new URL(url).pathname) ?? 0
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections()
    this.server.close()
    await once(this.server, 'close')
  }
}

/** A TCP listener on loopback that only counts connections: whether anything reached it at all. */
async function connectionCounter(): Promise<{ port: number; connections: () => number; close: () => Promise<void> }> {
  let connections = 0
  const sockets = new Set<Socket>()
  const server = createTcpServer((socket) => {
    connections++
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => connections,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      server.close()
      await once(server, 'close')
    },
  }
}

/** A valid document for `url`: a native client with a loopback redirect and a web one. */
const documentFor = (url: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  client_id: url,
  client_name: 'Example Agent',
  redirect_uris: ['http://127.0.0.1:33418/callback', 'https://agent.example.com/oauth/callback'],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'none',
  ...extra,
})

function documents(options: Partial<ClientMetadataDocumentsOptions> = {}): ClientMetadataDocuments {
  return new ClientMetadataDocuments({ production: false, allowedHosts: null, clock: () => NOW, ...options })
}

/** Runs `fetch` and returns the refusal it must end in. */
async function refusal(docs: ClientMetadataDocuments, url: string): Promise<ClientMetadataError> {
  try {
    await docs.fetch(url)
  } catch (error) {
    assert.ok(error instanceof ClientMetadataError, `expected a ClientMetadataError, got ${String(error)}`)
    assert.equal(error.error, 'invalid_client')
    assert.match(error.description, /^client metadata document: /)
    assert.match(error.description, /^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/, 'RFC 6749 error_description characters only')
    return error
  }
  assert.fail(`${url} was accepted`)
}

describe('isMetadataDocumentUrl', () => {
  const cases: { url: string; production: boolean; development: boolean; why: string }[] = [
    { url: 'https://agent.example.com/client.json', production: true, development: true, why: 'https with a path' },
    { url: 'https://agent.example.com:8443/oauth/client?v=2', production: true, development: true, why: 'a port and a query are allowed' },
    { url: 'https://agent.example.com', production: false, development: false, why: 'no path' },
    { url: 'https://agent.example.com/', production: false, development: false, why: 'the root path' },
    { url: 'https://agent.example.com?x=1', production: false, development: false, why: 'a query but no path' },
    { url: 'https://agent.example.com/client.json#frag', production: false, development: false, why: 'a fragment' },
    { url: 'https://agent.example.com/client.json#', production: false, development: false, why: 'an empty fragment' },
    { url: 'https://user:pw@agent.example.com/client.json', production: false, development: false, why: 'credentials' },
    { url: 'https://@agent.example.com/client.json', production: false, development: false, why: 'an empty userinfo' },
    { url: 'https://agent.example.com/a/../client.json', production: false, development: false, why: 'a .. segment' },
    { url: 'https://agent.example.com/./client.json', production: false, development: false, why: 'a . segment' },
    { url: 'https://agent.example.com/a/%2E%2e/client.json', production: false, development: false, why: 'an encoded .. segment' },
    { url: 'https://agent.example.com/a/..', production: false, development: false, why: 'a trailing .. segment' },
    { url: 'https://agent.example.com\\client.json', production: false, development: false, why: 'a backslash' },
    { url: 'https://agent.example.com/client json', production: false, development: false, why: 'a space' },
    { url: 'http://agent.example.com/client.json', production: false, development: false, why: 'http on a public host' },
    { url: 'http://127.0.0.1:8080/client.json', production: false, development: true, why: 'http loopback: development only' },
    { url: 'http://localhost:8080/client.json', production: false, development: true, why: 'http localhost: development only' },
    { url: 'http://[::1]:8080/client.json', production: false, development: true, why: 'http [::1]: development only' },
    { url: 'ftp://agent.example.com/client.json', production: false, development: false, why: 'another scheme' },
    { url: 'my-client', production: false, development: false, why: 'an ordinary client_id' },
    { url: 'urn:example:client', production: false, development: false, why: 'a URN' },
  ]
  for (const c of cases) {
    test(`${c.why}: ${c.url}`, () => {
      assert.equal(isMetadataDocumentUrl(c.url, { production: true }), c.production, 'production')
      assert.equal(isMetadataDocumentUrl(c.url, { production: false }), c.development, 'development')
    })
  }
})

describe('lifetimeMs: HTTP caching within 5 minutes and 24 hours', () => {
  const date = new Date(NOW).toUTCString()
  const cases: { name: string; headers: Record<string, string>; ms: number }[] = [
    { name: 'max-age within the bounds is kept', headers: { 'cache-control': 'public, max-age=3600' }, ms: 3600_000 },
    { name: 'max-age below 5 minutes is raised to 5 minutes', headers: { 'cache-control': 'max-age=60' }, ms: MIN_LIFETIME_MS },
    { name: 'max-age above 24 hours is lowered to 24 hours', headers: { 'cache-control': 'max-age=604800' }, ms: MAX_LIFETIME_MS },
    { name: 'a quoted max-age is read', headers: { 'cache-control': 'max-age="1200"' }, ms: 1200_000 },
    { name: 's-maxage wins over max-age (the provider is a shared cache)', headers: { 'cache-control': 'max-age=600, s-maxage=7200' }, ms: 7200_000 },
    { name: 'Age is taken off', headers: { 'cache-control': 'max-age=3600', age: '600' }, ms: 3000_000 },
    { name: 'no-store means 5 minutes', headers: { 'cache-control': 'no-store, max-age=3600' }, ms: MIN_LIFETIME_MS },
    { name: 'no-cache means 5 minutes', headers: { 'cache-control': 'no-cache' }, ms: MIN_LIFETIME_MS },
    { name: 'Expires is counted from Date', headers: { date: new Date(NOW - 3600_000).toUTCString(), expires: new Date(NOW + 3600_000).toUTCString() }, ms: 7200_000 },
    { name: 'Expires without Date is counted from now', headers: { expires: new Date(NOW + 2 * 3600_000).toUTCString() }, ms: 2 * 3600_000 },
    { name: 'an Expires that is not a date means 5 minutes', headers: { date, expires: '0' }, ms: MIN_LIFETIME_MS },
    { name: 'max-age wins over Expires', headers: { 'cache-control': 'max-age=1800', date, expires: new Date(NOW + 7200_000).toUTCString() }, ms: 1800_000 },
    { name: 'nothing said means 5 minutes', headers: {}, ms: MIN_LIFETIME_MS },
  ]
  for (const c of cases) {
    test(c.name, () => assert.equal(lifetimeMs(c.headers, NOW), c.ms))
  }
})

describe('ClientMetadataDocuments', () => {
  const server = new DocumentServer()
  const docs = documents()
  before(() => server.start())
  after(async () => {
    docs.close()
    await server.stop()
  })

  test('a valid document becomes a public, third-party-ready client, kept as its Cache-Control says', async () => {
    const url = server.json((self) => documentFor(self, {
      logo_uri: 'https://agent.example.com/logo.png',
      client_uri: 'http://agent.example.com/', // not https: left out
      tos_uri: 'javascript:alert(1)', // left out
      policy_uri: 'https://agent.example.com/privacy',
      software_id: 'an unknown field, ignored',
      scope: 'openid profile',
    }), { 'cache-control': 'public, max-age=7200' })
    const fetched = await docs.fetch(url)
    assert.deepEqual(fetched, {
      metadata: {
        client_id: url,
        client_name: 'Example Agent',
        redirect_uris: ['http://127.0.0.1:33418/callback', 'https://agent.example.com/oauth/callback'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        application_type: 'web',
        logo_uri: 'https://agent.example.com/logo.png',
        policy_uri: 'https://agent.example.com/privacy',
        loopbackOnly: false,
      },
      expiresAt: NOW + 7200_000,
    })
    assert.equal(server.hitsOf(url), 1)
  })

  test('the request asks for JSON, uncompressed', async () => {
    let headers: IncomingMessage['headers'] = {}
    let url = ''
    url = server.route((request, response) => {
      headers = request.headers
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(documentFor(url)))
    })
    await docs.fetch(url)
    assert.equal(headers.accept, 'application/json')
    assert.equal(headers['accept-encoding'], 'identity')
  })

  test('the least a document needs: client_id and redirect_uris; the name defaults to the host, the method to none', async () => {
    const url = server.json((self) => ({ client_id: self, redirect_uris: ['http://localhost:9000/cb', 'http://[::1]/cb'] }))
    const { metadata, expiresAt } = await docs.fetch(url)
    assert.deepEqual(metadata, {
      client_id: url,
      client_name: '127.0.0.1',
      redirect_uris: ['http://localhost:9000/cb', 'http://[::1]/cb'],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      application_type: 'native',
      loopbackOnly: true,
    })
    assert.equal(expiresAt, NOW + MIN_LIFETIME_MS, 'no caching headers: 5 minutes')
  })

  test('a loopback-only client on https is flagged loopbackOnly but stays a web client (the library refuses https loopback for native ones)', async () => {
    const url = server.json((self) => documentFor(self, { redirect_uris: ['https://localhost:8443/cb'] }))
    const { metadata } = await docs.fetch(url)
    assert.equal(metadata.loopbackOnly, true)
    assert.equal(metadata.application_type, 'web')
  })

  test('an application/*+json content type with parameters is JSON', async () => {
    let url = ''
    url = server.route((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/oauth-client+json; charset=utf-8' }).end(JSON.stringify(documentFor(url)))
    })
    assert.equal((await docs.fetch(url)).metadata.client_id, url)
  })

  test('Expires sets the lifetime when there is no max-age, and no-store keeps it for 5 minutes', async () => {
    const expiring = server.json((self) => documentFor(self), { date: new Date(NOW).toUTCString(), expires: new Date(NOW + 3 * 3600_000).toUTCString() })
    assert.equal((await docs.fetch(expiring)).expiresAt, NOW + 3 * 3600_000)
    const uncached = server.json((self) => documentFor(self), { 'cache-control': 'no-store' })
    assert.equal((await docs.fetch(uncached)).expiresAt, NOW + 5 * MINUTE)
  })

  describe('refusals, each with its reason', () => {
    /** A document for its own URL, changed by `change` (a field set to undefined is removed). */
    const refusedDocument = (change: Record<string, unknown>) => (self: string) => {
      const document = documentFor(self, change)
      for (const [key, value] of Object.entries(document)) if (value === undefined) delete document[key]
      return document
    }
    const cases: { name: string; change: Record<string, unknown>; reason: RegExp }[] = [
      { name: 'a client_id other than the URL', change: { client_id: 'https://agent.example.com/client.json' }, reason: /client_id must equal the URL it was fetched from/ },
      { name: 'a missing client_id', change: { client_id: undefined }, reason: /client_id must equal the URL/ },
      { name: 'missing redirect_uris', change: { redirect_uris: undefined }, reason: /redirect_uris is missing/ },
      { name: 'redirect_uris that is not an array', change: { redirect_uris: 'https://agent.example.com/cb' }, reason: /redirect_uris must be an array/ },
      { name: 'empty redirect_uris', change: { redirect_uris: [] }, reason: /redirect_uris must not be empty/ },
      { name: 'a redirect URI that is not a string', change: { redirect_uris: [42] }, reason: /redirect_uris\[0\] must be a string/ },
      { name: 'a redirect URI that is not a URL', change: { redirect_uris: ['https://agent.example.com/cb', '/callback'] }, reason: /redirect_uris\[1\] is not a URL/ },
      { name: 'an http redirect URI on a public host', change: { redirect_uris: ['http://agent.example.com/cb'] }, reason: /redirect_uris\[0\] must be https, or http on a loopback host/ },
      { name: 'an http redirect URI on a loopback address other than 127.0.0.1', change: { redirect_uris: ['http://127.0.0.2/cb'] }, reason: /redirect_uris\[0\] must be https, or http on a loopback host/ },
      { name: 'a custom-scheme redirect URI', change: { redirect_uris: ['com.example.agent:/callback'] }, reason: /redirect_uris\[0\] must be https, or http on a loopback host/ },
      { name: 'a redirect URI with a fragment', change: { redirect_uris: ['https://agent.example.com/cb#done'] }, reason: /redirect_uris\[0\] must not have a fragment/ },
      { name: 'a redirect URI with an empty fragment', change: { redirect_uris: ['https://agent.example.com/cb#'] }, reason: /redirect_uris\[0\] must not have a fragment/ },
      { name: 'a redirect URI with credentials', change: { redirect_uris: ['https://user@agent.example.com/cb'] }, reason: /redirect_uris\[0\] must not contain credentials/ },
      { name: 'a wildcard redirect URI', change: { redirect_uris: ['https://*.example.com/cb'] }, reason: /redirect_uris\[0\] must be exact, not a pattern/ },
      { name: 'token_endpoint_auth_method client_secret_basic', change: { token_endpoint_auth_method: 'client_secret_basic' }, reason: /token_endpoint_auth_method must be none: a shared secret cannot be used/ },
      { name: 'token_endpoint_auth_method client_secret_post', change: { token_endpoint_auth_method: 'client_secret_post' }, reason: /token_endpoint_auth_method must be none: a shared secret/ },
      { name: 'token_endpoint_auth_method client_secret_jwt', change: { token_endpoint_auth_method: 'client_secret_jwt' }, reason: /token_endpoint_auth_method must be none: a shared secret/ },
      { name: 'token_endpoint_auth_method private_key_jwt', change: { token_endpoint_auth_method: 'private_key_jwt' }, reason: /token_endpoint_auth_method must be none$/ },
      { name: 'a token_endpoint_auth_method that is not a string', change: { token_endpoint_auth_method: null }, reason: /token_endpoint_auth_method must be none$/ },
      { name: 'a client_secret', change: { client_secret: 'shh' }, reason: /must not contain client_secret$/ },
      { name: 'a client_secret_expires_at', change: { client_secret_expires_at: 0 }, reason: /must not contain client_secret_expires_at/ },
      { name: 'jwks', change: { jwks: { keys: [] } }, reason: /jwks and jwks_uri are not allowed/ },
      { name: 'jwks_uri', change: { jwks_uri: 'https://agent.example.com/jwks.json' }, reason: /jwks and jwks_uri are not allowed/ },
      { name: 'the implicit grant', change: { grant_types: ['authorization_code', 'implicit'] }, reason: /grant_types may hold only authorization_code and refresh_token/ },
      { name: 'the client_credentials grant', change: { grant_types: ['client_credentials'] }, reason: /grant_types may hold only authorization_code and refresh_token/ },
      { name: 'grant_types without authorization_code', change: { grant_types: ['refresh_token'] }, reason: /grant_types must include authorization_code/ },
      { name: 'grant_types that is not an array of strings', change: { grant_types: 'authorization_code' }, reason: /grant_types must be a non-empty array of strings/ },
      { name: 'empty grant_types', change: { grant_types: [] }, reason: /grant_types must be a non-empty array of strings/ },
      { name: 'response_types beyond code', change: { response_types: ['code', 'code id_token'] }, reason: /response_types may hold only code/ },
      { name: 'response_types token', change: { response_types: ['token'] }, reason: /response_types may hold only code/ },
      { name: 'a client_name that is not a string', change: { client_name: 42 }, reason: /client_name must be a string/ },
      { name: 'an empty client_name', change: { client_name: '  ' }, reason: /client_name is required/ },
      { name: 'a client_name over 100 characters', change: { client_name: 'x'.repeat(101) }, reason: /client_name must be at most 100 characters/ },
      { name: 'a client_name with a line break', change: { client_name: 'Agent\nApproved by your administrator' }, reason: /client_name must not contain control characters/ },
    ]
    for (const c of cases) {
      test(`refuses ${c.name}`, async () => {
        const url = server.json(refusedDocument(c.change))
        const error = await refusal(docs, url)
        assert.match(error.description, c.reason)
      })
    }

    test('refuses a client_id that differs from the URL only by a trailing slash (compared as strings)', async () => {
      const error = await refusal(docs, server.json((self) => documentFor(`${self}/`)))
      assert.match(error.description, /client_id must equal the URL it was fetched from, exactly/)
    })

    test('refuses a client_id that differs from the URL only in the case of its host', async () => {
      const error = await refusal(docs, server.json((self) => documentFor(self.replace('http://', 'HTTP://'))))
      assert.match(error.description, /client_id must equal the URL it was fetched from, exactly/)
    })

    /** A route answering with `status`, `headers` and `body` as given. */
    const answering = (status: number, headers: Record<string, string>, body: string) =>
      server.route((_request, response) => response.writeHead(status, headers).end(body))

    test('refuses a 404', async () => {
      const error = await refusal(docs, answering(404, { 'content-type': 'application/json' }, '{}'))
      assert.match(error.description, /the URL answered 404, not 200/)
    })

    test('refuses a 204 (only 200 carries a document)', async () => {
      const error = await refusal(docs, answering(204, {}, ''))
      assert.match(error.description, /the URL answered 204, not 200/)
    })

    test('refuses a server error', async () => {
      const error = await refusal(docs, answering(503, { 'content-type': 'application/json' }, '{}'))
      assert.match(error.description, /the URL answered 503, not 200/)
    })

    test('refuses a content type other than JSON', async () => {
      const url = server.route((_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end(JSON.stringify(documentFor(url))))
      const error = await refusal(docs, url)
      assert.match(error.description, /the document is not JSON \(content-type not application\/json\)/)
    })

    test('refuses a document without a content type', async () => {
      const url = server.route((_request, response) => {
        response.removeHeader('content-type')
        response.writeHead(200).end(JSON.stringify(documentFor(url)))
      })
      const error = await refusal(docs, url)
      assert.match(error.description, /the document is not JSON \(content-type missing\)/)
    })

    test('refuses a body that does not parse as JSON', async () => {
      const error = await refusal(docs, answering(200, { 'content-type': 'application/json' }, '{"client_id": '))
      assert.match(error.description, /the document is not valid JSON/)
    })

    test('refuses a body that is not UTF-8', async () => {
      const url = server.route((_request, response) => {
        response.writeHead(200, { 'content-type': 'application/json' })
        response.end(Buffer.concat([Buffer.from(`{"client_id":"${url}","client_name":"`), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]))
      })
      const error = await refusal(docs, url)
      assert.match(error.description, /the document is not valid JSON/)
    })

    for (const [name, body] of [['an array', '[]'], ['null', 'null'], ['a string', '"client"']] as const) {
      test(`refuses JSON that is ${name}, not an object`, async () => {
        const error = await refusal(docs, answering(200, { 'content-type': 'application/json' }, body))
        assert.match(error.description, /the document is not a JSON object/)
      })
    }
  })

  test('refuses a redirect without following it: the target is never asked', async () => {
    const target = server.json((self) => documentFor(self))
    for (const status of [301, 302, 303, 307, 308]) {
      const url = server.route((_request, response) => response.writeHead(status, { location: target }).end())
      const error = await refusal(docs, url)
      assert.match(error.description, new RegExp(`the URL answered with a redirect \\(${status}\\), which is not followed`))
      assert.equal(server.hitsOf(url), 1)
    }
    assert.equal(server.hitsOf(target), 0, 'the redirect target was requested')
  })

  test('refuses a body over 5 KB that declares its length', async () => {
    const big = JSON.stringify(documentFor('x', { padding: 'p'.repeat(6000) }))
    const error = await refusal(docs, answering(big))
    assert.match(error.description, /the document is larger than 5120 bytes/)

    function answering(body: string) {
      return server.route((_request, response) => response.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }).end(body))
    }
  })

  test('refuses a body over 5 KB sent in chunks without a length, and stops reading it', async () => {
    let written = 0
    let stopped!: () => void
    const gone = new Promise<void>((resolve) => (stopped = resolve))
    const url = server.route((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      // 1 KB at a time, up to 1 MB, until the reader goes away.
      const chunk = 'x'.repeat(1024)
      const timer = setInterval(() => {
        if (response.destroyed || written >= 1024 * 1024) {
          clearInterval(timer)
          response.end()
          stopped()
          return
        }
        response.write(chunk)
        written += chunk.length
      }, 2)
      response.on('close', () => {
        clearInterval(timer)
        stopped()
      })
    })
    const error = await refusal(docs, url)
    assert.match(error.description, /the document is larger than 5120 bytes/)
    await gone
    assert.ok(written < 256 * 1024, `the server could write ${written} bytes: the reader did not stop`)
  })

  test('a document of exactly 5120 bytes is read', async () => {
    let url = ''
    url = server.route((_request, response) => {
      const base = JSON.stringify(documentFor(url, { padding: '' }))
      const body = base.replace('"padding":""', `"padding":"${'p'.repeat(5120 - Buffer.byteLength(base))}"`)
      assert.equal(Buffer.byteLength(body), 5120)
      response.writeHead(200, { 'content-type': 'application/json' }).end(body)
    })
    assert.equal((await docs.fetch(url)).metadata.client_id, url)
  })

  test('refuses a server that does not answer within the timeout', async () => {
    const quick = documents({ timeoutMs: 300 })
    const url = server.route(() => {}) // never answers
    const started = Date.now()
    try {
      const error = await refusal(quick, url)
      assert.match(error.description, /could not be fetched: no answer within 0\.3 s/)
      assert.ok(Date.now() - started < 2000, 'gave up late')
    } finally {
      quick.close()
    }
  })

  test('refuses a server that sends its headers and then trickles the body past the timeout', async () => {
    const quick = documents({ timeoutMs: 300 })
    const url = server.route((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write('{"client_id":')
      const timer = setInterval(() => (response.destroyed ? clearInterval(timer) : response.write(' ')), 50)
      response.on('close', () => clearInterval(timer))
    })
    try {
      const error = await refusal(quick, url)
      assert.match(error.description, /could not be fetched: no answer within 0\.3 s/)
    } finally {
      quick.close()
    }
  })

  test('refuses a URL nothing listens on, saying it could not connect', async () => {
    const counter = await connectionCounter()
    const port = counter.port
    await counter.close()
    const error = await refusal(docs, `http://127.0.0.1:${port}/client.json`)
    assert.match(error.description, /could not be fetched: .*ECONNREFUSED/)
  })

  test('refuses a client_id that is not a document URL before any request', async () => {
    for (const url of ['https://agent.example.com/', 'http://agent.example.com/client.json', 'https://agent.example.com/a/../b', 'my-client']) {
      const error = await refusal(docs, url)
      assert.match(error.description, /client_id is not a document URL/)
    }
  })

  describe('allowed hosts', () => {
    test('refuses a host not on the list, without connecting', async () => {
      const listed = documents({ allowedHosts: ['agents.example.com', 'localhost'] })
      const url = server.json((self) => documentFor(self))
      try {
        const error = await refusal(listed, url)
        assert.match(error.description, new RegExp(`the host 127\\.0\\.0\\.1:${server.port} is not among the hosts allowed`))
        assert.equal(server.hitsOf(url), 0)
      } finally {
        listed.close()
      }
    })

    test('fetches from a listed host, by name alone or with its port, in any case', async () => {
      for (const entry of ['127.0.0.1', `127.0.0.1:${server.port}`]) {
        const listed = documents({ allowedHosts: ['agents.example.com', entry] })
        try {
          const url = server.json((self) => documentFor(self))
          assert.equal((await listed.fetch(url)).metadata.client_id, url)
        } finally {
          listed.close()
        }
      }
      const named = documents({ allowedHosts: ['LocalHost.'] })
      try {
        const url = server.json((self) => documentFor(self.replace('127.0.0.1', 'localhost'))).replace('127.0.0.1', 'localhost')
        assert.equal((await named.fetch(url)).metadata.client_id, url)
      } finally {
        named.close()
      }
    })
  })
})

describe('ClientMetadataDocuments in production', () => {
  test('refuses an http loopback document URL (development only)', async () => {
    const production = documents({ production: true })
    try {
      const error = await refusal(production, 'http://127.0.0.1:8080/client.json')
      assert.match(error.description, /client_id is not a document URL \(https, with a path/)
    } finally {
      production.close()
    }
  })

  test('refuses a literal special-use address in the URL, without connecting, and says which', async () => {
    const counter = await connectionCounter()
    let asked = 0
    const production = documents({ production: true, resolve: async () => (asked++, [{ address: '127.0.0.1', family: 4 }]) })
    try {
      for (const host of ['10.0.0.1', '192.168.1.20', '169.254.169.254', '[fd00::1]', '[::ffff:127.0.0.1]', '0x7f.1', `127.0.0.1:${counter.port}`, `[::1]:${counter.port}`]) {
        const error = await refusal(production, `https://${host}/client.json`)
        assert.match(error.description, /the URL names .*, a special-use address, which is not allowed/, host)
      }
      const error = await refusal(production, `https://localhost:${counter.port}/client.json`)
      assert.match(error.description, /the URL names localhost, a loopback name, which is not allowed/)
      assert.equal(counter.connections(), 0)
      assert.equal(asked, 0, 'a literal address or localhost is judged without resolving anything')
    } finally {
      production.close()
      await counter.close()
    }
  })

  test('refuses a public-looking name that resolves to loopback, where the socket is opened, with a generic description', async () => {
    const counter = await connectionCounter()
    const asked: string[] = []
    const resolve = async (hostname: string): Promise<ResolvedAddress[]> => {
      asked.push(hostname)
      return [{ address: '127.0.0.1', family: 4 }]
    }
    const production = documents({ production: true, resolve })
    try {
      const error = await refusal(production, `https://agent.example.com:${counter.port}/client.json`)
      // The asker learns nothing about what the name resolves to; the server's log does.
      assert.equal(error.description, 'client metadata document: could not be fetched: could not connect to the endpoint')
      assert.doesNotMatch(error.description, /127\.0\.0\.1/)
      assert.match(error.detail, /agent\.example\.com resolved to 127\.0\.0\.1, a special-use address/)
      assert.deepEqual(asked, ['agent.example.com'])
      assert.equal(counter.connections(), 0, 'a connection reached the loopback listener')
    } finally {
      production.close()
      await counter.close()
    }
  })

  test('refuses a name when any one of its addresses is private', async () => {
    const production = documents({ production: true, resolve: async () => [{ address: '93.184.215.14', family: 4 }, { address: '10.1.2.3', family: 4 }] })
    try {
      const error = await refusal(production, 'https://agent.example.com/client.json')
      assert.equal(error.description, 'client metadata document: could not be fetched: could not connect to the endpoint')
      assert.match(error.detail, /resolved to 10\.1\.2\.3/)
    } finally {
      production.close()
    }
  })

  test('in development a loopback address is allowed, and a name goes through the same resolve seam', async () => {
    const server = new DocumentServer()
    await server.start()
    const asked: string[] = []
    const development = documents({ production: false, resolve: async (hostname) => (asked.push(hostname), [{ address: '127.0.0.1', family: 4 }]) })
    try {
      const path = new URL(server.json((self) => documentFor(self.replace('127.0.0.1', 'localhost')))).pathname
      const url = `http://localhost:${server.port}${path}`
      assert.equal((await development.fetch(url)).metadata.client_id, url)
      assert.deepEqual(asked, ['localhost'])
    } finally {
      development.close()
      await server.stop()
    }
  })
})

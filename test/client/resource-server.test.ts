import assert from 'node:assert/strict'
import { generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { decodeJwt, decodeProtectedHeader } from 'jose'
import * as client from 'openid-client'
import {
  AccessTokenError, bearerToken, challenge, challengeResponse, KeySetUnavailableError, protectedResourceMetadata, resourceMetadataUrl, verifyAccessToken,
  type VerifyAccessTokenOptions,
} from '../../packages/client/dist/index.js'
import { rotateSigningKeys } from '../../src/auth/keys.ts'
import type { ClientCreate } from '../../src/provider/schemas.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'

/*
 * The resource server's side of the client package (docs/client.md, "Protecting your own API or
 * MCP server"), held against a real Portcullis listening on a real port: its provider issues the
 * tokens through the real code flow (openid-client, the provider's own pages), and the verifier
 * fetches discovery and the JWKS over HTTP as a service elsewhere would. It runs on SQLite only:
 * the verifier sees tokens and HTTP documents, which are the same whichever database holds the
 * grant (test/provider/ runs the flow itself on both engines).
 */

const REDIRECT_URI = 'https://rp.example/cb'
const ELSEWHERE = 'https://mcp.example.com/mcp'

const encode = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')

/** A compact JWS over header and claims, signed with an Ed25519 key of the test's. */
function signWith(key: KeyObject, header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const input = `${encode(header)}.${encode(claims)}`
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`
}

/** The AccessTokenError a verification fails with; a verification that succeeds fails the test. */
async function refusal(verification: Promise<unknown>): Promise<AccessTokenError> {
  const outcome = await verification.then(() => null, (error: unknown) => error)
  assert.ok(outcome instanceof AccessTokenError, `expected an AccessTokenError, got ${String(outcome)}`)
  return outcome
}

/** A fetch that counts what it is asked for, by path, and can be made to fail. */
function countingFetch() {
  const asked: string[] = []
  let failing = false
  const fetcher: typeof fetch = (input, init) => {
    asked.push(new URL(String(input)).pathname)
    if (failing) return Promise.reject(new TypeError('fetch failed (the test took the network away)'))
    return fetch(input, init)
  }
  return {
    fetch: fetcher,
    count: (path: string) => asked.filter((item) => item === path).length,
    fail(on: boolean) {
      failing = on
    },
  }
}

/** A loopback HTTP server for the test's own documents; its base URL and how to close it. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server = createServer(handler)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

describe('verifyAccessToken and the RFC 9728 helpers against a real Portcullis (SQLite)', () => {
  let t: TestApp
  let issuer: string
  let api: string
  let jwksUri: string
  let server: client.ServerMetadata
  let rp: client.Configuration
  let refreshToken: string
  let userId: string
  let clientId: string
  /** The ID token of the code flow (RS256, the provider's default). */
  let idToken: string
  /** Each cache test asks for the JWKS at an address of its own (a query the server ignores), so it starts with no key set. */
  let cacheRun = 0
  const ownKeySet = () => `${jwksUri}?run=${++cacheRun}`

  /** A new provider access token for the API (RFC 9068, `watchlists:read` only), from a refresh with resource=. */
  async function providerToken(): Promise<string> {
    const refreshed = await client.refreshTokenGrant(rp, refreshToken, { resource: api })
    refreshToken = refreshed.refresh_token!
    return refreshed.access_token
  }

  const options = (extra: Partial<VerifyAccessTokenOptions> = {}): VerifyAccessTokenOptions => ({ issuer, audience: api, ...extra })

  before(async () => {
    const port = await freePort()
    issuer = `http://localhost:${port}`
    api = `${issuer}/api/v1`
    t = await startTestApp('sqlite', { env: { PUBLIC_URL: issuer } })
    await t.app.listen({ port, host: '127.0.0.1' })
    server = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as client.ServerMetadata
    jwksUri = server.jwks_uri!

    // A person signs in through an operator's public client and approves watchlists:read.
    const user = await registerVerifyLogin(t)
    userId = user.userId
    clientId = (await t.app.services.clients.create({ name: 'Notes agent', type: 'public', redirect_uris: [REDIRECT_URI] } as ClientCreate)).client.client_id
    rp = new client.Configuration(server, clientId, {}, client.None())
    client.allowInsecureRequests(rp)
    const verifier = client.randomPKCECodeVerifier()
    const checks = { pkceCodeVerifier: verifier, expectedState: client.randomState(), expectedNonce: client.randomNonce() }
    const url = client.buildAuthorizationUrl(rp, {
      redirect_uri: REDIRECT_URI, scope: 'openid offline_access watchlists:read', prompt: 'consent',
      code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
      state: checks.expectedState, nonce: checks.expectedNonce,
    })
    const browser = new OpBrowser(issuer)
    let page: Page = await browser.go(url.href)
    page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
    if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/consent'))) page = await browser.submit(formOf(page, { actionEndsWith: '/consent' }), {})
    assert.ok(page.location?.startsWith(REDIRECT_URI), `expected the redirect to the client, got ${page.status}: ${page.body.slice(0, 300)}`)
    const tokens = await client.authorizationCodeGrant(rp, new URL(page.location!), checks)
    refreshToken = tokens.refresh_token!
    idToken = tokens.id_token!
  })
  after(async () => {
    await t?.close()
  })

  // Runs first on purpose: it is the only test that finds the keys through discovery with an empty cache.
  test('the keys are discovered from the issuer\'s RFC 8414 metadata and fetched once for many tokens', async () => {
    const counting = countingFetch()
    for (let i = 0; i < 3; i++) await verifyAccessToken(await providerToken(), options({ fetch: counting.fetch }))
    assert.equal(counting.count('/.well-known/oauth-authorization-server'), 1)
    assert.equal(counting.count(new URL(jwksUri).pathname), 1, `jwks_uri is ${jwksUri}`)
    assert.equal(new URL(jwksUri).pathname, '/oauth/jwks')
  })

  test('a provider token for the API is accepted with its audience and scope, and its claims come back typed', async () => {
    const token = await providerToken()
    assert.equal(decodeProtectedHeader(token).typ, 'at+jwt')
    const claims = await verifyAccessToken(token, options({ scopes: ['watchlists:read'] }))
    const raw = decodeJwt(token)
    assert.equal(claims.iss, issuer)
    assert.equal(claims.sub, userId)
    assert.equal(claims.client_id, clientId)
    assert.deepEqual(claims.aud, [api])
    assert.deepEqual(claims.scope, String(raw.scope).split(' '))
    assert.ok(claims.scope.includes('watchlists:read') && !claims.scope.includes('watchlists:write'))
    assert.equal(claims.exp, raw.exp)
    assert.equal(claims.iat, raw.iat)
    assert.equal(claims.jti, raw.jti)
    assert.equal(claims.acr, 'aal1', 'the other claims are passed on')
  })

  test('a token for another audience is invalid_token', async () => {
    const error = await refusal(verifyAccessToken(await providerToken(), options({ audience: ELSEWHERE })))
    assert.equal(error.error, 'invalid_token')
    assert.equal(error.reason, 'audience')
    assert.equal(error.status, 401)
  })

  test('a token without a scope the request needs is insufficient_scope (403) naming the scopes needed', async () => {
    const error = await refusal(verifyAccessToken(await providerToken(), options({ scopes: ['watchlists:read', 'watchlists:write'] })))
    assert.equal(error.error, 'insufficient_scope')
    assert.equal(error.status, 403)
    assert.deepEqual(error.scope, ['watchlists:read', 'watchlists:write'])
  })

  test('a token past exp plus the tolerance is expired; within the tolerance it still passes', async () => {
    const token = await providerToken()
    const { exp } = decodeJwt(token) as { exp: number }
    await verifyAccessToken(token, options({ now: () => (exp + 29) * 1000 }))
    const error = await refusal(verifyAccessToken(token, options({ now: () => (exp + 30) * 1000 })))
    assert.equal(error.reason, 'expired')
    assert.equal(error.error, 'invalid_token')
    const strict = await refusal(verifyAccessToken(token, options({ now: () => exp * 1000, clockToleranceSeconds: 0 })))
    assert.equal(strict.reason, 'expired')
  })

  test('a token issued in the future (beyond the tolerance) is refused', async () => {
    const token = await providerToken()
    const { iat } = decodeJwt(token) as { iat: number }
    const error = await refusal(verifyAccessToken(token, options({ now: () => (iat - 31) * 1000 })))
    assert.equal(error.reason, 'issued_in_future')
  })

  test('a tampered payload (a scope added) fails the signature', async () => {
    const [header, payload, signature] = (await providerToken()).split('.') as [string, string, string]
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>
    const forged = `${header}.${encode({ ...claims, scope: `${String(claims.scope)} watchlists:write` })}.${signature}`
    const error = await refusal(verifyAccessToken(forged, options({ scopes: ['watchlists:write'] })))
    assert.equal(error.reason, 'signature')
    assert.equal(error.error, 'invalid_token')
  })

  test('alg none is refused, with or without a signature', async () => {
    const token = await providerToken()
    const header = decodeProtectedHeader(token)
    const payload = token.split('.')[1]!
    for (const signature of ['', token.split('.')[2]!]) {
      const error = await refusal(verifyAccessToken(`${encode({ ...header, alg: 'none' })}.${payload}.${signature}`, options()))
      assert.equal(error.reason, 'algorithm')
    }
  })

  test('a token signed by another Ed25519 key under the real kid fails the signature', async () => {
    const token = await providerToken()
    const { privateKey } = generateKeyPairSync('ed25519')
    const forged = signWith(privateKey, decodeProtectedHeader(token), decodeJwt(token))
    const error = await refusal(verifyAccessToken(forged, options()))
    assert.equal(error.reason, 'signature')
  })

  test('a genuine token checked against another issuer is refused for its iss', async () => {
    const error = await refusal(verifyAccessToken(await providerToken(), { issuer: 'https://id.elsewhere.example', audience: api, jwksUri: ownKeySet() }))
    assert.equal(error.reason, 'issuer')
  })

  test('Portcullis\'s own access token is at+jwt too: a registered resource refuses it by its aud, and it carries no scope', async () => {
    const own = (await registerVerifyLogin(t)).access_token
    // What was found: the service's own tokens share typ at+jwt, iss, the key and (for the API) aud
    // with the provider's; only client_id ("portcullis") and the missing scope claim tell them apart.
    assert.equal(decodeProtectedHeader(own).typ, 'at+jwt')
    assert.equal(decodeJwt(own).client_id, 'portcullis')
    const elsewhere = await refusal(verifyAccessToken(own, options({ audience: ELSEWHERE })))
    assert.equal(elsewhere.reason, 'audience')
    const scoped = await refusal(verifyAccessToken(own, options({ scopes: ['watchlists:read'] })))
    assert.equal(scoped.error, 'insufficient_scope')
  })

  test('Portcullis\'s refresh token (rt+jwt, the same key) is refused for its type even for its own audience', async () => {
    const { refresh_token: refresh } = await registerVerifyLogin(t)
    assert.equal(decodeProtectedHeader(refresh).typ, 'rt+jwt')
    const error = await refusal(verifyAccessToken(refresh, { issuer, audience: String(decodeJwt(refresh).aud) }))
    assert.equal(error.reason, 'type')
  })

  test('the provider\'s ID token (RS256, not at+jwt) is no access token, even for its own audience', async () => {
    const header = decodeProtectedHeader(idToken)
    assert.equal(header.alg, 'RS256')
    assert.notEqual(String(header.typ).toLowerCase(), 'at+jwt')
    const error = await refusal(verifyAccessToken(idToken, options({ audience: clientId })))
    assert.equal(error.error, 'invalid_token')
    assert.equal(error.reason, 'type')
  })

  test('a token naming unknown kids makes at most one JWKS fetch every 30 s', async () => {
    const counting = countingFetch()
    const start = Date.now()
    const keySet = ownKeySet()
    const at = (seconds: number) => options({ fetch: counting.fetch, jwksUri: keySet, now: () => start + seconds * 1000 })
    const { privateKey } = generateKeyPairSync('ed25519')
    const token = await providerToken()
    const randomKid = () => signWith(privateKey, { alg: 'EdDSA', typ: 'at+jwt', kid: randomBytes(8).toString('hex') }, decodeJwt(token))
    const path = new URL(jwksUri).pathname

    await verifyAccessToken(token, at(0))
    assert.equal(counting.count(path), 1)
    for (let second = 1; second < 30; second += 2) assert.equal((await refusal(verifyAccessToken(randomKid(), at(second)))).reason, 'unknown_key')
    assert.equal(counting.count(path), 1, 'no fetch within 30 s of the last one')
    assert.equal((await refusal(verifyAccessToken(randomKid(), at(30)))).reason, 'unknown_key')
    assert.equal(counting.count(path), 2, 'one fetch once 30 s have passed')
    await Promise.all(Array.from({ length: 20 }, () => refusal(verifyAccessToken(randomKid(), at(45)))))
    assert.equal(counting.count(path), 2)
  })

  test('the key set is fetched again after 10 minutes, unasked', async () => {
    const counting = countingFetch()
    const start = Date.now()
    const keySet = ownKeySet()
    const token = await providerToken()
    const at = (seconds: number) => options({ fetch: counting.fetch, jwksUri: keySet, now: () => start + seconds * 1000 })
    await verifyAccessToken(token, at(0))
    await verifyAccessToken(token, at(599))
    assert.equal(counting.count(new URL(jwksUri).pathname), 1)
    await verifyAccessToken(token, at(600))
    assert.equal(counting.count(new URL(jwksUri).pathname), 2)
  })

  test('a key set that cannot be renewed keeps serving the keys it holds', async () => {
    const counting = countingFetch()
    const start = Date.now()
    const keySet = ownKeySet()
    const token = await providerToken()
    const at = (seconds: number) => options({ fetch: counting.fetch, jwksUri: keySet, now: () => start + seconds * 1000 })
    await verifyAccessToken(token, at(0))
    counting.fail(true)
    const claims = await verifyAccessToken(token, at(700))
    assert.equal(claims.sub, userId)
    assert.equal(counting.count(new URL(jwksUri).pathname), 2, 'the renewal was tried')
  })

  test('keys that cannot be had are KeySetUnavailableError (503 with Retry-After), never invalid_token', async () => {
    const nowhere = `http://127.0.0.1:${await freePort()}/jwks`
    const outcome = await verifyAccessToken(await providerToken(), options({ jwksUri: nowhere })).then(() => null, (error: unknown) => error)
    assert.ok(outcome instanceof KeySetUnavailableError, `got ${String(outcome)}`)
    const answer = challengeResponse(outcome)
    assert.equal(answer.status, 503)
    assert.equal(answer.headers['retry-after'], '30')
    assert.equal(answer.headers['www-authenticate'], undefined)
  })

  test('a JWKS larger than 64 KB is refused without being read to its end', async () => {
    let written = 0
    const endless = await serve((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write('{"keys":[')
      const chunk = `${JSON.stringify({ kty: 'OKP', crv: 'Ed25519', x: 'A'.repeat(43), kid: 'padding' })},`.repeat(200)
      const more = () => {
        while (!response.destroyed && response.write(chunk)) written += chunk.length
        if (!response.destroyed) response.once('drain', more)
      }
      more()
    })
    try {
      const outcome = await verifyAccessToken(await providerToken(), options({ jwksUri: `${endless.url}/jwks` })).then(() => null, (error: unknown) => error)
      assert.ok(outcome instanceof KeySetUnavailableError, `got ${String(outcome)}`)
      assert.match(outcome.message, /larger than 65536 bytes/)
      assert.ok(written < 10 * 1024 * 1024, `the server wrote ${written} bytes`)
    } finally {
      await endless.close()
    }
  })

  test('typ at+jwt is matched case-insensitively, with or without application/; anything else is refused', async () => {
    // An issuer of the test's own, with one Ed25519 key: only the typ varies between the tokens.
    const { privateKey, publicKey } = generateKeyPairSync('ed25519')
    const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'test-key', alg: 'EdDSA', use: 'sig' }
    const keys = await serve((_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] })))
    try {
      const now = Math.floor(Date.now() / 1000)
      const claims = { iss: 'https://issuer.test', aud: ELSEWHERE, sub: 'user-1', client_id: 'agent', jti: 'j1', iat: now, exp: now + 60, scope: 'notes:read' }
      const check = { issuer: 'https://issuer.test', audience: ELSEWHERE, jwksUri: `${keys.url}/jwks` }
      for (const typ of ['at+jwt', 'AT+JWT', 'application/at+jwt', 'Application/At+JWT']) {
        const verified = await verifyAccessToken(signWith(privateKey, { alg: 'EdDSA', kid: 'test-key', typ }, claims), check)
        assert.deepEqual(verified.scope, ['notes:read'], typ)
      }
      for (const typ of ['JWT', 'at+jwt; charset=utf-8', 'application/jwt', undefined]) {
        const error = await refusal(verifyAccessToken(signWith(privateKey, { alg: 'EdDSA', kid: 'test-key', typ }, claims), check))
        assert.equal(error.reason, 'type', String(typ))
      }
      // RFC 9068's required claims, each missing in turn, from an otherwise good token.
      for (const name of ['sub', 'client_id', 'jti', 'iat', 'exp']) {
        const { [name]: _left, ...rest } = claims as Record<string, unknown>
        const error = await refusal(verifyAccessToken(signWith(privateKey, { alg: 'EdDSA', kid: 'test-key', typ: 'at+jwt' }, rest), check))
        assert.equal(error.reason, 'claims', name)
      }
      const critical = await refusal(verifyAccessToken(signWith(privateKey, { alg: 'EdDSA', kid: 'test-key', typ: 'at+jwt', crit: ['exp'], exp: 1 }, claims), check))
      assert.equal(critical.reason, 'malformed')
    } finally {
      await keys.close()
    }
  })

  test('resourceMetadataUrl follows RFC 9728 section 3.1, and matches what Portcullis advertises for its API', async () => {
    assert.equal(resourceMetadataUrl('https://mcp.example.com/mcp'), 'https://mcp.example.com/.well-known/oauth-protected-resource/mcp')
    assert.equal(resourceMetadataUrl('https://api.example.com/'), 'https://api.example.com/.well-known/oauth-protected-resource')
    assert.equal(resourceMetadataUrl('https://api.example.com:8443/v1/'), 'https://api.example.com:8443/.well-known/oauth-protected-resource/v1')
    assert.throws(() => resourceMetadataUrl('https://api.example.com/#x'), TypeError)
    assert.throws(() => resourceMetadataUrl('ftp://api.example.com/'), TypeError)

    const refused = await fetch(`${api}/watchlists`)
    const advertised = /resource_metadata="([^"]+)"/.exec(refused.headers.get('www-authenticate') ?? '')?.[1]
    assert.equal(refused.status, 401)
    assert.equal(resourceMetadataUrl(api), advertised)
    const served = (await (await fetch(advertised!)).json()) as Record<string, unknown>
    assert.deepEqual(
      protectedResourceMetadata({ resource: api, authorizationServers: [issuer], scopesSupported: ['watchlists:read', 'watchlists:write'], resourceName: 'Portcullis API' }),
      served,
      'the same document Portcullis serves for its own API',
    )
  })

  test('challenge() writes the three RFC 6750 challenges with resource_metadata', async () => {
    const resourceMetadata = resourceMetadataUrl(ELSEWHERE)
    assert.equal(challenge(undefined, { resourceMetadata }), `Bearer resource_metadata="${resourceMetadata}"`)
    assert.equal(challenge(undefined, { resourceMetadata, scope: ['notes:read'] }), `Bearer scope="notes:read", resource_metadata="${resourceMetadata}"`)
    const expired = await refusal(verifyAccessToken(await providerToken(), options({ now: () => Date.now() + 3600_000 })))
    assert.equal(challenge(expired, { resourceMetadata }), `Bearer error="invalid_token", error_description="The token has expired", resource_metadata="${resourceMetadata}"`)
    const scoped = await refusal(verifyAccessToken(await providerToken(), options({ scopes: ['watchlists:read', 'watchlists:write'] })))
    assert.equal(challenge(scoped, { resourceMetadata }), `Bearer error="insufficient_scope", scope="watchlists:read watchlists:write", resource_metadata="${resourceMetadata}"`)
    const missing = await refusal(verifyAccessToken(bearerToken(undefined), options()))
    assert.equal(missing.error, null)
    assert.equal(challenge(missing, { resourceMetadata }), `Bearer resource_metadata="${resourceMetadata}"`)
  })

  test('bearerToken reads only the Bearer scheme, in any case; a malformed bearer value is refused as invalid_token, not taken for none', async () => {
    assert.equal(bearerToken('Bearer abc.def.ghi'), 'abc.def.ghi')
    assert.equal(bearerToken('bearer   abc.def.ghi '), 'abc.def.ghi')
    assert.equal(bearerToken('Basic dXNlcjpwYXNz'), null)
    assert.equal(bearerToken('Bearer'), null)
    assert.equal(bearerToken(null), null)
    const error = await refusal(verifyAccessToken(bearerToken('Bearer not a token'), options()))
    assert.equal(error.error, 'invalid_token')
    assert.equal(error.reason, 'malformed')
  })

  test('a plain node:http resource server answers 401, 401 invalid_token, 403 and 200 with one line per refusal', async () => {
    const resourceMetadata = resourceMetadataUrl(api)
    const notes = await serve(async (request, response) => {
      try {
        const scopes = request.method === 'POST' ? ['watchlists:write'] : ['watchlists:read']
        const claims = await verifyAccessToken(bearerToken(request.headers.authorization), { issuer, audience: api, scopes })
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sub: claims.sub }))
      } catch (error) {
        const { status, headers, body } = challengeResponse(error, { resourceMetadata })
        response.writeHead(status, headers).end(body)
      }
    })
    try {
      const call = (token?: string, method = 'GET') => fetch(`${notes.url}/notes`, { method, headers: token ? { authorization: `Bearer ${token}` } : {} })
      const none = await call()
      assert.equal(none.status, 401)
      assert.equal(none.headers.get('www-authenticate'), `Bearer resource_metadata="${resourceMetadata}"`)
      assert.equal(none.headers.get('cache-control'), 'no-store')

      const token = await providerToken()
      const [header, payload, signature] = token.split('.') as [string, string, string]
      const tampered = await call(`${header}.${payload}.${signature.startsWith('A') ? 'B' : 'A'}${signature.slice(1)}`)
      assert.equal(tampered.status, 401)
      assert.match(tampered.headers.get('www-authenticate')!, /^Bearer error="invalid_token", error_description="[^"]+", resource_metadata="/)
      assert.equal(((await tampered.json()) as { error: string }).error, 'invalid_token')

      const write = await call(token, 'POST')
      assert.equal(write.status, 403)
      assert.equal(write.headers.get('www-authenticate'), `Bearer error="insufficient_scope", scope="watchlists:write", resource_metadata="${resourceMetadata}"`)

      const read = await call(token)
      assert.equal(read.status, 200)
      assert.deepEqual(await read.json(), { sub: userId })
    } finally {
      await notes.close()
    }
  })

  test('a thrown error that is not a verification\'s is thrown again by challengeResponse, not answered as a 401', () => {
    const bug = new RangeError('a bug of the handler')
    assert.throws(() => challengeResponse(bug), (error) => error === bug)
  })

  // Last on purpose: it changes the signing key, which the key set the other tests share (found
  // through discovery, fetched less than 30 s ago) would not know yet.
  test('a rotated key is picked up: a token naming the new kid fetches the key set again (once 30 s have passed)', async () => {
    const counting = countingFetch()
    const start = Date.now()
    const keySet = ownKeySet()
    const at = (seconds: number) => options({ fetch: counting.fetch, jwksUri: keySet, now: () => start + seconds * 1000 })
    const before = await providerToken()
    await verifyAccessToken(before, at(0))

    // A second later than the first key: keys made in the same millisecond are ordered by kid, and
    // the new one would sign only half the time (src/auth/keys.ts, describeKeys).
    t.clock.advance(1)
    const kids = await rotateSigningKeys(t.app.services.db, t.app.services.sealer, t.clock.now())
    await t.app.services.keys.reload()
    const rotated = await providerToken()
    const kid = decodeProtectedHeader(rotated).kid!
    assert.notEqual(kid, decodeProtectedHeader(before).kid)
    assert.ok(kids.includes(kid), 'signed with the new key')

    assert.equal((await refusal(verifyAccessToken(rotated, at(10)))).reason, 'unknown_key', 'too soon after the last fetch')
    const claims = await verifyAccessToken(rotated, at(31))
    assert.equal(claims.sub, userId)
    assert.equal(counting.count(new URL(jwksUri).pathname), 2)
    // The retired key stays published for its tokens' remaining life, and so stays accepted.
    await verifyAccessToken(before, at(32))
  })
})

import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import { OidcProviders } from '../../src/oidc/providers.ts'

// A provider that is down when the service starts is shown as unavailable and found again by the
// retry, without a restart (docs/oidc.md: discovery retried every 60 s; here every 50 ms). The provider
// is a bare discovery document: what is under test is our retry, not the OpenID exchange, which
// test/integration/oidc.test.ts runs against a real provider.
test('a provider down at start is unavailable, then available once discovery answers', async () => {
  let up = false
  const server = createServer((request, response) => {
    if (!up) return response.writeHead(503).end()
    const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    if (request.url !== '/.well-known/openid-configuration') return response.writeHead(404).end()
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
      issuer,
      authorization_endpoint: `${issuer}/auth`,
      token_endpoint: `${issuer}/token`,
      jwks_uri: `${issuer}/jwks`,
      response_types_supported: ['code'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256'],
    }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const warnings: string[] = []
  const logger = { info() {}, warn: (_fields: unknown, message: string) => warnings.push(message), error() {}, debug() {} } as never
  const providers = new OidcProviders([{ name: 'late', label: 'Late', issuer, clientId: 'c', clientSecret: 's', scopes: 'openid email', trustEmail: false }], logger, 50)
  try {
    await providers.start()
    assert.deepEqual(providers.list(), [{ name: 'late', label: 'Late', available: false }])
    assert.equal(warnings.length, 1)
    up = true
    for (let i = 0; i < 100 && !providers.list()[0]!.available; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    assert.deepEqual(providers.list(), [{ name: 'late', label: 'Late', available: true }])
    assert.ok(providers.get('late')!.client)
  } finally {
    providers.stop()
    await new Promise((resolve) => server.close(resolve))
  }
})

test('a provider whose address does not answer is logged with the cause, not only "fetch failed"', async () => {
  // A port nothing listens on: fetch throws "fetch failed" whose cause is the refused connection.
  const closed = createServer()
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
  const issuer = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`
  await new Promise((resolve) => closed.close(resolve))
  const logged: { err: { message: string } }[] = []
  const logger = { info() {}, warn: (fields: { err: { message: string } }) => logged.push(fields), error() {}, debug() {} } as never
  const providers = new OidcProviders([{ name: 'gone', label: 'Gone', issuer, clientId: 'c', clientSecret: 's', scopes: 'openid email', trustEmail: false }], logger, 60_000)
  try {
    await providers.start()
    assert.equal(logged.length, 1)
    assert.match(logged[0]!.err.message, /ECONNREFUSED/)
  } finally {
    providers.stop()
  }
})

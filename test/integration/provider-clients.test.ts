import assert from 'node:assert/strict'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { runCli, type CliIo } from '../../src/cli.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { startTestApp, type TestApp } from '../helpers/app.ts'

/** The CLI's output; stderr without the line naming the database it opened (test/integration/cli.test.ts tests that). */
function capture(): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = []
  const stderr: string[] = []
  return { stdout, stderr, out: (line) => stdout.push(line), err: (line) => void (line.startsWith('portcullis: database ') || stderr.push(line)) }
}

const ALL_SCOPES = ['openid', 'profile', 'email', 'offline_access', 'watchlists:read', 'watchlists:write']
const ecKeys = () => generateKeyPairSync('ec', { namedCurve: 'P-256' })
const publicJwk = () => ecKeys().publicKey.export({ format: 'jwk' })
const privateJwk = () => ecKeys().privateKey.export({ format: 'jwk' })

const nativeApp = { name: 'iOS app', type: 'public', redirect_uris: ['com.example.app:/callback'] }
const partnerSite = { name: 'Partner site', type: 'confidential', redirect_uris: ['https://partner.example/callback'] }

for (const engine of ENGINES) {
  describe(`the OpenID provider's client registry on ${engine}`, () => {
    let storage: TestStorage
    let t: TestApp
    let keys: Record<'read' | 'write' | 'users' | 'audit', string>
    let writeKeyId: string
    const as = (key: string | undefined, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, body?: unknown) =>
      t.app.inject({
        method,
        url: t.base + path,
        headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
      })
    const create = async (body: unknown): Promise<{ client: Record<string, any>; client_secret?: string }> => {
      const response = await as(keys.write, 'POST', '/admin/clients', body)
      assert.equal(response.statusCode, 201, response.body)
      return response.json().data
    }
    const fieldsOf = (response: LightMyRequestResponse) => (response.json().error.details as { field: string }[]).map((d) => d.field).sort()
    const registry = () => t.app.services.clients
    const kysely = () => t.app.services.db.kysely

    before(async () => {
      storage = await createStorage(engine)
      t = await startTestApp(engine, { storage, env: { RATE_LIMIT_API_KEY_FAILURES_PER_IP: '100000' } })
      const make = async (scopes: ('clients:read' | 'clients:write' | 'users:read' | 'audit:read')[]) =>
        t.app.services.apiKeys.create({ name: scopes.join(' '), scopes, expiresAt: null })
      const write = await make(['clients:write'])
      writeKeyId = write.summary.id
      keys = { read: (await make(['clients:read'])).key, write: write.key, users: (await make(['users:read'])).key, audit: (await make(['audit:read'])).key }
    })
    after(async () => {
      await t.close()
      await storage.drop()
    })

    test('a public client: 201 with every field and the defaults, and no secret', async () => {
      const { client, client_secret } = await create({ ...nativeApp, name: '  iOS app  ' })
      assert.equal(client_secret, undefined)
      assert.match(client.client_id, /^[A-Za-z0-9][A-Za-z0-9_-]{21}$/)
      assert.deepEqual(Object.keys(client), [
        'client_id', 'name', 'type', 'redirect_uris', 'post_logout_redirect_uris', 'first_party', 'scopes', 'grant_types', 'backchannel_logout_uri',
        'pkce_required', 'token_endpoint_auth_method', 'jwks', 'jwks_uri', 'id_token_signed_response_alg', 'dynamic', 'created_at', 'updated_at', 'last_used_at',
      ])
      assert.deepEqual({ ...client, client_id: undefined, created_at: undefined, updated_at: undefined }, {
        client_id: undefined,
        name: 'iOS app',
        type: 'public',
        redirect_uris: ['com.example.app:/callback'],
        post_logout_redirect_uris: [],
        first_party: false,
        scopes: ALL_SCOPES,
        grant_types: ['authorization_code', 'refresh_token'],
        backchannel_logout_uri: null,
        pkce_required: true,
        token_endpoint_auth_method: 'none',
        jwks: null,
        jwks_uri: null,
        id_token_signed_response_alg: 'RS256',
        dynamic: false,
        created_at: undefined,
        updated_at: undefined,
        last_used_at: null,
      })
      assert.equal(client.created_at, new Date(t.clock.now()).toISOString())
      const got = await as(keys.read, 'GET', `/admin/clients/${client.client_id}`)
      assert.deepEqual(got.json().data, { client })
      assert.ok((await as(keys.read, 'GET', '/admin/clients')).json().data.clients.some((c: { client_id: string }) => c.client_id === client.client_id))
      assert.equal((await kysely().selectFrom('op_clients').select('secret').where('client_id', '=', client.client_id).executeTakeFirstOrThrow()).secret, null)
    })

    test('a confidential client: the secret is answered once, never by GET or the list, and stored only sealed', async () => {
      const { client, client_secret } = await create({ ...partnerSite, scopes: ['openid', 'email'] })
      assert.match(client_secret!, /^[A-Za-z0-9_-]{43}$/)
      assert.equal(client.token_endpoint_auth_method, 'client_secret_basic')
      assert.deepEqual(client.scopes, ['openid', 'email'])
      for (const path of [`/admin/clients/${client.client_id}`, '/admin/clients']) {
        const response = await as(keys.read, 'GET', path)
        assert.equal(response.statusCode, 200)
        assert.ok(!response.body.includes(client_secret!), path)
        const data = response.json().data
        assert.ok([data.client ?? [], ...(data.clients ?? [])].every((c: object) => !('client_secret' in c)) && !('client_secret' in data), `${path} has no secret member`)
      }
      const row = await kysely().selectFrom('op_clients').selectAll().where('client_id', '=', client.client_id).executeTakeFirstOrThrow()
      assert.ok(!JSON.stringify(row).includes(client_secret!), 'the row holds no clear secret')
      assert.match(row.secret!, /^enc:v1:/)
      assert.ok(!('client_secret' in JSON.parse(row.metadata)) && !('secret' in JSON.parse(row.metadata)))
      // Bound to its client: the sealed value copied onto another client's row does not open there.
      const other = await create(partnerSite)
      await kysely().updateTable('op_clients').set({ secret: row.secret }).where('client_id', '=', other.client.client_id).execute()
      await assert.rejects(registry().findForLibrary(other.client.client_id), /KEY_ENCRYPTION_KEY/)
      await kysely().deleteFrom('op_clients').where('client_id', '=', other.client.client_id).execute()
    })

    test('every refusal is a VALIDATION_ERROR naming each field at fault', async () => {
      const jwk = publicJwk()
      const keyed = { ...partnerSite, token_endpoint_auth_method: 'private_key_jwt' }
      const cases: [string, unknown, string[]][] = [
        ['a blank name', { ...nativeApp, name: '   ' }, ['name']],
        ['a name over 100 characters', { ...nativeApp, name: 'x'.repeat(101) }, ['name']],
        ['a name with a control character', { ...nativeApp, name: 'bad\u0007name' }, ['name']],
        ['no type', { name: 'x', redirect_uris: ['https://a.example/cb'] }, ['type']],
        ['an unknown type', { ...nativeApp, type: 'secret' }, ['type']],
        ['no redirect URI for authorization_code', { name: 'x', type: 'public' }, ['redirect_uris']],
        ['a relative redirect URI', { ...nativeApp, redirect_uris: ['/callback'] }, ['redirect_uris.0']],
        ['a fragment', { ...partnerSite, redirect_uris: ['https://partner.example/cb#top'] }, ['redirect_uris.0']],
        ['a wildcard', { ...partnerSite, redirect_uris: ['https://*.partner.example/cb'] }, ['redirect_uris.0']],
        ['http on a public host', { ...partnerSite, redirect_uris: ['http://partner.example/cb'] }, ['redirect_uris.0']],
        ['a custom scheme that is not reverse-domain', { ...nativeApp, redirect_uris: ['myapp:/callback'] }, ['redirect_uris.0']],
        ['javascript:', { ...nativeApp, redirect_uris: ['javascript:alert(1)'] }, ['redirect_uris.0']],
        ['a custom scheme on a confidential client', { ...partnerSite, redirect_uris: ['com.example.app:/callback'] }, ['redirect_uris.0']],
        ['a custom scheme beside an https URI (a web client)', { ...nativeApp, redirect_uris: ['https://a.example/cb', 'com.example.app:/callback'] }, ['redirect_uris.1']],
        ['a post-logout URI on plain http', { ...partnerSite, post_logout_redirect_uris: ['http://partner.example/bye'] }, ['post_logout_redirect_uris.0']],
        ['a post-logout URI with a wildcard', { ...partnerSite, post_logout_redirect_uris: ['https://partner.example/*'] }, ['post_logout_redirect_uris.0']],
        ['a public client with a secret method', { ...nativeApp, token_endpoint_auth_method: 'client_secret_basic' }, ['token_endpoint_auth_method']],
        ['a public client without PKCE', { ...nativeApp, pkce_required: false }, ['pkce_required']],
        ['a confidential client with none', { ...partnerSite, token_endpoint_auth_method: 'none' }, ['token_endpoint_auth_method']],
        ['private_key_jwt without keys', keyed, ['jwks']],
        ['private_key_jwt with jwks and jwks_uri', { ...keyed, jwks: { keys: [jwk] }, jwks_uri: 'https://partner.example/jwks' }, ['jwks_uri']],
        ['a private JWK', { ...keyed, jwks: { keys: [privateJwk()] } }, ['jwks.keys.0']],
        ['a symmetric JWK', { ...keyed, jwks: { keys: [{ kty: 'oct', k: 'c2VjcmV0c2VjcmV0c2VjcmV0' }] } }, ['jwks.keys.0']],
        ['a JWK that is no key', { ...keyed, jwks: { keys: [{ kty: 'EC', crv: 'P-256', x: 'AA', y: 'AA' }] } }, ['jwks.keys.0']],
        ['a jwks_uri on plain http', { ...keyed, jwks_uri: 'http://partner.example/jwks' }, ['jwks_uri']],
        ['jwks without private_key_jwt', { ...partnerSite, jwks: { keys: [jwk] } }, ['jwks']],
        ['an unknown scope', { ...nativeApp, scopes: ['openid', 'admin'] }, ['scopes.1']],
        ['no scopes', { ...nativeApp, scopes: [] }, ['scopes']],
        ['an unknown grant', { ...nativeApp, grant_types: ['password'] }, ['grant_types.0']],
        ['client_credentials for a public client', { ...nativeApp, grant_types: ['authorization_code', 'client_credentials'] }, ['grant_types.1']],
        ['a back-channel URI on plain http', { ...partnerSite, backchannel_logout_uri: 'http://partner.example/logout' }, ['backchannel_logout_uri']],
        ['a back-channel URI with a fragment', { ...partnerSite, backchannel_logout_uri: 'https://partner.example/logout#x' }, ['backchannel_logout_uri']],
        ['an unknown ID token algorithm', { ...partnerSite, id_token_signed_response_alg: 'HS256' }, ['id_token_signed_response_alg']],
        ['21 redirect URIs', { ...partnerSite, redirect_uris: Array.from({ length: 21 }, (_, i) => `https://partner.example/${i}`) }, ['redirect_uris']],
        ['a URI over 2000 characters', { ...partnerSite, redirect_uris: [`https://partner.example/${'a'.repeat(2000)}`] }, ['redirect_uris.0']],
        ['a member the registry does not know', { ...nativeApp, logo_uri: 'https://a.example/logo.png' }, ['logo_uri']],
        ['several problems at once', { ...nativeApp, name: '', redirect_uris: ['http://evil.example/cb'], pkce_required: false }, ['name', 'pkce_required', 'redirect_uris.0']],
      ]
      const before = (await registry().list()).length
      for (const [label, body, fields] of cases) {
        const response = await as(keys.write, 'POST', '/admin/clients', body)
        assert.equal(response.statusCode, 400, `${label}: ${response.body}`)
        assert.equal(response.json().error.code, 'VALIDATION_ERROR', label)
        assert.deepEqual(fieldsOf(response), fields, `${label}: ${response.body}`)
      }
      assert.equal((await registry().list()).length, before, 'nothing was stored')

      // The registry judges values by itself too (the CLI passes them straight through).
      for (const [input, field] of [
        [{ ...nativeApp, type: 'secret' }, 'type'],
        [{ ...nativeApp, scopes: ['root'] }, 'scopes.0'],
        [{ ...nativeApp, grant_types: ['implicit'] }, 'grant_types.0'],
        [{ ...partnerSite, token_endpoint_auth_method: 'client_secret_jwt' }, 'token_endpoint_auth_method'],
        [{ ...partnerSite, id_token_signed_response_alg: 'none' }, 'id_token_signed_response_alg'],
      ] as const) {
        await assert.rejects(registry().create(input as never), (error: { code: string; details: { field: string }[] }) => {
          assert.equal(error.code, 'VALIDATION_ERROR')
          assert.deepEqual(error.details.map((d) => d.field), [field])
          return true
        })
      }
    })

    test('what is accepted: loopback on any host form, post-logout and back-channel URIs, private_key_jwt with either key source', async () => {
      const loopback = await create({ name: 'CLI tool', type: 'public', redirect_uris: ['http://127.0.0.1/callback', 'http://[::1]:8080/callback', 'http://localhost/cb'], grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'] })
      assert.deepEqual(loopback.client.grant_types, ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'])
      const site = await create({ ...partnerSite, post_logout_redirect_uris: ['https://partner.example/bye'], backchannel_logout_uri: 'https://partner.example/logout', first_party: true, pkce_required: false, token_endpoint_auth_method: 'client_secret_post', id_token_signed_response_alg: 'EdDSA' })
      assert.equal(site.client.pkce_required, false)
      assert.equal(site.client.first_party, true)
      const jwk = publicJwk()
      const keyed = await create({ ...partnerSite, token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [jwk] } })
      assert.deepEqual(keyed.client.jwks, { keys: [jwk] })
      const byUri = await create({ ...partnerSite, token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'https://partner.example/jwks.json' })
      assert.equal(byUri.client.jwks_uri, 'https://partner.example/jwks.json')
      const machine = await create({ name: 'Nightly job', type: 'confidential', grant_types: ['client_credentials'], scopes: ['watchlists:read'] })
      assert.deepEqual(machine.client.redirect_uris, [])
      // Repeats collapse rather than being refused.
      const repeated = await create({ ...nativeApp, scopes: ['openid', 'openid'], redirect_uris: ['com.example.app:/callback', 'com.example.app:/callback'] })
      assert.deepEqual([repeated.client.scopes, repeated.client.redirect_uris], [['openid'], ['com.example.app:/callback']])
    })

    test('clients routes need clients:read or clients:write; other keys get 403 INSUFFICIENT_SCOPE', async () => {
      const { client } = await create(partnerSite)
      const id = client.client_id
      const routes: { method: 'GET' | 'POST' | 'PATCH' | 'DELETE'; path: string; scope: 'read' | 'write'; body?: unknown }[] = [
        { method: 'GET', path: '/admin/clients', scope: 'read' },
        { method: 'GET', path: `/admin/clients/${id}`, scope: 'read' },
        { method: 'POST', path: '/admin/clients', scope: 'write', body: partnerSite },
        { method: 'PATCH', path: `/admin/clients/${id}`, scope: 'write', body: { name: 'Renamed' } },
        { method: 'POST', path: `/admin/clients/${id}/secret`, scope: 'write' },
        { method: 'DELETE', path: `/admin/clients/${id}`, scope: 'write' },
      ]
      for (const route of routes) {
        const label = `${route.method} ${route.path}`
        for (const wrong of [keys.users, keys.audit, route.scope === 'read' ? keys.write : keys.read]) {
          const refused = await as(wrong, route.method, route.path, route.body)
          assert.equal(refused.statusCode, 403, label)
          assert.equal(refused.json().error.code, 'INSUFFICIENT_SCOPE', label)
          assert.match(String(refused.headers['www-authenticate']), new RegExp(`scope="clients:${route.scope}"`))
        }
        assert.equal((await as(undefined, route.method, route.path, route.body)).json().error.code, 'AUTH_REQUIRED', label)
        const done = await as(keys[route.scope], route.method, route.path, route.body)
        assert.equal(done.statusCode, route.method === 'POST' && route.path === '/admin/clients' ? 201 : 200, `${label}: ${done.body}`)
      }
    })

    test('OpenAPI documents the six clients routes under tag admin, each with its scope', async () => {
      const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json()
      const routes = Object.entries(doc.paths as Record<string, Record<string, { operationId: string; security: { apiKey: string[] }[]; tags: string[] }>>)
        .filter(([path]) => path.includes('/admin/clients'))
        .flatMap(([path, methods]) => Object.entries(methods).map(([method, op]) => `${method.toUpperCase()} ${path.slice(t.base.length)} ${op.operationId} ${op.tags.join()} ${op.security[0]!.apiKey.join()}`))
      assert.deepEqual(routes.sort(), [
        'DELETE /admin/clients/{client_id} adminDeleteClient admin clients:write',
        'GET /admin/clients adminListClients admin clients:read',
        'GET /admin/clients/{client_id} adminGetClient admin clients:read',
        'PATCH /admin/clients/{client_id} adminUpdateClient admin clients:write',
        'POST /admin/clients adminCreateClient admin clients:write',
        'POST /admin/clients/{client_id}/secret adminRotateClientSecret admin clients:write',
      ])
    })

    test('PATCH replaces the members given, judges the merged result, and never changes the type', async () => {
      const { client } = await create({ ...partnerSite, backchannel_logout_uri: 'https://partner.example/logout' })
      const path = `/admin/clients/${client.client_id}`
      t.clock.advance(5)
      const renamed = await as(keys.write, 'PATCH', path, { name: 'Partner portal', scopes: ['openid', 'profile'], backchannel_logout_uri: null })
      assert.equal(renamed.statusCode, 200, renamed.body)
      const patched = renamed.json().data.client
      assert.deepEqual(patched, { ...client, name: 'Partner portal', scopes: ['openid', 'profile'], backchannel_logout_uri: null, updated_at: new Date(t.clock.now()).toISOString() })
      assert.deepEqual((await as(keys.read, 'GET', path)).json().data.client, patched)

      const refusals: [unknown, string[]][] = [
        [{ type: 'public' }, ['type']],
        [{ token_endpoint_auth_method: 'none' }, ['token_endpoint_auth_method']],
        [{ redirect_uris: [] }, ['redirect_uris']],
        [{ token_endpoint_auth_method: 'private_key_jwt' }, ['jwks']],
        [{}, ['body']],
        [{ client_id: 'mine' }, ['client_id']],
      ]
      for (const [body, fields] of refusals) {
        const response = await as(keys.write, 'PATCH', path, body)
        assert.equal(response.statusCode, 400, `${JSON.stringify(body)}: ${response.body}`)
        assert.deepEqual(fieldsOf(response), fields, JSON.stringify(body))
      }
      // The same type is no change; moving to private_key_jwt and back needs its keys set and cleared.
      assert.equal((await as(keys.write, 'PATCH', path, { type: 'confidential' })).statusCode, 200)
      const jwk = publicJwk()
      assert.equal((await as(keys.write, 'PATCH', path, { token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [jwk] } })).statusCode, 200)
      assert.deepEqual(fieldsOf(await as(keys.write, 'PATCH', path, { token_endpoint_auth_method: 'client_secret_post' })), ['jwks'])
      const back = await as(keys.write, 'PATCH', path, { token_endpoint_auth_method: 'client_secret_post', jwks: null })
      assert.deepEqual([back.json().data.client.token_endpoint_auth_method, back.json().data.client.jwks], ['client_secret_post', null])
      // Dropping the code flow makes redirect URIs optional.
      const machine = await as(keys.write, 'PATCH', path, { grant_types: ['client_credentials'], redirect_uris: [] })
      assert.equal(machine.statusCode, 200, machine.body)
      assert.deepEqual((await registry().findForLibrary(client.client_id))!.response_types, [])

      const publicClient = (await create(nativeApp)).client
      assert.deepEqual(fieldsOf(await as(keys.write, 'PATCH', `/admin/clients/${publicClient.client_id}`, { pkce_required: false })), ['pkce_required'])
      assert.deepEqual(fieldsOf(await as(keys.write, 'PATCH', `/admin/clients/${publicClient.client_id}`, { type: 'confidential' })), ['type'])
      assert.equal((await as(keys.write, 'PATCH', '/admin/clients/no-such-client', { name: 'x' })).json().error.code, 'NOT_FOUND')
    })

    test('rotating the secret answers a new one once; the old one is gone at once', async () => {
      const { client, client_secret } = await create(partnerSite)
      const path = `/admin/clients/${client.client_id}/secret`
      assert.equal((await registry().findForLibrary(client.client_id))!.client_secret, client_secret)
      t.clock.advance(1)
      const rotated = await as(keys.write, 'POST', path)
      assert.equal(rotated.statusCode, 200, rotated.body)
      const { client: after, client_secret: fresh } = rotated.json().data
      assert.match(fresh, /^[A-Za-z0-9_-]{43}$/)
      assert.notEqual(fresh, client_secret)
      assert.equal(after.client_id, client.client_id)
      const library = await registry().findForLibrary(client.client_id)
      assert.equal(library!.client_secret, fresh)
      const row = await kysely().selectFrom('op_clients').selectAll().where('client_id', '=', client.client_id).executeTakeFirstOrThrow()
      assert.ok(!JSON.stringify(row).includes(fresh) && !JSON.stringify(row).includes(client_secret!))

      const publicClient = (await create(nativeApp)).client
      const refused = await as(keys.write, 'POST', `/admin/clients/${publicClient.client_id}/secret`)
      assert.equal(refused.json().error.code, 'VALIDATION_ERROR')
      assert.equal((await registry().findForLibrary(publicClient.client_id))!.client_secret, undefined)
      assert.equal((await as(keys.write, 'POST', '/admin/clients/no-such-client/secret')).json().error.code, 'NOT_FOUND')
    })

    test('the library\'s view of a client is kept per stored version: the same row gives the same view, any change of the row a new one at once', async () => {
      const { client, client_secret } = await create(partnerSite)
      const id = client.client_id as string
      const first = await registry().findForLibrary(id)
      assert.equal(first!.client_secret, client_secret)
      assert.ok(Object.isFrozen(first) && Object.isFrozen(first!.redirect_uris), 'a view handed out again cannot be changed by whoever holds it')
      assert.equal(await registry().findForLibrary(id), first, 'the unchanged row is not opened and parsed again')
      // Another instance (or the CLI) changes the row behind this one's back: the next read sees it.
      const row = await kysely().selectFrom('op_clients').selectAll().where('client_id', '=', id).executeTakeFirstOrThrow()
      const metadata = { ...JSON.parse(row.metadata), name: 'Renamed elsewhere' }
      await kysely().updateTable('op_clients').set({ metadata: JSON.stringify(metadata) }).where('client_id', '=', id).execute()
      assert.equal((await registry().findForLibrary(id))!.client_name, 'Renamed elsewhere')
      const { client_secret: fresh } = (await as(keys.write, 'POST', `/admin/clients/${id}/secret`)).json().data
      assert.equal((await registry().findForLibrary(id))!.client_secret, fresh)
      assert.equal((await as(keys.write, 'DELETE', `/admin/clients/${id}`)).statusCode, 200)
      assert.equal(await registry().findForLibrary(id), undefined, 'a removed client is gone at once')
    })

    test('removing a client removes every provider record of it, and only of it', async () => {
      const doomed = (await create(partnerSite)).client.client_id
      const kept = (await create(nativeApp)).client.client_id
      const record = (clientId: string, idHash: string, model: string) => ({
        model, id_hash: idHash, client_id: clientId, payload: 'enc:v1:x.y.z', created_at: t.clock.now(), expires_at: t.clock.now() + 3600_000,
      })
      await kysely().insertInto('op_records').values([
        record(doomed, `grant-${doomed}`, 'Grant'),
        record(doomed, `refresh-${doomed}`, 'RefreshToken'),
        record(kept, `grant-${kept}`, 'Grant'),
      ]).execute()
      const recordsOf = async (clientId: string) => (await kysely().selectFrom('op_records').select('id_hash').where('client_id', '=', clientId).execute()).length

      const removed = await as(keys.write, 'DELETE', `/admin/clients/${doomed}`)
      assert.equal(removed.statusCode, 200, removed.body)
      assert.deepEqual(removed.json().data, { client_id: doomed, deleted: true })
      assert.equal(await recordsOf(doomed), 0)
      assert.equal(await recordsOf(kept), 1)
      assert.equal(await registry().findForLibrary(doomed), undefined)
      assert.equal((await as(keys.read, 'GET', `/admin/clients/${doomed}`)).json().error.code, 'NOT_FOUND')
      assert.equal((await as(keys.write, 'DELETE', `/admin/clients/${doomed}`)).json().error.code, 'NOT_FOUND')
    })

    test('every change is an audit event naming the key and the client, and no event holds a secret', async () => {
      const { client, client_secret } = await create(partnerSite)
      const id = client.client_id
      // A second apart each, so newest-first is one order.
      t.clock.advance(1)
      await as(keys.write, 'PATCH', `/admin/clients/${id}`, { name: 'Audited' })
      t.clock.advance(1)
      const rotated = (await as(keys.write, 'POST', `/admin/clients/${id}/secret`)).json().data.client_secret as string
      t.clock.advance(1)
      await as(keys.write, 'DELETE', `/admin/clients/${id}`)
      const events = (await as(keys.audit, 'GET', '/admin/events?limit=100')).json().data.events.filter((e: { reason: string | null }) => e.reason === id)
      assert.deepEqual(events.map((e: { type: string }) => e.type), ['client.removed', 'client.secret_rotated', 'client.updated', 'client.created'])
      for (const event of events) {
        assert.equal(event.actor, `api_key:${writeKeyId}`)
        assert.equal(event.user_id, null)
      }
      const stored = JSON.stringify(await kysely().selectFrom('audit_events').selectAll().execute())
      assert.ok(!stored.includes(client_secret!) && !stored.includes(rotated))
    })

    test('findForLibrary: the metadata oidc-provider reads, with the native-app, response-type and extra fields', async () => {
      assert.equal(await registry().findForLibrary('no-such-client'), undefined)

      const native = (await create({ ...nativeApp, redirect_uris: ['com.example.app:/callback', 'http://127.0.0.1/callback'], first_party: true, post_logout_redirect_uris: ['com.example.app:/bye'] })).client
      assert.deepEqual(await registry().findForLibrary(native.client_id), {
        client_id: native.client_id,
        client_name: 'iOS app',
        redirect_uris: ['com.example.app:/callback', 'http://127.0.0.1/callback'],
        post_logout_redirect_uris: ['com.example.app:/bye'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        application_type: 'native',
        scope: ALL_SCOPES.join(' '),
        id_token_signed_response_alg: 'RS256',
        first_party: true,
        pkce_required: true,
      })

      const { client: site, client_secret } = await create({ ...partnerSite, redirect_uris: ['https://partner.example/cb', 'http://localhost:3000/cb'], backchannel_logout_uri: 'https://partner.example/logout', pkce_required: false, scopes: ['openid', 'offline_access'], id_token_signed_response_alg: 'EdDSA' })
      assert.deepEqual(await registry().findForLibrary(site.client_id), {
        client_id: site.client_id,
        client_secret,
        client_name: 'Partner site',
        redirect_uris: ['https://partner.example/cb', 'http://localhost:3000/cb'],
        post_logout_redirect_uris: [],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
        application_type: 'web',
        scope: 'openid offline_access',
        id_token_signed_response_alg: 'EdDSA',
        backchannel_logout_uri: 'https://partner.example/logout',
        backchannel_logout_session_required: true,
        first_party: false,
        pkce_required: false,
      })

      const loopbackOnly = (await create({ name: 'Desktop', type: 'public', redirect_uris: ['http://[::1]/cb', 'http://localhost/cb'] })).client
      assert.equal((await registry().findForLibrary(loopbackOnly.client_id))!.application_type, 'native')
      const webPublic = (await create({ name: 'SPA', type: 'public', redirect_uris: ['https://spa.example/cb'] })).client
      assert.equal((await registry().findForLibrary(webPublic.client_id))!.application_type, 'web')

      const device = (await create({ name: 'TV', type: 'public', grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'] })).client
      const deviceMetadata = await registry().findForLibrary(device.client_id)
      assert.deepEqual([deviceMetadata!.response_types, deviceMetadata!.redirect_uris], [[], []])

      const jwk = publicJwk()
      const keyed = (await create({ ...partnerSite, token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [jwk] } })).client
      const keyedMetadata = await registry().findForLibrary(keyed.client_id)
      assert.deepEqual(keyedMetadata!.jwks, { keys: [jwk] })
      assert.equal('jwks_uri' in keyedMetadata!, false)
      const byUri = (await create({ ...partnerSite, token_endpoint_auth_method: 'private_key_jwt', jwks_uri: 'https://partner.example/jwks.json' })).client
      const byUriMetadata = await registry().findForLibrary(byUri.client_id)
      assert.equal(byUriMetadata!.jwks_uri, 'https://partner.example/jwks.json')
      assert.equal('jwks' in byUriMetadata!, false)

      // Read afresh each time: a change is seen at once.
      await registry().update(native.client_id, { first_party: false, scopes: ['openid'] })
      const changed = await registry().findForLibrary(native.client_id)
      assert.deepEqual([changed!.first_party, changed!.scope], [false, 'openid'])
    })

    test('the CLI: clients add|list|show|rotate-secret|remove on the server\'s database', async () => {
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      let io = capture()
      assert.equal(await runCli([
        'clients', 'add', '--name', 'Partner CLI', '--type', 'confidential',
        '--redirect-uri', 'https://partner.example/cb', '--redirect-uri', 'https://partner.example/cb2',
        '--scope', 'openid', '--scope', 'watchlists:read', '--grant', 'authorization_code', '--grant', 'device_code',
        '--post-logout-redirect-uri', 'https://partner.example/bye', '--backchannel-logout-uri', 'https://partner.example/logout',
        '--first-party', '--pkce-required=false', '--token-endpoint-auth-method', 'client_secret_post', '--id-token-alg', 'EdDSA',
      ], env, io), 0, io.stderr.join('\n'))
      const added = JSON.parse(io.stdout.join('\n'))
      assert.deepEqual(Object.keys(added), ['client', 'client_secret'])
      const id = added.client.client_id as string
      assert.deepEqual(added.client, (await as(keys.read, 'GET', `/admin/clients/${id}`)).json().data.client, 'the API shows what the CLI made')
      assert.deepEqual(added.client.grant_types, ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'])
      assert.deepEqual([added.client.first_party, added.client.pkce_required, added.client.token_endpoint_auth_method, added.client.id_token_signed_response_alg], [true, false, 'client_secret_post', 'EdDSA'])
      assert.match(io.stderr.join('\n'), /only time its secret is shown/)
      // The server opens what the CLI sealed (the same key-encryption key on the same data directory).
      assert.equal((await registry().findForLibrary(id))!.client_secret, added.client_secret)

      io = capture()
      assert.equal(await runCli(['clients', 'add', '--name', 'App', '--type', 'public', '--redirect-uri', 'com.example.cli:/cb'], env, io), 0)
      const publicAdded = JSON.parse(io.stdout.join('\n'))
      assert.deepEqual(Object.keys(publicAdded), ['client'])

      io = capture()
      assert.equal(await runCli(['clients', 'list'], env, io), 0)
      // A header row, then columns padded with two spaces or more.
      const cells = (line: string) => line.trim().split(/\s{2,}/)
      assert.deepEqual(cells(io.stdout[0]!), ['client_id', 'name', 'type', 'first_party', 'dynamic'])
      assert.ok(io.stdout.some((line) => JSON.stringify(cells(line)) === JSON.stringify([id, 'Partner CLI', 'confidential', 'true', 'false'])), io.stdout.join('\n'))
      assert.ok(io.stdout.some((line) => JSON.stringify(cells(line)) === JSON.stringify([publicAdded.client.client_id, 'App', 'public', 'false', 'false'])))
      io = capture()
      assert.equal(await runCli(['clients', 'list', '--json'], env, io), 0)
      const listed = JSON.parse(io.stdout.join('\n')) as { client_id: string }[]
      assert.deepEqual(listed, (await as(keys.read, 'GET', '/admin/clients')).json().data.clients)
      assert.ok(!io.stdout.join('').includes(added.client_secret))

      io = capture()
      assert.equal(await runCli(['clients', 'show', id], env, io), 0)
      assert.deepEqual(JSON.parse(io.stdout.join('\n')), { client: added.client })

      io = capture()
      assert.equal(await runCli(['clients', 'rotate-secret', id], env, io), 0)
      const rotated = JSON.parse(io.stdout.join('\n'))
      assert.deepEqual(Object.keys(rotated), ['client', 'client_secret'])
      assert.notEqual(rotated.client_secret, added.client_secret)
      assert.equal((await registry().findForLibrary(id))!.client_secret, rotated.client_secret)

      await kysely().insertInto('op_records').values({ model: 'Grant', id_hash: `cli-${id}`, client_id: id, payload: 'enc:v1:x.y.z', created_at: t.clock.now(), expires_at: t.clock.now() + 60_000 }).execute()
      io = capture()
      assert.equal(await runCli(['clients', 'remove', id], env, io), 0)
      assert.match(io.stdout[0]!, new RegExp(`client ${id}: removed`))
      assert.equal((await as(keys.read, 'GET', `/admin/clients/${id}`)).json().error.code, 'NOT_FOUND')
      assert.equal((await kysely().selectFrom('op_records').select('id_hash').where('client_id', '=', id).execute()).length, 0)
      const cliEvents = await kysely().selectFrom('audit_events').select(['type', 'actor']).where('reason', '=', id).orderBy('at').execute()
      assert.deepEqual(cliEvents.map((e) => e.type).sort(), ['client.created', 'client.removed', 'client.secret_rotated'])
      assert.ok(cliEvents.every((e) => e.actor === 'cli'))

      // Failures: exit 1 with one line naming the fields; usage errors: exit 2 with the usage.
      io = capture()
      assert.equal(await runCli(['clients', 'show', id], env, io), 1)
      assert.deepEqual(io.stderr, ['portcullis: There is no client with this client_id.'])
      io = capture()
      assert.equal(await runCli(['clients', 'add', '--name', 'Bad', '--type', 'public', '--redirect-uri', 'http://evil.example/cb', '--scope', 'root'], env, io), 1)
      assert.equal(io.stderr.length, 1)
      assert.match(io.stderr[0]!, /^portcullis: The client registration is not valid: .*scopes\.0 .*redirect_uris\.0 /)
      io = capture()
      assert.equal(await runCli(['clients', 'rotate-secret', publicAdded.client.client_id], env, io), 1)
      assert.match(io.stderr[0]!, /public client/)
      for (const argv of [
        ['clients', 'add', '--type', 'public'],
        ['clients', 'add', '--name', 'x'],
        ['clients', 'add', '--name', 'x', '--type', 'public', '--pkce-required=maybe'],
        ['clients', 'add', '--name', 'x', '--type', 'public', '--colour', 'blue'],
        ['clients', 'show'],
        ['clients', 'remove', 'a', 'b'],
        ['clients', 'list', 'extra'],
      ]) {
        io = capture()
        assert.equal(await runCli(argv, env, io), 2, argv.join(' '))
        assert.match(io.stderr[1]!, /^usage: portcullis clients/, argv.join(' '))
      }
    })
  })
}

for (const engine of ENGINES) {
  test(`keys rewrap moves client secrets to the new KEY_ENCRYPTION_KEY on ${engine}`, async () => {
    const storage = await createStorage(engine)
    const [oldKek, nextKek] = [randomBytes(32).toString('base64'), randomBytes(32).toString('base64')]
    const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
    try {
      // The CLI creates a database only when told to (migrate or serve).
      assert.equal(await runCli(['migrate'], { ...env, KEY_ENCRYPTION_KEY: oldKek }, capture()), 0)
      const io = capture()
      assert.equal(await runCli(['clients', 'add', '--name', 'Rewrapped', '--type', 'confidential', '--redirect-uri', 'https://a.example/cb'], { ...env, KEY_ENCRYPTION_KEY: oldKek }, io), 0)
      const { client, client_secret } = JSON.parse(io.stdout.join('\n'))
      assert.equal(await runCli(['keys', 'rewrap'], { ...env, OLD_KEY_ENCRYPTION_KEY: oldKek, KEY_ENCRYPTION_KEY: nextKek }, capture()), 0)
      const next = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: nextKek } })
      try {
        assert.equal((await next.app.services.clients.findForLibrary(client.client_id))!.client_secret, client_secret)
      } finally {
        await next.close()
      }
    } finally {
      await storage.drop()
    }
  })
}

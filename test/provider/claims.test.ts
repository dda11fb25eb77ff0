import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import * as client from 'openid-client'
import { claimsChanged } from '../../src/authz/claims.ts'
import type { ClientCreate } from '../../src/provider/schemas.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'

/**
 * What the OpenID provider's tokens say a user may do (API.md, "Roles, permissions and
 * organisations"): its RFC 9068 access tokens carry the user's global roles, permissions,
 * app_metadata and claims version like Portcullis's own, asked through the same seam; the scope
 * `organizations` adds the user's organisations to the ID token and userinfo. Driven by a real
 * relying party (openid-client) and the provider's own pages, as test/provider/provider.test.ts does.
 */

const REDIRECT_URI = 'https://rp.example/cb'

type User = Awaited<ReturnType<typeof registerVerifyLogin>>
type Organizations = { id: string; name: string; roles: string[] }[]

for (const engine of ENGINES) {
  describe(`the OpenID provider's claims on ${engine}`, () => {
    let t: TestApp
    let issuer: string
    let api: string
    let server: client.ServerMetadata

    before(async () => {
      const port = await freePort()
      issuer = `http://localhost:${port}`
      api = `${issuer}/api/v1`
      t = await startTestApp(engine, { env: { PUBLIC_URL: issuer } })
      await t.app.listen({ port, host: '127.0.0.1' })
      server = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as client.ServerMetadata
    })
    after(async () => {
      await t?.close()
    })

    /** A public client an operator registered; `organizations` only when named. */
    const register = async (fields: Partial<ClientCreate> = {}) =>
      (await t.app.services.clients.create({ name: 'Team app', type: 'public', redirect_uris: [REDIRECT_URI], ...fields } as ClientCreate)).client.client_id

    const rp = (clientId: string) => {
      const config = new client.Configuration(server, clientId, {}, client.None())
      client.allowInsecureRequests(config)
      return config
    }

    /** The person's side of a code flow with PKCE (sign-in page, password, consent), then the code exchange. */
    async function codeFlow(config: client.Configuration, user: User, scope: string) {
      const browser = new OpBrowser(issuer)
      const verifier = client.randomPKCECodeVerifier()
      const checks = { pkceCodeVerifier: verifier, expectedState: client.randomState(), expectedNonce: client.randomNonce() }
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: REDIRECT_URI, scope, prompt: 'consent',
        code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
        state: checks.expectedState, nonce: checks.expectedNonce,
      })
      let page: Page = await browser.go(url.href)
      page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/consent'))) page = await browser.submit(formOf(page, { actionEndsWith: '/consent' }), {})
      assert.ok(page.location?.startsWith(REDIRECT_URI), `expected the redirect to the client, got ${page.status}: ${page.body.slice(0, 300)}`)
      return client.authorizationCodeGrant(config, new URL(page.location!), checks)
    }

    /** A change to the user's claims as an operator's tool makes it: one transaction, the version moved, the feed told. */
    async function changeClaims(userId: string, write: (trx: Parameters<typeof claimsChanged>[0]) => Promise<void>) {
      const { db, feed } = t.app.services
      const changes = await db.kysely.transaction().execute(async (trx) => {
        await write(trx)
        return claimsChanged(trx, [userId])
      })
      feed.applyLocally(changes)
    }

    /** A user with a global role, app_metadata, and two organisations (owner of the first joined, member of the second). */
    async function teamUser() {
      const user = await registerVerifyLogin(t)
      const role = `analyst-${randomUUID().slice(0, 8)}`
      const first = { id: randomUUID(), name: 'Acme Research' }
      const second = { id: randomUUID(), name: 'Book club' }
      const now = Date.now()
      await changeClaims(user.userId, async (trx) => {
        await trx.insertInto('roles').values({ name: role, description: null, permissions: 'reports:read reports:export', builtin: 0, created_at: now, updated_at: now }).execute()
        await trx.insertInto('user_roles').values({ user_id: user.userId, role, created_at: now }).execute()
        await trx.updateTable('users').set({ app_metadata: JSON.stringify({ plan: 'pro', seats: 3 }) }).where('id', '=', user.userId).execute()
        // The second organisation is made first: the claim lists by the time the user joined, not made.
        for (const org of [second, first]) await trx.insertInto('organizations').values({ ...org, created_at: now, updated_at: now }).execute()
        await trx.insertInto('memberships').values({ organization_id: first.id, user_id: user.userId, roles: 'owner', joined_at: now - 1000 }).execute()
        await trx.insertInto('memberships').values({ organization_id: second.id, user_id: user.userId, roles: 'member', joined_at: now }).execute()
      })
      return { user, role, first, second }
    }

    test('the access token carries roles, permissions, app_metadata and cv; with `organizations` the ID token and userinfo list the organisations', async () => {
      const { user, role, first, second } = await teamUser()
      const config = rp(await register({ scopes: ['openid', 'offline_access', 'watchlists:read', 'organizations'] }))
      const tokens = await codeFlow(config, user, 'openid offline_access watchlists:read organizations')
      const expected: Organizations = [{ ...first, roles: ['owner'] }, { ...second, roles: ['member'] }]
      assert.deepEqual(tokens.claims()!.organizations, expected)
      const info = await client.fetchUserInfo(config, tokens.access_token, user.userId)
      assert.deepEqual(info.organizations, expected)

      const jwt = (await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })).access_token
      const claims = decodeJwt(jwt)
      const version = (await t.app.services.db.kysely.selectFrom('users').select('claims_version').where('id', '=', user.userId).executeTakeFirstOrThrow()).claims_version
      assert.deepEqual(claims.roles, [role])
      assert.deepEqual(claims.permissions, ['reports:export', 'reports:read'])
      assert.deepEqual(claims.app_metadata, { plan: 'pro', seats: 3 })
      assert.equal(claims.cv, version)
      assert.ok(version > 0)
      // No active organisation in a provider token, and the organisations only where the scope puts them.
      for (const absent of ['org_id', 'org_roles', 'org_permissions', 'organizations']) assert.equal(claims[absent], undefined, absent)

      // The API takes it, and the organisation's lists answer to the membership (member: watchlists:read).
      assert.equal((await t.get('/watchlists', jwt)).statusCode, 200)
      const shared = await t.get(`/watchlists?organization_id=${second.id}`, jwt)
      assert.equal(shared.statusCode, 200, shared.body)
      assert.equal((await t.get(`/watchlists?organization_id=${randomUUID()}`, jwt)).statusCode, 404)
    })

    test('without the scope neither the ID token nor userinfo says anything of organisations; a client not registered for it cannot ask', async () => {
      const { user } = await teamUser()
      const config = rp(await register({ scopes: ['openid', 'offline_access', 'email', 'watchlists:read', 'organizations'] }))
      const tokens = await codeFlow(config, user, 'openid email')
      assert.equal(tokens.claims()!.organizations, undefined)
      assert.deepEqual(await client.fetchUserInfo(config, tokens.access_token, user.userId), { sub: user.userId, email: user.email, email_verified: true })

      // The default registration leaves `organizations` out: the authorization request is refused.
      const plain = rp(await register())
      const verifier = client.randomPKCECodeVerifier()
      const url = client.buildAuthorizationUrl(plain, {
        redirect_uri: REDIRECT_URI, scope: 'openid organizations', state: 's',
        code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
      })
      const refused = await new OpBrowser(issuer).go(url.href)
      assert.ok(refused.location?.startsWith(REDIRECT_URI), `expected an error redirect, got ${refused.status}`)
      assert.equal(new URL(refused.location!).searchParams.get('error'), 'invalid_scope')
    })

    test('a user with no roles nor app_metadata: the access token carries only cv of these', async () => {
      const user = await registerVerifyLogin(t)
      const config = rp(await register())
      const tokens = await codeFlow(config, user, 'openid offline_access watchlists:read')
      const claims = decodeJwt((await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })).access_token)
      for (const absent of ['roles', 'permissions', 'app_metadata', 'organizations']) assert.equal(claims[absent], undefined, absent)
      assert.equal(claims.cv, 0)
    })

    test('after the user\'s claims change, the provider\'s access token answers TOKEN_EXPIRED at the API; a refresh brings the new claims', async () => {
      const { user, role } = await teamUser()
      const config = rp(await register())
      const tokens = await codeFlow(config, user, 'openid offline_access watchlists:read')
      const older = await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })
      assert.equal((await t.get('/watchlists', older.access_token)).statusCode, 200)

      await changeClaims(user.userId, async (trx) => {
        await trx.deleteFrom('user_roles').where('user_id', '=', user.userId).where('role', '=', role).execute()
      })
      const stale = await t.get('/watchlists', older.access_token)
      assert.equal(stale.statusCode, 401, stale.body)
      assert.equal(stale.json().error.code, 'TOKEN_EXPIRED')

      const newer = await client.refreshTokenGrant(config, older.refresh_token!, { resource: api })
      const claims = decodeJwt(newer.access_token)
      assert.equal(claims.roles, undefined, 'the role is gone')
      assert.ok((claims.cv as number) > (decodeJwt(older.access_token).cv as number))
      assert.equal((await t.get('/watchlists', newer.access_token)).statusCode, 200)
    })
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, jwtVerify } from 'jose'
import * as client from 'openid-client'
import { sql } from 'kysely'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, within, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, headingOf, OpBrowser, type Page } from '../helpers/op-browser.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'
import { mailText } from '../helpers/mail.ts'
import { oathtool } from '../helpers/totp.ts'
import { rotateSigningKeys } from '../../src/auth/keys.ts'
import type { ClientCreate } from '../../src/provider/schemas.ts'

/**
 * Portcullis as an OpenID provider, end to end as a certification suite would drive it (docs/provider.md,
 * "Portcullis as an OpenID provider"): one listening app per engine, a real relying party
 * (openid-client), and a browser (test/helpers/op-browser.ts) on the provider's pages.
 */

const REDIRECT_URI = 'https://rp.example/cb'
const LOGGED_OUT_URI = 'https://rp.example/logged-out'
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
/** RFC 8628 section 6.1's 20 consonants, shown as XXXX-XXXX. */
const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/

type User = Awaited<ReturnType<typeof registerVerifyLogin>>

/** The error an OAuth endpoint answered (through openid-client), or a failed assertion when it answered success. */
async function oauthError(call: Promise<unknown>): Promise<{ error: string; status: number; description: string | undefined }> {
  try {
    await call
  } catch (error) {
    if (error instanceof client.ResponseBodyError) return { error: error.error, status: error.status, description: error.error_description }
    // A 401 with a challenge (invalid_client after HTTP Basic): the error is in the body all the same.
    if (error instanceof client.WWWAuthenticateChallengeError) {
      const body = (await error.response.json()) as { error: string; error_description?: string }
      return { error: body.error, status: error.status, description: body.error_description }
    }
    throw error
  }
  return assert.fail('expected an OAuth error answer')
}

for (const engine of ENGINES) {
  describe(`Portcullis as an OpenID provider on ${engine}`, () => {
    let t: TestApp
    let issuer: string
    let api: string
    let server: client.ServerMetadata

    /** A client's Back-Channel Logout endpoint: what it was sent, and whether it answers 200 or 500 for now. */
    const receiver = { server: undefined as Server | undefined, url: '', tokens: [] as string[], failing: false }
    /** An upstream identity provider, for "Continue with ..." on the sign-in page. */
    let upstream: TestProvider

    before(async () => {
      receiver.server = createServer((request, response) => {
        let body = ''
        request.on('data', (chunk) => (body += chunk))
        request.on('end', () => {
          if (receiver.failing) return response.writeHead(500).end()
          receiver.tokens.push(new URLSearchParams(body).get('logout_token') ?? '')
          response.writeHead(200).end()
        })
      })
      await new Promise<void>((resolve) => receiver.server!.listen(0, '127.0.0.1', resolve))
      receiver.url = `http://127.0.0.1:${(receiver.server.address() as AddressInfo).port}/backchannel`
      const port = await freePort()
      issuer = `http://localhost:${port}`
      api = `${issuer}/api/v1`
      upstream = await startTestProvider({ redirectUris: [`${api}/auth/oidc/test/callback`] })
      t = await startTestApp(engine, {
        env: { PUBLIC_URL: issuer, OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: upstream.issuer, OIDC_TEST_CLIENT_ID: upstream.clientId, OIDC_TEST_CLIENT_SECRET: upstream.clientSecret, OIDC_TEST_LABEL: 'Upstream ID' },
      })
      await t.app.listen({ port, host: '127.0.0.1' })
      const discovered = await fetch(`${issuer}/.well-known/openid-configuration`)
      assert.equal(discovered.status, 200)
      server = (await discovered.json()) as client.ServerMetadata
    })
    after(async () => {
      await t?.close()
      receiver.server?.close()
      await upstream?.close()
    })

    /** A client registered by an operator: public by default, for REDIRECT_URI, every scope. */
    const register = async (fields: Partial<ClientCreate> = {}) => {
      const { client: registered, client_secret } = await t.app.services.clients.create({
        name: 'Partner app',
        type: 'public',
        redirect_uris: [REDIRECT_URI],
        ...fields,
      } as ClientCreate)
      return { clientId: registered.client_id, secret: client_secret }
    }

    /** The relying party's view of a client, on the discovered metadata (plain http allowed: this is localhost). */
    const rp = (clientId: string, auth: client.ClientAuth = client.None(), metadata: Partial<client.ClientMetadata> = {}) => {
      const config = new client.Configuration(server, clientId, metadata, auth)
      client.allowInsecureRequests(config)
      return config
    }

    /** An authorization request with PKCE S256, state and nonce, as a careful client makes it. */
    const authorization = async (config: client.Configuration, params: Record<string, string> = {}) => {
      const verifier = client.randomPKCECodeVerifier()
      const state = client.randomState()
      const nonce = client.randomNonce()
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: REDIRECT_URI,
        scope: 'openid',
        code_challenge: await client.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        state,
        nonce,
        ...params,
      })
      return { url: url.href, checks: { pkceCodeVerifier: verifier, expectedState: state, expectedNonce: nonce } }
    }

    /** `/oauth/interaction/{uid}` of a page at or below it. */
    const interactionOf = (page: Page) => {
      const match = /^\/oauth\/interaction\/[^/]+/.exec(new URL(page.url).pathname)
      assert.ok(match, `not an interaction page: ${page.url} (${page.status})`)
      return `${issuer}${match[0]}`
    }

    /**
     * Submits one of the interaction page's forms (login, mfa, consent, abort): the form must be on
     * the page, with its fields; it is posted to `/oauth/interaction/{uid}/{name}`, where the server
     * answers it (see the case on the forms' actions for where the page itself points them).
     */
    const post = (browser: OpBrowser, page: Page, name: string, typed: Record<string, string> = {}, headers: Record<string, string> = {}) => {
      // As a browser submits it: the form's own action, with what the person typed.
      return browser.submit(formOf(page, { actionEndsWith: `/${name}` }), typed, headers)
    }

    const hasSignInForm = (page: Page) => formsOf(page).some((form) => form.action.endsWith('/login')) && /name="password"/.test(page.body)
    const isSignInPage = (page: Page) => page.status === 200 && hasSignInForm(page)

    /** Consents when asked; returns the answer at the client's redirect URI. */
    const finish = async (browser: OpBrowser, page: Page): Promise<URL> => {
      if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/consent'))) page = await post(browser, page, 'consent')
      assert.ok(page.location && new URL(page.location).origin !== issuer, `expected a redirect to the client, got ${page.status} at ${page.url}: ${page.body.slice(0, 500)}`)
      return new URL(page.location)
    }

    /** The person's whole side of an authorization request: the sign-in page, the password, consent when asked. */
    const signIn = async (browser: OpBrowser, url: string, user: { email: string }): Promise<URL> => {
      const page = await browser.go(url)
      assert.ok(isSignInPage(page), `expected the sign-in page, got ${page.status} at ${page.url}`)
      return finish(browser, await post(browser, page, 'login', { email: user.email, password: PASSWORD }))
    }

    /**
     * A user signed in through a client: the tokens of the code exchange (with a refresh token:
     * offline_access needs prompt=consent, OpenID Connect Core section 11), and the browser still signed in.
     */
    const grantFor = async (config: client.Configuration, user: User, params: Record<string, string> = {}, browser = new OpBrowser(issuer)) => {
      const request = await authorization(config, { scope: 'openid offline_access', prompt: 'consent', ...params })
      const callback = await signIn(browser, request.url, user)
      const tokens = await client.authorizationCodeGrant(config, callback, request.checks)
      return { browser, tokens }
    }

    /** A signed-in user's authorization code for openid offline_access, not yet exchanged, at a client of its own. */
    const codeForNewClient = async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const request = await authorization(config, { scope: 'openid offline_access', prompt: 'consent' })
      const callback = await signIn(new OpBrowser(issuer), request.url, user)
      return { clientId, config, request, callback }
    }

    const userinfoStatus = async (accessToken: string) => (await fetch(server.userinfo_endpoint!, { headers: { authorization: `Bearer ${accessToken}` } })).status
    const watchlistsStatus = async (accessToken: string) => (await t.get('/watchlists', accessToken)).statusCode

    test('1. discovery advertises exactly what works, at both well-known addresses; the JWKS holds an RSA and an Ed25519 key', async () => {
      assert.equal(server.issuer, issuer)
      const endpoints = {
        authorization_endpoint: '/oauth/authorize',
        token_endpoint: '/oauth/token',
        userinfo_endpoint: '/oauth/userinfo',
        revocation_endpoint: '/oauth/revoke',
        introspection_endpoint: '/oauth/introspect',
        end_session_endpoint: '/oauth/end-session',
        device_authorization_endpoint: '/oauth/device/auth',
        jwks_uri: '/oauth/jwks',
      }
      for (const [name, path] of Object.entries(endpoints)) assert.equal(server[name], `${issuer}${path}`, name)
      assert.deepEqual(server.response_types_supported, ['code'])
      assert.deepEqual(server.code_challenge_methods_supported, ['S256'])
      assert.equal(server.authorization_response_iss_parameter_supported, true)
      for (const grant of ['authorization_code', 'refresh_token', DEVICE_GRANT, 'client_credentials']) assert.ok(server.grant_types_supported?.includes(grant), grant)
      // No implicit or hybrid flow, no password grant, no PAR, no DPoP.
      assert.ok(!server.grant_types_supported?.some((grant) => grant === 'implicit' || grant === 'password'))
      assert.equal(server.pushed_authorization_request_endpoint, undefined)
      assert.equal(server.require_pushed_authorization_requests, undefined)
      assert.equal(server.dpop_signing_alg_values_supported, undefined)
      assert.ok(server.id_token_signing_alg_values_supported?.includes('RS256'))
      assert.ok(server.id_token_signing_alg_values_supported?.includes('EdDSA'))

      const rfc8414 = await fetch(`${issuer}/.well-known/oauth-authorization-server`)
      assert.equal(rfc8414.status, 200)
      assert.deepEqual(await rfc8414.json(), server)

      const jwks = await fetch(server.jwks_uri!)
      assert.equal(jwks.status, 200)
      const { keys } = (await jwks.json()) as { keys: Record<string, unknown>[] }
      assert.ok(keys.some((key) => key.kty === 'RSA'), 'an RSA key (RS256 ID tokens)')
      assert.ok(keys.some((key) => key.kty === 'OKP' && key.crv === 'Ed25519'), 'an Ed25519 key (EdDSA)')
      for (const key of keys) for (const member of ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k']) assert.equal(key[member], undefined, `no private member ${member} is published`)
    })

    test('2. a public client with PKCE: iss in the answer; an RS256 ID token with nonce, auth_time, acr aal1, amr pwd, sub; userinfo by scope with the opaque token', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Single-page app' })
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)

      const request = await authorization(config, { scope: 'openid email' })
      const callback = await signIn(browser, request.url, user)
      assert.equal(callback.searchParams.get('iss'), issuer, 'RFC 9207')
      assert.equal(callback.searchParams.get('state'), request.checks.expectedState)
      const tokens = await client.authorizationCodeGrant(config, callback, request.checks)
      const header = decodeProtectedHeader(tokens.id_token!)
      assert.equal(header.alg, 'RS256', 'the default ID token algorithm')
      const claims = tokens.claims()!
      assert.equal(claims.sub, user.userId)
      assert.equal(claims.aud, clientId)
      assert.equal(claims.nonce, request.checks.expectedNonce)
      assert.equal(claims.acr, 'aal1')
      assert.deepEqual(claims.amr, ['pwd'])
      assert.equal(typeof claims.auth_time, 'number')
      assert.ok(Math.abs(claims.auth_time! - t.clock.now() / 1000) < 60, 'auth_time is the sign-in time')
      assert.equal(tokens.access_token.split('.').length, 1, 'without resource, the access token is opaque (for userinfo)')
      assert.equal(tokens.refresh_token, undefined, 'no offline_access, no refresh token')

      const byEmail = await client.fetchUserInfo(config, tokens.access_token, user.userId)
      assert.deepEqual(byEmail, { sub: user.userId, email: user.email, email_verified: true })

      // Another request of the same browser, for the profile: consent for it, and only its claims.
      const profile = await authorization(config, { scope: 'openid profile' })
      const page = await browser.go(profile.url)
      assert.ok(!isSignInPage(page), 'the browser is signed in already')
      const second = await client.authorizationCodeGrant(config, await finish(browser, page), profile.checks)
      assert.deepEqual(await client.fetchUserInfo(config, second.access_token, user.userId), { sub: user.userId, name: 'Test User' })
    })

    test('2b. every ID token carries sid, the provider session, also for a client without back-channel logout', {
    }, async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'No back-channel' })
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)
      const first = await authorization(config)
      const one = (await client.authorizationCodeGrant(config, await signIn(browser, first.url, user), first.checks)).claims()!
      assert.equal(typeof one.sid, 'string', `claims: ${Object.keys(one).join(', ')}`)
      const again = await authorization(config)
      const two = (await client.authorizationCodeGrant(config, await finish(browser, await browser.go(again.url)), again.checks)).claims()!
      assert.equal(two.sid, one.sid, 'one browser, one provider session')
    })

    test('3. a refresh with resource= gives an EdDSA at+jwt for the API: scope, client_id, sub, acr, auth_time, no sid; it reads watchlists, cannot write them, and opens nothing else', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Watchlist reader' })
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user, { scope: 'openid offline_access watchlists:read' })
      const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })
      const jwt = refreshed.access_token
      const header = decodeProtectedHeader(jwt)
      assert.equal(header.typ, 'at+jwt')
      assert.equal(header.alg, 'EdDSA')
      const claims = decodeJwt(jwt)
      assert.equal(claims.iss, issuer)
      assert.deepEqual([claims.aud].flat(), [api])
      assert.equal(claims.sub, user.userId)
      assert.equal(claims.client_id, clientId)
      assert.equal(claims.acr, 'aal1')
      assert.equal(typeof claims.auth_time, 'number')
      assert.equal(claims.sid, undefined, 'never a sid')
      const scopes = String(claims.scope).split(' ')
      assert.ok(scopes.includes('watchlists:read'))
      assert.ok(!scopes.includes('watchlists:write'))

      const read = await t.get('/watchlists', jwt)
      assert.equal(read.statusCode, 200, read.body)
      const write = await t.post('/watchlists', { name: 'Mine' }, jwt)
      assert.equal(write.statusCode, 403, write.body)
      assert.equal(write.json().error.code, 'INSUFFICIENT_SCOPE')
      assert.match(String(write.headers['www-authenticate']), /^Bearer .*error="insufficient_scope".*scope="watchlists:write"/)
      const me = await t.get('/auth/me', jwt)
      assert.equal(me.statusCode, 401, me.body)
      assert.equal(me.json().error.code, 'INVALID_TOKEN')
      const admin = await t.get('/admin/users', jwt)
      assert.equal(admin.statusCode, 401, admin.body)
      assert.equal(admin.json().error.code, 'INVALID_API_KEY')
    })

    test('4. prompt=none: login_required (with iss) without a session; a code without any page once the browser signed in', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)

      const silent = await authorization(config, { prompt: 'none' })
      const refused = await browser.go(silent.url)
      assert.equal(refused.status, 303)
      const answer = new URL(refused.location!)
      assert.equal(`${answer.origin}${answer.pathname}`, REDIRECT_URI)
      assert.equal(answer.searchParams.get('error'), 'login_required')
      assert.equal(answer.searchParams.get('iss'), issuer)
      assert.equal(answer.searchParams.get('state'), silent.checks.expectedState)

      await signIn(browser, (await authorization(config)).url, user)
      const again = await authorization(config, { prompt: 'none' })
      const seen = browser.history.length
      const page = await browser.go(again.url)
      assert.deepEqual(browser.history.slice(seen).map((hop) => hop.status).filter((status) => status < 300 || status >= 400), [], 'only redirects: no page was shown')
      const callback = new URL(page.location!)
      assert.ok(callback.searchParams.get('code'))
      const tokens = await client.authorizationCodeGrant(config, callback, again.checks)
      assert.equal(tokens.claims()!.sub, user.userId)
    })

    test('5. max_age=0 after a sign-in sends the browser to the sign-in page again', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const { browser } = await grantFor(config, user)
      const plain = await browser.go((await authorization(config)).url)
      assert.ok(plain.location && new URL(plain.location).searchParams.get('code'), 'signed in: without max_age, a code at once')
      const request = await authorization(config, { max_age: '0' })
      const page = await browser.go(request.url)
      assert.ok(isSignInPage(page), `expected the sign-in page, got ${page.status} at ${page.url} (location ${page.location})`)
      const tokens = await client.authorizationCodeGrant(config, await finish(browser, await post(browser, page, 'login', { email: user.email, password: PASSWORD })), request.checks)
      assert.equal(tokens.claims()!.sub, user.userId)
    })

    test('6. a reused authorization code is refused (invalid_grant) and revokes what its first use issued', async () => {
      const { config, request, callback } = await codeForNewClient()
      const first = await client.authorizationCodeGrant(config, callback, request.checks)
      assert.ok(first.refresh_token)
      assert.equal(await userinfoStatus(first.access_token), 200)

      const reused = await oauthError(client.authorizationCodeGrant(config, callback, request.checks))
      assert.equal(reused.error, 'invalid_grant')
      assert.equal((await oauthError(client.refreshTokenGrant(config, first.refresh_token!))).error, 'invalid_grant', 'the refresh token of the first exchange died')
      assert.equal(await userinfoStatus(first.access_token), 401, 'and its access token')
    })

    test('6b. one code sent twice at once: one exchange, the other invalid_grant, and what the one issued is revoked', async () => {
      const { config, request, callback } = await codeForNewClient()
      const answers = await Promise.allSettled([0, 1].map(() => client.authorizationCodeGrant(config, callback, request.checks)))
      const won = answers.filter((answer) => answer.status === 'fulfilled')
      assert.equal(won.length, 1, 'exactly one exchange succeeded')
      const lost = answers.find((answer) => answer.status === 'rejected')!
      assert.equal((await oauthError(Promise.reject(lost.reason))).error, 'invalid_grant')
      const tokens = won[0]!.value
      assert.equal(await userinfoStatus(tokens.access_token), 401, 'the winner\'s access token died with the grant')
      assert.equal((await oauthError(client.refreshTokenGrant(config, tokens.refresh_token!))).error, 'invalid_grant', 'and its refresh token')
    })

    test('6c. a token request is one transaction: a write that fails undoes the code\'s consumption and every token it issued', async () => {
      const { clientId, config, request, callback } = await codeForNewClient()
      const { kysely } = t.app.services.db
      // The access token's row is the last the code exchange writes; the database refuses it.
      if (engine === 'sqlite') {
        await sql`create trigger refuse_access_tokens before insert on op_records when new.model = 'AccessToken' begin select raise(abort, 'refused by the test'); end`.execute(kysely)
      } else {
        await sql`create function refuse_access_tokens() returns trigger language plpgsql as $$ begin if new.model = 'AccessToken' then raise exception 'refused by the test'; end if; return new; end $$`.execute(kysely)
        await sql`create trigger refuse_access_tokens before insert on op_records for each row execute function refuse_access_tokens()`.execute(kysely)
      }
      const rows = async (model: string) => Number((await kysely.selectFrom('op_records').select((eb) => eb.fn.countAll().as('n')).where('client_id', '=', clientId).where('model', '=', model).executeTakeFirstOrThrow()).n)
      try {
        const failed = await fetch(server.token_endpoint!, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ grant_type: 'authorization_code', code: callback.searchParams.get('code')!, redirect_uri: REDIRECT_URI, code_verifier: request.checks.pkceCodeVerifier, client_id: clientId }),
        })
        assert.equal(failed.status, 500)
        assert.deepEqual(await failed.json(), { error: 'server_error', error_description: 'oops! something went wrong' }, 'the library\'s own failure answer, in JSON')
        assert.equal(await rows('RefreshToken'), 0, 'no refresh token was kept')
      } finally {
        await sql`drop trigger refuse_access_tokens${sql.raw(engine === 'sqlite' ? '' : ' on op_records')}`.execute(kysely)
        if (engine === 'postgres') await sql`drop function refuse_access_tokens()`.execute(kysely)
      }
      const tokens = await client.authorizationCodeGrant(config, callback, request.checks)
      assert.equal(await userinfoStatus(tokens.access_token), 200, 'the code was not spent by the failed exchange')
      assert.equal(await rows('RefreshToken'), 1)
    })

    test('7. an unregistered redirect_uri gets an HTML error page, never a redirect', async () => {
      const { clientId } = await register()
      const request = await authorization(rp(clientId), { redirect_uri: 'https://evil.example/cb' })
      const page = await new OpBrowser(issuer).request(request.url)
      assert.equal(page.status, 400)
      assert.match(page.headers.get('content-type') ?? '', /^text\/html/)
      assert.equal(page.location, null)
      assert.ok(!/href="https:\/\/evil\.example/.test(page.body), 'nor a link to the unregistered URI')
    })

    test('8. an unknown client authenticating with HTTP Basic at the token endpoint: 401 invalid_client with WWW-Authenticate: Basic', async () => {
      const response = await fetch(server.token_endpoint!, {
        method: 'POST',
        headers: { authorization: `Basic ${Buffer.from('no-such-client:guess').toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'authorization_code', code: 'x', redirect_uri: REDIRECT_URI, code_verifier: client.randomPKCECodeVerifier() }),
      })
      assert.equal(response.status, 401)
      assert.match(response.headers.get('www-authenticate') ?? '', /^Basic /)
      assert.equal(((await response.json()) as { error: string }).error, 'invalid_client')
    })

    test('9. refresh tokens rotate; a retry within 10 s gets the same new one; a reuse after that kills the grant', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user)
      const first = await client.refreshTokenGrant(config, tokens.refresh_token!)
      assert.ok(first.refresh_token)
      assert.notEqual(first.refresh_token, tokens.refresh_token)
      const retry = await client.refreshTokenGrant(config, tokens.refresh_token!)
      assert.equal(retry.refresh_token, first.refresh_token, 'a client that lost the answer gets the same successor')
      assert.equal(await userinfoStatus(retry.access_token), 200, 'with a working access token')

      const second = await client.refreshTokenGrant(config, first.refresh_token!)
      assert.ok(second.refresh_token)
      assert.notEqual(second.refresh_token, first.refresh_token)

      t.clock.advance(11)
      assert.equal((await oauthError(client.refreshTokenGrant(config, first.refresh_token!))).error, 'invalid_grant', 'a rotated token used again after the window')
      assert.equal((await oauthError(client.refreshTokenGrant(config, second.refresh_token!))).error, 'invalid_grant', 'the reuse ended the grant: its newest token is dead too')
    })

    test('9b. one refresh token sent twice at once is one client\'s retry: both answers carry the same successor and working access tokens', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user)
      const [a, b] = await Promise.all([0, 1].map(() => client.refreshTokenGrant(config, tokens.refresh_token!)))
      assert.ok(a!.refresh_token)
      assert.notEqual(a!.refresh_token, tokens.refresh_token)
      assert.equal(b!.refresh_token, a!.refresh_token)
      assert.equal(await userinfoStatus(a!.access_token), 200)
      assert.equal(await userinfoStatus(b!.access_token), 200)
      const next = await client.refreshTokenGrant(config, a!.refresh_token!)
      assert.ok(next.refresh_token, 'the successor works')
    })

    test('9c. a refresh refused after the library rotated the token (an unknown resource) spends nothing: the same refresh token then works', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user)
      const refused = await oauthError(client.refreshTokenGrant(config, tokens.refresh_token!, { resource: 'https://unknown.example/api' }))
      assert.equal(refused.error, 'invalid_target')
      t.clock.advance(11)
      const next = await client.refreshTokenGrant(config, tokens.refresh_token!)
      assert.ok(next.refresh_token)
      assert.notEqual(next.refresh_token, tokens.refresh_token)
      assert.equal(await userinfoStatus(next.access_token), 200)
    })

    test('9d. an approved app\'s last use is kept to the minute: a refresh within it writes nothing, one after it does', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user)
      const lastUsed = async () => ((await t.get('/auth/me/apps', user.access_token)).json().data.apps as { last_used_at: string | null }[])[0]!.last_used_at
      const exchanged = await lastUsed()
      assert.ok(exchanged, 'the code exchange wrote the first use')
      t.clock.advance(30)
      const first = await client.refreshTokenGrant(config, tokens.refresh_token!)
      assert.equal(await lastUsed(), exchanged, 'within the minute: unchanged')
      t.clock.advance(31)
      await client.refreshTokenGrant(config, first.refresh_token!)
      const later = await lastUsed()
      assert.equal(Date.parse(later!) - Date.parse(exchanged), 61_000, 'a minute on: the refresh\'s time')
    })

    test('10. a revoked access token (RFC 7009) no longer works at userinfo', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user)
      assert.equal(await userinfoStatus(tokens.access_token), 200)
      await client.tokenRevocation(config, tokens.access_token)
      assert.equal(await userinfoStatus(tokens.access_token), 401)
    })

    test('11. end-session: an unregistered post_logout_redirect_uri gets a page; a registered one, after the confirm page, ends the Portcullis session and redirects there', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Logout app', post_logout_redirect_uris: [LOGGED_OUT_URI] })
      const config = rp(clientId)
      const sessions = async () => {
        const listed = await t.get('/auth/sessions', user.access_token)
        assert.equal(listed.statusCode, 200, listed.body)
        return listed.json().data.sessions as { id: string }[]
      }
      const sessionCount = async () => (await sessions()).length
      const own = await sessions()
      const { browser, tokens } = await grantFor(config, user)
      const opened = (await sessions()).filter((session) => !own.some((known) => known.id === session.id))
      assert.equal(opened.length, 1, 'the provider sign-in is a Portcullis session')
      assert.ok(JSON.stringify(opened[0]).includes('Logout app'), `listed with the client's name: ${JSON.stringify(opened[0])}`)
      const before = own.length + 1

      const unregistered = await browser.request(client.buildEndSessionUrl(config, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: 'https://evil.example/bye' }).href)
      assert.equal(unregistered.status, 400)
      assert.match(unregistered.headers.get('content-type') ?? '', /^text\/html/)
      assert.equal(unregistered.location, null)

      const state = client.randomState()
      const confirm = await browser.go(client.buildEndSessionUrl(config, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: LOGGED_OUT_URI, state }).href)
      assert.equal(confirm.status, 200)
      assert.match(confirm.headers.get('content-type') ?? '', /^text\/html/)
      const form = formOf(confirm, { id: 'op.logoutForm' })
      const button = /<button[^>]*form="op\.logoutForm"[^>]*name="(\w+)"[^>]*value="(\w+)"/.exec(confirm.body)
      assert.ok(button, 'the sign-out button')
      const done = await browser.submit(form, { [button[1]!]: button[2]! })
      assert.equal(done.status, 303, done.body)
      const back = new URL(done.location!)
      assert.equal(`${back.origin}${back.pathname}`, LOGGED_OUT_URI)
      assert.equal(back.searchParams.get('state'), state)
      assert.equal(await sessionCount(), before - 1, 'the provider session\'s Portcullis session ended')
      assert.ok(!(await sessions()).some((session) => session.id === opened[0]!.id))

      const silent = await authorization(config, { prompt: 'none' })
      assert.equal(new URL((await browser.go(silent.url)).location!).searchParams.get('error'), 'login_required', 'the browser is signed out')
    })

    test('12. confidential clients: client_secret_basic with introspection (refused to a public client), and private_key_jwt', async () => {
      const user = await registerVerifyLogin(t)
      const basic = await register({ name: 'Partner site', type: 'confidential' })
      assert.ok(basic.secret)
      const config = rp(basic.clientId, client.ClientSecretBasic(basic.secret))
      const { tokens } = await grantFor(config, user)
      const introspected = await client.tokenIntrospection(config, tokens.access_token)
      assert.equal(introspected.active, true)
      assert.equal(introspected.client_id, basic.clientId)
      assert.equal(introspected.sub, user.userId)
      const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token!)
      const wrongSecret = rp(basic.clientId, client.ClientSecretBasic('not-the-secret'))
      assert.equal((await oauthError(client.refreshTokenGrant(wrongSecret, refreshed.refresh_token!))).error, 'invalid_client')

      const publicClient = await register({ name: 'Public app' })
      const publicConfig = rp(publicClient.clientId)
      const own = await grantFor(publicConfig, user)
      const answer = await fetch(server.introspection_endpoint!, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams({ client_id: publicClient.clientId, token: own.tokens.access_token }),
      })
      const body = (await answer.json()) as Record<string, unknown>
      assert.ok(answer.status === 401 || (answer.status === 200 && body.active === false), `a public client learns nothing: ${answer.status} ${JSON.stringify(body)}`)
      assert.equal(await userinfoStatus(own.tokens.access_token), 200, 'although the token is live')

      const { publicKey, privateKey } = await generateKeyPair('ES256')
      const jwk = { ...(await exportJWK(publicKey)), kty: 'EC', alg: 'ES256', use: 'sig', kid: 'rp-key-1' }
      const keyed = await register({ name: 'Keyed partner', type: 'confidential', token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [jwk] }, id_token_signed_response_alg: 'EdDSA' })
      const keyedConfig = rp(keyed.clientId, client.PrivateKeyJwt({ key: privateKey, kid: 'rp-key-1' }), { id_token_signed_response_alg: 'EdDSA' })
      const keyedGrant = await grantFor(keyedConfig, user)
      assert.equal(keyedGrant.tokens.claims()!.aud, keyed.clientId)
      assert.equal(decodeProtectedHeader(keyedGrant.tokens.id_token!).alg, 'EdDSA', 'the algorithm the client registered')
      const keyedRefresh = await client.refreshTokenGrant(keyedConfig, keyedGrant.tokens.refresh_token!)
      assert.ok(keyedRefresh.access_token)
      // The same client with a key it did not register is refused.
      const stranger = await generateKeyPair('ES256')
      const strangerConfig = rp(keyed.clientId, client.PrivateKeyJwt({ key: stranger.privateKey, kid: 'rp-key-1' }), { id_token_signed_response_alg: 'EdDSA' })
      assert.equal((await oauthError(client.refreshTokenGrant(strangerConfig, keyedRefresh.refresh_token!))).error, 'invalid_client')
    })

    test('12b. introspection of a JWT access token for the API: active from its signature, expiry and grant; inactive once the grant ends', {
    }, async () => {
      const user = await registerVerifyLogin(t)
      const { clientId, secret } = await register({ name: 'Introspecting partner', type: 'confidential' })
      const config = rp(clientId, client.ClientSecretBasic(secret))
      const { tokens } = await grantFor(config, user, { scope: 'openid offline_access watchlists:read' })
      const jwt = await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })
      const live = await client.tokenIntrospection(config, jwt.access_token)
      assert.equal(live.active, true)
      assert.equal(live.sub, user.userId)
      assert.equal(live.client_id, clientId)
      assert.equal((await t.call('DELETE', `/auth/me/apps/${clientId}`, user.access_token)).statusCode, 200)
      assert.equal((await client.tokenIntrospection(config, jwt.access_token)).active, false)
    })

    test('13. a native client\'s loopback redirect URI matches on any port (RFC 8252 section 7.3), and only its path', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Command-line tool', redirect_uris: ['http://127.0.0.1/callback'] })
      const config = rp(clientId)
      const request = await authorization(config, { redirect_uri: 'http://127.0.0.1:53123/callback' })
      const callback = await signIn(new OpBrowser(issuer), request.url, user)
      assert.equal(`${callback.origin}${callback.pathname}`, 'http://127.0.0.1:53123/callback')
      const tokens = await client.authorizationCodeGrant(config, callback, request.checks)
      assert.equal(tokens.claims()!.sub, user.userId)

      const otherPath = await new OpBrowser(issuer).request((await authorization(config, { redirect_uri: 'http://127.0.0.1:53123/elsewhere' })).url)
      assert.equal(otherPath.status, 400)
      assert.equal(otherPath.location, null)
    })

    /** The person's side of the device flow on /oauth/device, up to the page after the approval. */
    const approveDevice = async (browser: OpBrowser, userCode: string, user: User) => {
      const input = await browser.go(`${issuer}/oauth/device`)
      assert.equal(input.status, 200)
      // As a person types it: lowercase, without the dash.
      const confirm = await browser.submit(formOf(input, { id: 'op.deviceInputForm' }), { user_code: userCode.replace('-', '').toLowerCase() })
      assert.equal(confirm.status, 200, `the code was refused: ${headingOf(confirm)} ${/role="alert">([^<]*)/.exec(confirm.body)?.[1] ?? ''}`)
      assert.ok(confirm.body.includes(userCode), 'the confirm page shows the code as the device does')
      let page = await browser.submit(formOf(confirm, { id: 'op.deviceConfirmForm' }))
      if (isSignInPage(page)) page = await post(browser, page, 'login', { email: user.email, password: PASSWORD })
      if (page.status === 200 && formsOf(page).some((form) => form.action.endsWith('/consent'))) page = await post(browser, page, 'consent')
      assert.equal(page.status, 200, `${page.status} at ${page.url}`)
      assert.equal(headingOf(page), 'Device connected')
    }

    const deviceClient = async () => {
      const { clientId } = await register({ name: 'TV app', redirect_uris: [], grant_types: [DEVICE_GRANT, 'refresh_token'] })
      const config = rp(clientId)
      const started = await client.initiateDeviceAuthorization(config, { scope: 'openid offline_access watchlists:read' })
      assert.match(started.user_code, USER_CODE)
      assert.equal(started.verification_uri, `${issuer}/oauth/device`)
      return { config, started }
    }

    /** Tokens once the person approved, polling at the interval the server gave (5 s when it gave none, RFC 8628 section 3.2). */
    const tokensOf = async (config: client.Configuration, started: client.DeviceAuthorizationResponse, user: User, approve: () => Promise<void>) => {
      const stop = new AbortController()
      const polled = client.pollDeviceAuthorizationGrant(config, started, undefined, { signal: AbortSignal.any([stop.signal, AbortSignal.timeout(20_000)]) })
      polled.catch(() => undefined)
      try {
        await approve()
      } catch (error) {
        stop.abort()
        throw error
      }
      const tokens = await polled
      assert.equal(tokens.claims()!.sub, user.userId)
      assert.ok(tokens.refresh_token)
      const jwt = await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })
      assert.equal(await watchlistsStatus(jwt.access_token), 200)
    }

    test('14. the device grant (RFC 8628): a XXXX-XXXX user code entered lowercase without the dash on /oauth/device, sign-in at the interaction, approval, then tokens by polling', {
    }, async () => {
      const user = await registerVerifyLogin(t)
      const { config, started } = await deviceClient()
      await tokensOf(config, started, user, () => approveDevice(new OpBrowser(issuer), started.user_code, user))
    })

    test('14b. the device grant from a browser already signed in at the provider: the code, the approval, tokens by polling', async () => {
      const user = await registerVerifyLogin(t)
      const browser = new OpBrowser(issuer)
      const { clientId } = await register({ name: 'Website' })
      await grantFor(rp(clientId), user, {}, browser)
      const { config, started } = await deviceClient()
      await tokensOf(config, started, user, () => approveDevice(browser, started.user_code, user))
    })

    test('15. the sign-in page refuses a cross-site post (403 page); a wrong password shows the page again (401) and counts as a failed login', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)
      const request = await authorization(config)
      const page = await browser.go(request.url)
      assert.ok(isSignInPage(page))

      const crossSite = await post(browser, page, 'login', { email: user.email, password: PASSWORD }, { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' })
      assert.equal(crossSite.status, 403)
      assert.match(crossSite.headers.get('content-type') ?? '', /^text\/html/)
      assert.equal(crossSite.location, null)

      const wrong = await post(browser, page, 'login', { email: user.email, password: 'not the password at all' })
      assert.equal(wrong.status, 401)
      assert.match(wrong.headers.get('content-type') ?? '', /^text\/html/)
      assert.ok(hasSignInForm(wrong), 'the sign-in page again')
      assert.match(wrong.body, /role="alert"/)
      const failed = (await t.app.services.accounts.events({ email: user.email })).filter((event) => event.type === 'login.failed')
      assert.equal(failed.length, 1, 'counted like any failed login')

      const tokens = await client.authorizationCodeGrant(config, await finish(browser, await post(browser, page, 'login', { email: user.email, password: PASSWORD })), request.checks)
      assert.equal(tokens.claims()!.sub, user.userId, 'the right password still signs in')
    })

    test('15b. the interaction pages\' forms post where the server answers them', {
    }, async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register()
      const browser = new OpBrowser(issuer)
      const page = await browser.go((await authorization(rp(clientId))).url)
      assert.ok(isSignInPage(page))
      const interaction = new URL(interactionOf(page)).pathname
      for (const form of formsOf(page)) assert.ok(new URL(form.action).pathname.startsWith(`${interaction}/`), `${form.action} is under ${interaction}/`)
      // As a browser submits it: the form's own action, with what the person typed.
      const submitted = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      // Signed in: on to the consent page (a third-party client), whose own forms are under the next interaction.
      assert.equal(submitted.status, 200, `${submitted.status} at ${submitted.url}`)
      assert.ok(formsOf(submitted).some((form) => form.action.endsWith('/consent')), submitted.body.slice(0, 300))
      const next = new URL(interactionOf(submitted)).pathname
      for (const form of formsOf(submitted)) assert.ok(new URL(form.action).pathname.startsWith(`${next}/`), `${form.action} is under ${next}/`)
    })

    test('16. a second factor: the code page, then acr aal2 and amr with otp; acr_values=aal2 without a factor is access_denied', async () => {
      const user = await registerVerifyLogin(t, uniqueEmail('mfa'))
      const started = await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)
      assert.equal(started.statusCode, 201, started.body)
      const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
      const confirmed = await t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, user.access_token)
      assert.equal(confirmed.statusCode, 200, confirmed.body)

      const { clientId } = await register()
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)
      const request = await authorization(config)
      const afterPassword = await post(browser, await browser.go(request.url), 'login', { email: user.email, password: PASSWORD })
      assert.equal(afterPassword.status, 200)
      assert.equal(headingOf(afterPassword), 'Enter your code')
      // The next step's code: the enrolment used this one.
      const afterCode = await post(browser, afterPassword, 'mfa', { code: oathtool(secret, t.clock.now(), 1) })
      const tokens = await client.authorizationCodeGrant(config, await finish(browser, afterCode), request.checks)
      const claims = tokens.claims()!
      assert.equal(claims.acr, 'aal2')
      assert.ok((claims.amr as string[]).includes('otp'), JSON.stringify(claims.amr))

      const plain = await registerVerifyLogin(t)
      const demanding = await authorization(config, { acr_values: 'aal2' })
      const answer = await signIn(new OpBrowser(issuer), demanding.url, plain)
      assert.equal(answer.searchParams.get('error'), 'access_denied')
      assert.ok(answer.searchParams.get('error_description'), 'saying why')
      assert.equal(answer.searchParams.get('iss'), issuer)
      assert.equal(answer.searchParams.get('code'), null)
    })

    test('17. the user\'s apps: listed with their scopes, in the export and the admin view; revoking one ends its refresh token, and its API token within 1 s', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Revocable app' })
      const config = rp(clientId)
      const { tokens } = await grantFor(config, user, { scope: 'openid offline_access watchlists:read' })
      const jwt = await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })
      assert.equal(await watchlistsStatus(jwt.access_token), 200)
      assert.equal(await userinfoStatus(tokens.access_token), 200)

      const listed = await t.get('/auth/me/apps', user.access_token)
      assert.equal(listed.statusCode, 200, listed.body)
      const apps = listed.json().data.apps as { client_id: string; name: string; scopes: string[] }[]
      assert.equal(apps.length, 1)
      assert.equal(apps[0]!.client_id, clientId)
      assert.equal(apps[0]!.name, 'Revocable app')
      assert.deepEqual([...apps[0]!.scopes].sort(), ['offline_access', 'openid', 'watchlists:read'])
      // The same grant in the user's export and in the operator's view of the user.
      const exported = await t.get('/auth/me/export', user.access_token)
      assert.deepEqual(exported.json().data.apps.map((app: { client_id: string }) => app.client_id), [clientId])
      assert.deepEqual((await t.app.services.admin.getUser(user.userId)).apps?.map((app) => app.client_id), [clientId])

      const revoked = await t.call('DELETE', `/auth/me/apps/${clientId}`, user.access_token)
      assert.equal(revoked.statusCode, 200, revoked.body)
      assert.equal((await oauthError(client.refreshTokenGrant(config, jwt.refresh_token!))).error, 'invalid_grant')
      assert.equal(await userinfoStatus(tokens.access_token), 401, 'its opaque access token ended with the grant')
      await within(1000, async () => (await watchlistsStatus(jwt.access_token)) === 401)
      assert.deepEqual((await t.get('/auth/me/apps', user.access_token)).json().data.apps, [])
    })

    test('18. logout-all and disabling the user end the provider\'s grants, tokens and browser session too', async () => {
      const { clientId } = await register({ name: 'Long-lived app' })
      const config = rp(clientId)
      /** Everything the provider gave one user through this client: the refresh token, both access tokens, the browser. */
      const everything = async (user: User) => {
        const { browser, tokens } = await grantFor(config, user, { scope: 'openid offline_access watchlists:read' })
        const jwt = await client.refreshTokenGrant(config, tokens.refresh_token!, { resource: api })
        assert.equal(await watchlistsStatus(jwt.access_token), 200)
        return { browser, opaque: tokens.access_token, jwt: jwt.access_token, refresh: jwt.refresh_token! }
      }
      const assertEnded = async (given: Awaited<ReturnType<typeof everything>>, apiStatus: (status: number) => boolean) => {
        assert.equal((await oauthError(client.refreshTokenGrant(config, given.refresh))).error, 'invalid_grant')
        assert.equal(await userinfoStatus(given.opaque), 401)
        await within(1000, async () => apiStatus(await watchlistsStatus(given.jwt)))
        const silent = await authorization(config, { prompt: 'none' })
        assert.equal(new URL((await given.browser.go(silent.url)).location!).searchParams.get('error'), 'login_required', 'the provider session ended with the Portcullis sessions')
      }

      const user = await registerVerifyLogin(t)
      const signedIn = await everything(user)
      const all = await t.post('/auth/logout-all', undefined, user.access_token)
      assert.equal(all.statusCode, 200, all.body)
      await assertEnded(signedIn, (status) => status === 401)

      const disabled = await registerVerifyLogin(t)
      const before = await everything(disabled)
      await t.app.services.accounts.disable(disabled.email, 'suspended')
      // A disabled account's tokens are refused, whichever of the two refusals comes first.
      await assertEnded(before, (status) => status === 401 || status === 403)
    })

    /**
     * The logout tokens the receiver got for `sid` once the queue has run: each verified as the
     * client would (signature on the published keys, issuer, audience, the event, no nonce).
     */
    const logoutTokensFor = async (clientId: string, sid: string) => {
      await t.app.services.provider.logouts.flush()
      const keys = createRemoteJWKSet(new URL(server.jwks_uri!))
      const verified = []
      // One receiver serves every client of this file: only this client's tokens are its.
      for (const token of receiver.tokens.filter((token) => decodeJwt(token).aud === clientId)) {
        const { payload } = await jwtVerify(token, keys, { issuer, audience: clientId, maxTokenAge: '2 minutes' })
        if (payload.sid !== sid) continue
        assert.deepEqual(payload.events, { 'http://schemas.openid.net/event/backchannel-logout': {} })
        assert.equal(payload.nonce, undefined)
        assert.ok(typeof payload.jti === 'string')
        verified.push(payload)
      }
      return verified
    }

    test('19. Back-Channel Logout: end-session, logout-all and one revoked session each tell the client, through the durable queue, with a token it verifies', async () => {
      const { clientId } = await register({ name: 'Notified app', backchannel_logout_uri: receiver.url, post_logout_redirect_uris: [LOGGED_OUT_URI] })
      const config = rp(clientId)

      // The end-session endpoint: the library's own send is replaced by the queue's.
      const first = await registerVerifyLogin(t)
      const { browser, tokens } = await grantFor(config, first)
      const sid = tokens.claims()!.sid as string
      const confirm = await browser.go(client.buildEndSessionUrl(config, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: LOGGED_OUT_URI }).href)
      const ended = await browser.submit(formOf(confirm, { id: 'op.logoutForm' }), { logout: 'yes' })
      assert.equal(ended.location, LOGGED_OUT_URI)
      const told = await logoutTokensFor(clientId, sid)
      assert.equal(told.length, 1, 'one notice for the ended session')
      assert.equal(told[0]!.sub, first.userId)

      // Logout-all from Portcullis's own API.
      const second = await registerVerifyLogin(t)
      const secondSid = (await grantFor(config, second)).tokens.claims()!.sid as string
      assert.equal((await t.post('/auth/logout-all', undefined, second.access_token)).statusCode, 200)
      assert.equal((await logoutTokensFor(clientId, secondSid)).length, 1)

      // One session revoked from the user's list (the provider's session is listed with the app's name).
      const third = await registerVerifyLogin(t)
      const thirdSid = (await grantFor(config, third)).tokens.claims()!.sid as string
      const listed = (await t.get('/auth/sessions', third.access_token)).json().data.sessions as { id: string; client: string | null }[]
      const viaApp = listed.find((session) => session.client === 'Notified app')
      assert.ok(viaApp, 'the provider session is listed with the app\'s name')
      assert.equal((await t.call('DELETE', `/auth/sessions/${viaApp.id}`, third.access_token)).statusCode, 200)
      assert.equal((await logoutTokensFor(clientId, thirdSid)).length, 1)
    })

    test('20. a Back-Channel Logout the client could not take is retried until it does', async () => {
      const { clientId } = await register({ name: 'Flaky receiver', backchannel_logout_uri: receiver.url })
      const user = await registerVerifyLogin(t)
      const sid = (await grantFor(rp(clientId), user)).tokens.claims()!.sid as string
      receiver.failing = true
      try {
        assert.equal((await t.post('/auth/logout-all', undefined, user.access_token)).statusCode, 200)
        assert.equal((await logoutTokensFor(clientId, sid)).length, 0, 'refused by the receiver')
      } finally {
        receiver.failing = false
      }
      // The retry is due after the queue's first delay (5 s by Portcullis's clock).
      t.clock.advance(6)
      assert.equal((await logoutTokensFor(clientId, sid)).length, 1)
    })

    test('21. "Continue with" an upstream identity provider on the sign-in page signs the person in through it', async () => {
      const person = { sub: `upstream-${Date.now()}`, email: uniqueEmail('upstream'), email_verified: true as const, name: 'Upstream Person' }
      upstream.addAccount(person)
      const { clientId } = await register({ name: 'Federated app', first_party: true })
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)
      const request = await authorization(config, { scope: 'openid email' })
      const page = await browser.go(request.url)
      assert.ok(isSignInPage(page))
      assert.match(page.body, /Continue with Upstream ID/)
      // The button starts the upstream flow (through /api/v1/auth/oidc/test/start's logic) and leaves this site.
      const left = await browser.submit(formOf(page, { actionEndsWith: '/federated/test' }))
      assert.equal(left.status, 303)
      assert.ok(left.location?.startsWith(upstream.issuer), left.location ?? '')
      // The upstream provider signs the person in and sends the browser back through Portcullis's callback.
      const back = await browser.go(await upstream.signIn(left.location!, person.sub))
      assert.ok(back.location, `expected a redirect to the client, got ${back.status} at ${back.url}: ${back.body.slice(0, 300)}`)
      const tokens = await client.authorizationCodeGrant(config, new URL(back.location), request.checks)
      const claims = tokens.claims()!
      assert.deepEqual(claims.amr, ['fed'])
      assert.equal(claims.email, undefined, 'email is a userinfo claim with the opaque token')
      const info = await client.fetchUserInfo(config, tokens.access_token, claims.sub)
      assert.equal(info.email, person.email)
    })

    test('22. a key rotation reaches the provider: new ID tokens carry the new RS256 key, the old one stays published', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Rotating app' })
      const config = rp(clientId)
      const before = decodeProtectedHeader((await grantFor(config, user)).tokens.id_token!).kid
      const kids = await rotateSigningKeys(t.app.services.db, t.app.services.sealer, t.clock.now())
      assert.equal(kids.length, 2, 'both families rotate: EdDSA and the provider\'s RS256')
      await t.app.services.keys.reload()
      const after = decodeProtectedHeader((await grantFor(config, user)).tokens.id_token!).kid
      assert.notEqual(after, before)
      assert.ok(kids.includes(after!), 'signed with the new key')
      const published = ((await (await fetch(server.jwks_uri!)).json()) as { keys: { kid: string }[] }).keys.map((key) => key.kid)
      for (const kid of [before, after]) assert.ok(published.includes(kid!), `${kid} is published`)
    })

    test('23. a client_credentials token (no user) and an ID token are refused by the watchlists API; a resource other than the API is invalid_target', async () => {
      const { clientId, secret } = await register({ name: 'Back office', type: 'confidential', grant_types: ['client_credentials'], redirect_uris: [] })
      const config = rp(clientId, client.ClientSecretBasic(secret!))
      const machine = await client.clientCredentialsGrant(config, { resource: api, scope: 'watchlists:read' })
      assert.equal(decodeJwt(machine.access_token).sub, clientId, 'a token about the client, not a user')
      // A token of another purpose is no access token: an ID token on the API is refused.
      const user = await registerVerifyLogin(t)
      const { clientId: webId } = await register({ name: 'Purpose app' })
      const idToken = (await grantFor(rp(webId), user)).tokens.id_token!
      assert.equal((await t.get('/watchlists', idToken)).statusCode, 401)
      assert.equal((await t.get('/auth/me', idToken)).statusCode, 401)
      const refused = await t.get('/watchlists', machine.access_token)
      assert.equal(refused.statusCode, 401)
      assert.equal(refused.json().error.code, 'INVALID_TOKEN')
      assert.equal((await oauthError(client.clientCredentialsGrant(config, { resource: 'https://elsewhere.example/api' }))).error, 'invalid_target')
    })

    test('24. an e-mailed code instead of a password on the sign-in page signs the person in (amr otp)', async () => {
      const user = await registerVerifyLogin(t)
      const { clientId } = await register({ name: 'Mailed app', first_party: true })
      const config = rp(clientId)
      const browser = new OpBrowser(issuer)
      const request = await authorization(config)
      const page = await browser.go(request.url)
      assert.ok(isSignInPage(page))
      const addressPage = await browser.submit(formOf(page, { actionEndsWith: '/email' }))
      assert.equal(headingOf(addressPage), 'Sign in to continue to Mailed app')
      const codePage = await browser.submit(formOf(addressPage, { actionEndsWith: '/email' }), { email: user.email })
      assert.equal(headingOf(codePage), 'Enter the code from the mail')
      await t.app.services.background.drain()
      let text = mailText(await t.mail.next(user.email))
      while (!text.includes('/sign-in/email?token=')) text = mailText(await t.mail.next(user.email))
      const code = /^(\d{6})$/m.exec(text)![1]!
      const wrong = await browser.submit(formOf(codePage, { actionEndsWith: '/email-code' }), { code: code === '000000' ? '000001' : '000000' })
      assert.equal(wrong.status, 401)
      const back = await browser.submit(formOf(wrong, { actionEndsWith: '/email-code' }), { code })
      assert.ok(back.location?.startsWith(REDIRECT_URI), `${back.status} ${back.url}`)
      const tokens = await client.authorizationCodeGrant(config, new URL(back.location!), request.checks)
      assert.deepEqual(tokens.claims()!.amr, ['otp'])
      assert.equal(tokens.claims()!.sub, user.userId)
    })
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose'
import {
  allowInsecureRequests,
  authorizationCodeGrant,
  buildAuthorizationUrl,
  calculatePKCECodeChallenge,
  discovery,
  randomNonce,
  randomPKCECodeVerifier,
  randomState,
  type Configuration,
} from 'openid-client'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'

// The test OpenID provider is checked the way Portcullis will use it: openid-client v6 acting as
// the relying party (discovery, PKCE, state, nonce, the code exchange) and jose checking the ID
// token against the provider's published JWKS. The callback URL is never fetched.

const callback = 'http://127.0.0.1:9/auth/oidc/callback'

/** openid-client wraps the failed check in a generic error; the reason is in its cause. */
function causedBy(pattern: RegExp) {
  return (error: Error & { cause?: { message?: string } }) => {
    assert.match(error.cause?.message ?? error.message, pattern)
    return true
  }
}

describe('test OpenID provider', () => {
  let provider: TestProvider
  let config: Configuration

  before(async () => {
    provider = await startTestProvider({
      redirectUris: [callback],
      accounts: [
        { sub: 'ada', email: 'ada@example.com', email_verified: true, name: 'Ada Lovelace' },
        { sub: 'bob', email: 'bob@example.com', email_verified: 'false' },
        { sub: 'cy', email: 'cy@example.com' },
      ],
    })
    config = await discovery(new URL(provider.issuer), provider.clientId, provider.clientSecret, undefined, { execute: [allowInsecureRequests] })
  })
  after(() => provider.close())

  /** What a relying party keeps between sending the browser off and the callback. */
  async function startLogin(parameters: Record<string, string> = {}) {
    const codeVerifier = randomPKCECodeVerifier()
    const state = randomState()
    const nonce = randomNonce()
    const url = buildAuthorizationUrl(config, {
      redirect_uri: callback,
      scope: 'openid email profile',
      code_challenge: await calculatePKCECodeChallenge(codeVerifier),
      code_challenge_method: 'S256',
      state,
      nonce,
      ...parameters,
    })
    return { url: url.href, codeVerifier, state, nonce }
  }

  async function exchange(login: Awaited<ReturnType<typeof startLogin>>, callbackUrl: string) {
    return authorizationCodeGrant(config, new URL(callbackUrl), {
      pkceCodeVerifier: login.codeVerifier,
      expectedState: login.state,
      expectedNonce: login.nonce,
      idTokenExpected: true,
    })
  }

  async function signedIn(sub: string) {
    const login = await startLogin()
    const callbackUrl = await provider.signIn(login.url, sub)
    return { login, callbackUrl, tokens: await exchange(login, callbackUrl) }
  }

  test('discovery names the issuer exactly and advertises S256 PKCE, the code flow and the claims', async () => {
    const response = await fetch(`${provider.issuer}/.well-known/openid-configuration`)
    const metadata = (await response.json()) as Record<string, unknown>
    assert.match(provider.issuer, /^http:\/\/127\.0\.0\.1:\d+$/)
    assert.equal(metadata.issuer, provider.issuer)
    assert.equal(config.serverMetadata().issuer, provider.issuer)
    assert.deepEqual(metadata.code_challenge_methods_supported, ['S256'])
    assert.deepEqual(metadata.response_types_supported, ['code'])
    for (const scope of ['openid', 'email', 'profile']) assert.ok((metadata.scopes_supported as string[]).includes(scope), scope)
    for (const claim of ['sub', 'email', 'email_verified', 'name']) assert.ok((metadata.claims_supported as string[]).includes(claim), claim)
  })

  test('a sign-in returns the callback with code, state and iss, and the ID token carries the account', async () => {
    const { login, callbackUrl, tokens } = await signedIn('ada')
    const returned = new URL(callbackUrl)
    assert.equal(`${returned.origin}${returned.pathname}`, callback)
    assert.ok(returned.searchParams.get('code'))
    assert.equal(returned.searchParams.get('state'), login.state)
    assert.equal(returned.searchParams.get('iss'), provider.issuer)

    const claims = tokens.claims()!
    assert.equal(claims.iss, provider.issuer)
    assert.equal(claims.aud, provider.clientId)
    assert.equal(claims.sub, 'ada')
    assert.equal(claims.nonce, login.nonce)
    assert.equal(claims.email, 'ada@example.com')
    assert.equal(claims.email_verified, true)
    assert.equal(claims.name, 'Ada Lovelace')

    // Signed with the key the provider publishes.
    const jwks = createRemoteJWKSet(new URL(config.serverMetadata().jwks_uri!))
    const verified = await jwtVerify(tokens.id_token!, jwks, { issuer: provider.issuer, audience: provider.clientId })
    assert.equal(verified.protectedHeader.alg, 'RS256')

    // The code is single use.
    await assert.rejects(exchange(login, callbackUrl), { error: 'invalid_grant' })
  })

  test('email_verified is passed through as given: a string, or absent', async () => {
    const bob = (await signedIn('bob')).tokens.claims()!
    assert.equal(bob.email_verified, 'false')
    const cy = (await signedIn('cy')).tokens.claims()!
    assert.equal(cy.email, 'cy@example.com')
    assert.ok(!('email_verified' in cy))
    assert.ok(!('name' in cy))
  })

  test('addAccount adds and replaces accounts; an unknown sub cannot sign in', async () => {
    await assert.rejects(provider.signIn((await startLogin()).url, 'dee'), /unknown_account \(no test account with sub "dee"\)/)
    provider.addAccount({ sub: 'dee', email: 'dee@example.com', email_verified: 'true' })
    assert.equal((await signedIn('dee')).tokens.claims()!.email_verified, 'true')
    provider.addAccount({ sub: 'dee', email: 'dee@example.org', email_verified: false })
    const claims = (await signedIn('dee')).tokens.claims()!
    assert.equal(claims.email, 'dee@example.org')
    assert.equal(claims.email_verified, false)
  })

  test('deny returns the callback with error=access_denied and the state', async () => {
    const login = await startLogin()
    const returned = new URL(await provider.signIn(login.url, 'ada', { deny: true }))
    assert.equal(`${returned.origin}${returned.pathname}`, callback)
    assert.equal(returned.searchParams.get('error'), 'access_denied')
    assert.equal(returned.searchParams.get('state'), login.state)
    assert.equal(returned.searchParams.get('code'), null)
    await assert.rejects(exchange(login, returned.href), { error: 'access_denied' })
  })

  test('PKCE is required and a redirect_uri must be registered', async () => {
    const login = await startLogin()
    const url = new URL(login.url)
    url.searchParams.delete('code_challenge')
    url.searchParams.delete('code_challenge_method')
    const returned = new URL(await provider.signIn(url.href, 'ada'))
    assert.equal(returned.searchParams.get('error'), 'invalid_request')
    assert.match(returned.searchParams.get('error_description') ?? '', /PKCE/)

    // The wrong verifier at the token endpoint.
    const other = await startLogin()
    const callbackUrl = await provider.signIn(other.url, 'ada')
    await assert.rejects(exchange({ ...other, codeVerifier: randomPKCECodeVerifier() }, callbackUrl), { error: 'invalid_grant' })

    const elsewhere = await startLogin({ redirect_uri: 'http://127.0.0.1:9/elsewhere' })
    await assert.rejects(provider.signIn(elsewhere.url, 'ada'), /redirect_uri/)
  })

  test('a redirect URI the provider refuses fails at start', async () => {
    await assert.rejects(startTestProvider({ redirectUris: ['javascript:alert(1)'] }), /invalid_redirect_uri \(redirect_uris must only contain web uris\)/)
  })

  test('tamper({ nonce }) makes openid-client refuse the exchange; tamper(null) restores', async () => {
    provider.tamper({ nonce: 'not-the-nonce' })
    try {
      const login = await startLogin()
      await assert.rejects(exchange(login, await provider.signIn(login.url, 'ada')), causedBy(/"nonce"/))
    } finally {
      provider.tamper(null)
    }
    assert.equal((await signedIn('ada')).tokens.claims()!.sub, 'ada')
  })

  test('tamper({ aud }), ({ iss }) and ({ alg: "none" }) are refused by openid-client; the re-signed ones still verify', async () => {
    const jwks = createRemoteJWKSet(new URL(config.serverMetadata().jwks_uri!))
    try {
      for (const [mode, expected] of [
        [{ aud: 'someone-else' }, /"aud"/],
        [{ iss: 'http://127.0.0.1:9' }, /"iss"/],
        [{ alg: 'none' as const }, /"alg"/],
      ] as const) {
        provider.tamper(mode)
        const login = await startLogin()
        const callbackUrl = await provider.signIn(login.url, 'ada')
        await assert.rejects(exchange(login, callbackUrl), causedBy(expected))
      }

      // Re-signed with the provider's own key: the signature is good, only the claim is wrong.
      provider.tamper({ aud: 'someone-else' })
      const login = await startLogin()
      const response = await fetch(config.serverMetadata().token_endpoint!, {
        method: 'POST',
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code: new URL(await provider.signIn(login.url, 'ada')).searchParams.get('code')!,
          redirect_uri: callback,
          code_verifier: login.codeVerifier,
          client_id: provider.clientId,
          client_secret: provider.clientSecret,
        }),
      })
      assert.equal(response.status, 200)
      const { id_token } = (await response.json()) as { id_token: string }
      const { payload } = await jwtVerify(id_token, jwks)
      assert.equal(payload.aud, 'someone-else')
      assert.equal(payload.nonce, login.nonce)
    } finally {
      provider.tamper(null)
    }
  })

  test('tamper({ foreignKey: true }) yields an ID token whose signature the provider\'s JWKS does not verify', async () => {
    provider.tamper({ foreignKey: true })
    let idToken: string
    try {
      const login = await startLogin()
      // openid-client takes the ID token straight from the token endpoint over the channel it
      // authenticated, and does not check its signature: the relying party has to.
      const tokens = await exchange(login, await provider.signIn(login.url, 'ada'))
      idToken = tokens.id_token!
    } finally {
      provider.tamper(null)
    }
    const jwks = createRemoteJWKSet(new URL(config.serverMetadata().jwks_uri!))
    const published = (await (await fetch(config.serverMetadata().jwks_uri!)).json()) as { keys: { kid: string }[] }
    assert.deepEqual(published.keys.map((key) => key.kid), [decodeProtectedHeader(idToken).kid], 'same kid as the real key')
    assert.ok(published.keys.every((key) => !('d' in key)), 'only the public key is published')
    assert.equal(decodeJwt(idToken).sub, 'ada')
    await assert.rejects(jwtVerify(idToken, jwks), { code: 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED' })
  })
})

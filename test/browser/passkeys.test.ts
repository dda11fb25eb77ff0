import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import * as client from 'openid-client'
import { addVirtualAuthenticator, gotoClient, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'

/**
 * Passkeys in a real browser (issue 24): Debian's Chromium with a CDP virtual authenticator
 * (resident keys, user verification), on a small page served from the service's own origin that
 * uses the typed client (packages/client/dist): add a passkey, log out, sign in with the passkey alone, and
 * use it as the second factor after the password. Once per engine.
 */
describe('passkeys in Chromium with a virtual authenticator', () => {
  const chromium = useChromium()

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      // WebAuthn takes no IP address as RP ID; localhost is a secure context and a valid one. The
      // page is a route of the service itself, so the passkey's origin is the service's.
      const site = useSite(engine, { host: 'localhost', clientPage: 'service', client: { transport: 'cookie' } })

      test('add a passkey, log out, sign in with it alone, then use it as the second factor after the password', async () => {
        const { t, app } = site
        // The service's API answers carry CSP default-src 'none'; the test page borrows a route of it.
        await chromium.withContext({ bypassCSP: true }, async (context) => {
          const page = await context.newPage()
          const authenticator = await addVirtualAuthenticator(context, page)
          await gotoClient(page, app.url)
          const inPage = <T>(script: string) => page.evaluate(script) as Promise<T>

          const { email, userId } = await registerVerifyLogin(t, uniqueEmail('browser-passkey'))
          await inPage(`client.login(${JSON.stringify({ email, password: PASSWORD })})`)
          const registered = await inPage<{ factor: { type: string; name: string }; recovery_codes?: string[] }>(`client.registerPasskey('This browser')`)
          assert.deepEqual([registered.factor.type, registered.factor.name], ['passkey', 'This browser'])
          assert.equal(registered.recovery_codes?.length, 10)
          const held = await authenticator.credentials()
          assert.equal(held.length, 1)
          assert.equal(held[0]!.isResidentCredential, true)
          assert.equal(Buffer.from(held[0]!.userHandle!, 'base64').toString(), userId, 'the authenticator keeps the account id as the user handle')

          await inPage('client.logout()')
          assert.equal(await inPage(`client.me().then(() => 'signed in', (error) => error.code)`), 'AUTH_REQUIRED')

          const signedIn = await inPage<{ access_token: string; refresh_token?: string }>('client.loginWithPasskey()')
          assert.equal(signedIn.refresh_token, undefined, 'cookie mode: the refresh token is in the cookie')
          const claims = decodeJwt(signedIn.access_token)
          assert.deepEqual([claims.sub, claims.amr, claims.acr], [userId, ['hwk', 'user', 'mfa'], 'aal2'])
          assert.equal(await inPage<string>('client.me().then((me) => me.email)'), email)
          assert.ok((await context.cookies()).some((cookie) => cookie.name === 'portcullis_refresh'))
          assert.ok((await authenticator.credentials())[0]!.signCount >= 1)

          // The password now asks for the second factor; the passkey answers it.
          await inPage('client.logout()')
          const challenge = await inPage<{ mfa_required?: true; mfa_token: string; methods: string[] }>(`client.login(${JSON.stringify({ email, password: PASSWORD })})`)
          assert.equal(challenge.mfa_required, true)
          assert.ok(challenge.methods.includes('passkey'))
          const verified = await inPage<{ access_token: string }>(`client.verifyMfaWithPasskey(${JSON.stringify(challenge.mfa_token)})`)
          assert.deepEqual(decodeJwt(verified.access_token).amr, ['pwd', 'hwk', 'mfa'])
          assert.equal(await inPage<string>('client.me().then((me) => me.email)'), email)
        })
      })

      test('the OpenID provider\'s sign-in page: its passkey button (under the page\'s own CSP) signs an app in without a password', async () => {
        const { t } = site
        // The relying party's callback: a server that answers, and remembers what it was sent
        // (a browser route cannot stand in: the code arrives at the end of redirects).
        let callback: URL | undefined
        const rpServer = createServer((request, response) => {
          const url = new URL(request.url ?? '/', 'http://127.0.0.1')
          if (url.pathname === '/cb') callback = url
          response.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>App</title>')
        })
        await new Promise<void>((resolve) => rpServer.listen(0, '127.0.0.1', resolve))
        const rpOrigin = `http://127.0.0.1:${(rpServer.address() as AddressInfo).port}`
        const rp = `${rpOrigin}/cb`
        const { client: registered } = await t.app.services.clients.create({ name: 'Passkey app', type: 'public', redirect_uris: [rp], first_party: true })
        const server = (await (await fetch(`${t.config.publicUrl}/.well-known/openid-configuration`)).json()) as client.ServerMetadata
        const config = new client.Configuration(server, registered.client_id, {}, client.None())
        client.allowInsecureRequests(config)
        const verifier = client.randomPKCECodeVerifier()
        const state = client.randomState()
        const url = client.buildAuthorizationUrl(config, { redirect_uri: rp, scope: 'openid', state, code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' })
        const user = await registerVerifyLogin(t, uniqueEmail('op-passkey'))
        // No bypassCSP here: the button's script must run under the sign-in page's own policy.
        try {
          await chromium.withContext(async (context) => {
            const page = await context.newPage()
            const authenticator = await addVirtualAuthenticator(context, page)
            await page.goto(url.href)
            assert.match(new URL(page.url()).pathname, /^\/oauth\/interaction\/[^/]+$/)
            // A passkey for the account, made in this browser through the API (the page's origin is the service's).
            const added = await page.evaluate(async (token) => {
              const api = `${location.origin}/api/v1`
              const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
              const { data } = await (await fetch(`${api}/auth/passkeys/register/options`, { method: 'POST', headers })).json()
              const created = (await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(data.options) })) as PublicKeyCredential
              const answer = await fetch(`${api}/auth/passkeys/register`, { method: 'POST', headers, body: JSON.stringify({ credential: created.toJSON(), name: 'This browser' }) })
              return answer.status
            }, user.access_token)
            assert.equal(added, 201)
            assert.equal((await authenticator.credentials()).length, 1)

            const button = page.getByRole('button', { name: 'Sign in with a passkey' })
            assert.ok(await button.isVisible(), 'the script showed the button')
            await Promise.all([page.waitForURL((at) => at.href.startsWith(rp)), button.click()])
            assert.ok(callback, 'the app was sent back a code')
            const tokens = await client.authorizationCodeGrant(config, new URL(`${rpOrigin}${callback.pathname}${callback.search}`), { pkceCodeVerifier: verifier, expectedState: state })
            const claims = tokens.claims()!
            assert.equal(claims.sub, user.userId)
            assert.deepEqual([claims.amr, claims.acr], [['hwk', 'user', 'mfa'], 'aal2'])
          })
        } finally {
          rpServer.close()
        }
      })
    })
  }
})

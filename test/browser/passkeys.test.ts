import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { addVirtualAuthenticator, gotoClient, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'

/**
 * Passkeys in a real browser (issue 24): Debian's Chromium with a CDP virtual authenticator
 * (resident keys, user verification), on a small page served from the service's own origin that
 * uses the typed client (dist/client): add a passkey, log out, sign in with the passkey alone, and
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
    })
  }
})

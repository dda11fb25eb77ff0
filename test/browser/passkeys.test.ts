import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import type { Browser, Page } from 'playwright-core'
import { launchBrowser } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

/**
 * Passkeys in a real browser (issue 24): Debian's Chromium with a CDP virtual authenticator
 * (resident keys, user verification), on a small page served from the service's own origin that
 * uses the typed client (dist/client): add a passkey, log out, sign in with the passkey alone, and
 * use it as the second factor after the password. Once per engine.
 */
const PAGE = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Passkeys</title></head><body>
<script type="module">
import { PortcullisClient } from '/passkey-test/client/index.js'
window.client = new PortcullisClient({ baseUrl: location.origin + '/api/v1', transport: 'cookie' })
window.ready = true
</script></body></html>`

/** The test page and the built client, as routes of the service (added before it listens). */
function servePage(t: TestApp): void {
  const dir = path.resolve('dist/client')
  if (!existsSync(path.join(dir, 'index.js'))) throw new Error('dist/client is missing: npm run build')
  t.app.get('/passkey-test', async (_request, reply) => reply.type('text/html').send(PAGE))
  t.app.get<{ Params: { file: string } }>('/passkey-test/client/:file', async (request, reply) => {
    const file = /^[a-z]+\.js$/.test(request.params.file) ? path.join(dir, request.params.file) : ''
    if (!file || !existsSync(file)) return reply.code(404).send('')
    return reply.type('text/javascript').send(readFileSync(file, 'utf8'))
  })
}

describe('passkeys in Chromium with a virtual authenticator', () => {
  let browser: Browser
  before(async () => {
    browser = await launchBrowser()
  })
  after(async () => {
    await browser?.close()
  })

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      let t: TestApp
      let origin: string
      before(async () => {
        const port = await freePort()
        // WebAuthn takes no IP address as RP ID; localhost is a secure context and a valid one.
        origin = `http://localhost:${port}`
        t = await startTestApp(engine, { env: { PORT: String(port), PUBLIC_URL: origin } })
        servePage(t)
        await t.app.listen({ port, host: '127.0.0.1' })
      })
      after(async () => {
        await t?.close()
      })

      test('add a passkey, log out, sign in with it alone, then use it as the second factor after the password', async () => {
        // The service's API answers carry CSP default-src 'none'; the test page borrows a route of it.
        const context = await browser.newContext({ bypassCSP: true })
        try {
          const page: Page = await context.newPage()
          const cdp = await context.newCDPSession(page)
          await cdp.send('WebAuthn.enable')
          const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
            options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
          })
          await page.goto(`${origin}/passkey-test`)
          await page.waitForFunction('window.ready === true')
          const inPage = <T>(script: string) => page.evaluate(script) as Promise<T>

          const { email, userId } = await registerVerifyLogin(t, uniqueEmail('browser-passkey'))
          await inPage(`client.login(${JSON.stringify({ email, password: PASSWORD })})`)
          const registered = await inPage<{ factor: { type: string; name: string }; recovery_codes?: string[] }>(`client.registerPasskey('This browser')`)
          assert.deepEqual([registered.factor.type, registered.factor.name], ['passkey', 'This browser'])
          assert.equal(registered.recovery_codes?.length, 10)
          const held = (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials
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
          assert.ok((await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials[0]!.signCount >= 1)

          // The password now asks for the second factor; the passkey answers it.
          await inPage('client.logout()')
          const challenge = await inPage<{ mfa_required?: true; mfa_token: string; methods: string[] }>(`client.login(${JSON.stringify({ email, password: PASSWORD })})`)
          assert.equal(challenge.mfa_required, true)
          assert.ok(challenge.methods.includes('passkey'))
          const verified = await inPage<{ access_token: string }>(`client.verifyMfaWithPasskey(${JSON.stringify(challenge.mfa_token)})`)
          assert.deepEqual(decodeJwt(verified.access_token).amr, ['pwd', 'hwk', 'mfa'])
          assert.equal(await inPage<string>('client.me().then((me) => me.email)'), email)
        } finally {
          await context.close()
        }
      })
    })
  }
})

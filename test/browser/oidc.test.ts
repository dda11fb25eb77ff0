import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import { clientReady, openClient, screenshots, seriousViolations, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { uniqueEmail } from '../helpers/app.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'

/**
 * "Continue with <provider>" in a real browser (issue 25), once per engine: an application page
 * using the typed client sends Chromium to the service, the service to a real OpenID provider on
 * loopback, whose own login form the test fills in; the provider sends the browser back through the
 * service's callback (the portcullis_oidc cookie coming along) to the application with a one-time
 * code, which the client exchanges for a session in cookie mode, with the PKCE verifier it kept in
 * the tab's sessionStorage when it started the flow.
 */
describe('sign-in with an identity provider in Chromium', () => {
  const chromium = useChromium()
  const shots = screenshots('oidc')

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      let provider: TestProvider
      const site = useSite(engine, {
        // The provider is told the service's callback before the service is told the provider.
        env: async (apiOrigin) => {
          provider = await startTestProvider({ redirectUris: [`${apiOrigin}/api/v1/auth/oidc/test/callback`] })
          return {
            OIDC_PROVIDERS: 'test',
            OIDC_TEST_ISSUER: provider.issuer,
            OIDC_TEST_CLIENT_ID: provider.clientId,
            OIDC_TEST_CLIENT_SECRET: provider.clientSecret,
          }
        },
      })
      after(async () => {
        await provider?.close()
      })

      test('Continue with the provider: its login page, back to the app with a code, exchanged with the tab\'s PKCE verifier for a cookie-mode session; another browser gets the refusal page', async (testContext) => {
        const { app, origin: apiOrigin } = site
        const email = uniqueEmail('browser-oidc')
        provider.addAccount({ sub: `browser-${engine}`, email, email_verified: true, name: 'Browser User' })
        await chromium.withContext(async (context) => {
          const page = await openClient(context, app.url)
          const providers = (await page.evaluate('client.oidcProviders()')) as { providers: { name: string; available: boolean }[] }
          assert.deepEqual(providers.providers.map((p) => [p.name, p.available]), [['test', true]])

          const start = (await page.evaluate(`client.startOidc('test', location.origin + '/?signed-in=1')`)) as string
          // The login code will be bound to this tab: the challenge goes to the service, the verifier stays in sessionStorage.
          const startUrl = new URL(start)
          assert.equal(startUrl.searchParams.get('code_challenge_method'), 'S256')
          assert.match(startUrl.searchParams.get('code_challenge') ?? '', /^[A-Za-z0-9_-]{43}$/)
          const verifiers = `Object.keys(sessionStorage).filter((key) => key.startsWith('portcullis.oidc.code_verifier')).length`
          assert.equal(await page.evaluate(verifiers), 1)
          await page.goto(start)
          assert.equal(new URL(page.url()).origin, provider.issuer, 'at the provider')
          await page.fill('input[name=sub]', `browser-${engine}`)
          await Promise.all([page.waitForURL((url) => url.origin === app.origin), page.click('text=Sign in')])

          const back = new URL(page.url())
          assert.equal(back.searchParams.get('signed-in'), '1')
          const loginCode = back.searchParams.get('code')
          assert.ok(loginCode, `came back with ${back.search}`)
          await clientReady(page)
          const session = (await page.evaluate(`client.exchangeOidcCode(${JSON.stringify(loginCode)})`)) as { access_token: string; refresh_token?: string }
          assert.equal(session.refresh_token, undefined, 'cookie mode')
          assert.equal(await page.evaluate(verifiers), 0, 'the verifier served its one exchange (it survived the trip through the provider)')
          assert.deepEqual(decodeJwt(session.access_token).amr, ['fed'])
          assert.equal(await page.evaluate('client.me().then((me) => me.email)'), email)
          // All of them: a URL would filter by path, and these live under the API's /api/v1/auth paths.
          const cookies = (await context.cookies()).filter((cookie) => cookie.domain === new URL(apiOrigin).hostname)
          assert.ok(cookies.some((cookie) => cookie.name === 'portcullis_refresh' && cookie.httpOnly))
          // The flow cookie stayed on the service's OIDC path, HttpOnly and Lax.
          const flow = cookies.find((cookie) => cookie.name === 'portcullis_oidc')
          assert.deepEqual([flow?.path, flow?.httpOnly, flow?.sameSite], ['/api/v1/auth/oidc', true, 'Lax'])

          // The same return in a browser that did not start the flow: the refusal page, nowhere to go.
          await chromium.withContext(async (stranger) => {
            const other = await stranger.newPage()
            const refused = await other.goto(`${apiOrigin}/api/v1/auth/oidc/test/callback?state=${'x'.repeat(43)}&code=y`)
            assert.equal(refused?.status(), 400)
            assert.equal(new URL(other.url()).origin, apiOrigin, 'no redirect')
            assert.equal(await other.textContent('h1'), 'This sign-in cannot continue')
            assert.deepEqual(await seriousViolations(other), [])
            const shot = await shots.take(other, `${engine}-sign-in-cannot-continue`)
            testContext.diagnostic(`screenshot: ${shot}`)
          })
        })
      })
    })
  }
})

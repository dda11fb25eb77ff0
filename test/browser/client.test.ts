import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { launchBrowser, serveClientApp } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

describe('the client in a real browser, cookie transport', () => {
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
      let app: Awaited<ReturnType<typeof serveClientApp>>
      let foreign: Awaited<ReturnType<typeof serveClientApp>>
      let context: BrowserContext

      before(async () => {
        const port = await freePort()
        const apiOrigin = `http://127.0.0.1:${port}`
        // The application's origin is only known once it listens; the API's CORS list needs it first.
        app = await serveClientApp(`${apiOrigin}/api/v1`)
        foreign = await serveClientApp(`${apiOrigin}/api/v1`)
        t = await startTestApp(engine, { env: { PORT: String(port), PUBLIC_URL: apiOrigin, CORS_ORIGINS: app.origin } })
        await t.app.listen({ port, host: '127.0.0.1' })
        context = await browser.newContext()
      })
      after(async () => {
        await context?.close()
        await t?.close()
        for (const served of [app, foreign]) await served?.close()
      })

      const refreshCount = async () =>
        Number((await t.app.services.db.kysely.selectFrom('audit_events').select((eb) => eb.fn.countAll().as('n')).where('type', '=', 'token.refreshed').executeTakeFirstOrThrow()).n)
      const open = async (origin: string): Promise<Page> => {
        const page = await context.newPage()
        await page.goto(`${origin}/`)
        await page.waitForFunction('window.ready === true')
        return page
      }

      test('login, reload, two tabs expiring together, a foreign origin, and logout across tabs', async () => {
        const { email } = await registerVerifyLogin(t, uniqueEmail('spa'))
        const tab1 = await open(app.origin)

        const login = (await tab1.evaluate(`client.login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)) as Record<string, unknown>
        assert.deepEqual(Object.keys(login), ['access_token', 'token_type', 'expires_in'], 'no refresh token reaches script')
        const [cookie, ...others] = (await context.cookies()).filter((c) => c.name === 'portcullis_refresh')
        assert.equal(others.length, 0)
        assert.equal(cookie!.httpOnly, true)
        assert.equal(cookie!.sameSite, 'Strict')
        assert.equal(cookie!.path, '/api/v1/auth')
        assert.ok(!((await tab1.evaluate('document.cookie')) as string).includes(cookie!.value), 'document.cookie does not hold it')
        assert.equal(((await tab1.evaluate('client.me()')) as { email: string }).email, email)

        await tab1.reload()
        await tab1.waitForFunction('window.ready === true')
        assert.equal(await tab1.evaluate('client.me().then(() => "signed in", (e) => e.code)'), 'AUTH_REQUIRED', 'a reload forgets the access token')
        assert.equal(await tab1.evaluate('client.restore()'), true, 'and the cookie restores the session')
        assert.equal(((await tab1.evaluate('client.me()')) as { email: string }).email, email)

        const tab2 = await open(app.origin)
        assert.equal(await tab2.evaluate('client.restore()'), true)

        // Both tabs' access tokens expire together; both call at once: one refresh between them.
        const refreshesBefore = await refreshCount()
        t.clock.advance(16 * 60)
        const both = await Promise.all([tab1, tab2].map((tab) => tab.evaluate('client.me().then((me) => me.email)')))
        assert.deepEqual(both, [email, email])
        assert.equal((await refreshCount()) - refreshesBefore, 1, 'one refresh for two tabs')

        // A page on an origin that is not in CORS_ORIGINS: the preflight fails for the client, and a
        // header-less request (no preflight) carries the cookie but the server ignores it.
        const evil = await open(foreign.origin)
        const attempt = await evil.evaluate('client.restore().then(String, (e) => e.code)')
        assert.equal(attempt, 'NETWORK_ERROR')
        const simple = await evil.evaluate(`fetch(${JSON.stringify(`${t.config.publicUrl}/api/v1/auth/refresh`)}, { method: 'POST', credentials: 'include' }).then((r) => r.status, () => 'blocked')`)
        assert.equal(simple, 'blocked')
        assert.equal((await refreshCount()) - refreshesBefore, 1, 'the foreign origin caused no refresh')

        await tab1.evaluate('client.logout()')
        await tab2.waitForFunction('window.ended.length > 0')
        assert.deepEqual(await tab2.evaluate('window.ended'), ['ended_in_another_tab'])
        assert.deepEqual(await tab1.evaluate('window.ended'), [], 'the tab that logged out is not told it was logged out')
        assert.equal((await context.cookies()).filter((c) => c.name === 'portcullis_refresh').length, 0, 'logout cleared the cookie')
        assert.equal(await tab2.evaluate('client.restore()'), false)
      })
    })
  }
})

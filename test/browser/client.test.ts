import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { clientReady, consoleMessages, gotoClient, openClient, serveClientApp, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'

/** A site that records the Authorization header of every request it gets, and lets any page read its answers. */
async function recordingSite(): Promise<{ origin: string; seen: (string | null)[]; close(): Promise<void> }> {
  const seen: (string | null)[] = []
  const cors = { 'access-control-allow-origin': '*', 'access-control-allow-headers': 'authorization' }
  const server: Server = createServer((request, response) => {
    if (request.method === 'OPTIONS') return response.writeHead(204, cors).end()
    seen.push(request.headers.authorization ?? null)
    response.writeHead(200, { ...cors, 'content-type': 'application/json' }).end('{}')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, close: () => new Promise((resolve) => server.close(() => resolve())) }
}

describe('the client in a real browser, cookie transport', () => {
  const chromium = useChromium()

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const shared = chromium.useContext()
      const site = useSite(engine)
      // An application's origin that is not in CORS_ORIGINS.
      let foreign: Awaited<ReturnType<typeof serveClientApp>>
      before(async () => {
        foreign = await serveClientApp(`${site.origin}/api/v1`)
      })
      after(async () => {
        await foreign?.close()
      })

      const refreshCount = async () =>
        Number((await site.t.app.services.db.kysely.selectFrom('audit_events').select((eb) => eb.fn.countAll().as('n')).where('type', '=', 'token.refreshed').executeTakeFirstOrThrow()).n)

      test('login, reload, two tabs expiring together, a foreign origin, and logout across tabs', async () => {
        const { t, app } = site
        const { context } = shared
        const { email } = await registerVerifyLogin(t, uniqueEmail('spa'))
        const tab1 = await openClient(context, app.url)

        // window.client is made without a transport: in a browser the default is the cookie.
        const login = (await tab1.evaluate(`client.login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)) as Record<string, unknown>
        assert.deepEqual(Object.keys(login), ['access_token', 'token_type', 'expires_in'], 'by default no refresh token reaches script')
        const [cookie, ...others] = (await context.cookies()).filter((c) => c.name === 'portcullis_refresh')
        assert.equal(others.length, 0)
        assert.equal(cookie!.httpOnly, true)
        assert.equal(cookie!.sameSite, 'Strict')
        assert.equal(cookie!.path, '/api/v1/auth')
        assert.ok(!((await tab1.evaluate('document.cookie')) as string).includes(cookie!.value), 'document.cookie does not hold it')
        assert.equal(((await tab1.evaluate('client.me()')) as { email: string }).email, email)

        await tab1.reload()
        await clientReady(tab1)
        assert.equal(await tab1.evaluate('client.me().then(() => "signed in", (e) => e.code)'), 'AUTH_REQUIRED', 'a reload forgets the access token')
        assert.equal(await tab1.evaluate('client.restore()'), true, 'and the cookie restores the session')
        assert.equal(((await tab1.evaluate('client.me()')) as { email: string }).email, email)

        const tab2 = await openClient(context, app.url)
        assert.equal(await tab2.evaluate('client.restore()'), true)

        // Both tabs' access tokens expire together; both call at once: one refresh between them.
        const refreshesBefore = await refreshCount()
        t.clock.advance(16 * 60)
        const both = await Promise.all([tab1, tab2].map((tab) => tab.evaluate('client.me().then((me) => me.email)')))
        assert.deepEqual(both, [email, email])
        assert.equal((await refreshCount()) - refreshesBefore, 1, 'one refresh for two tabs')

        // A page on an origin that is not in CORS_ORIGINS: the preflight fails for the client, and a
        // header-less request (no preflight) carries the cookie but the server ignores it.
        const evil = await openClient(context, foreign.url)
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

      test('the body transport only when asked for, with a console warning; storage alone does not switch it', async () => {
        const { t, app } = site
        await chromium.withContext(async (own) => {
          const page = await own.newPage()
          const warnings = consoleMessages(page, ['warning'])
          await gotoClient(page, app.url)
          assert.deepEqual(warnings, [], 'the default warns of nothing')
          const { email } = await registerVerifyLogin(t, uniqueEmail('body-in-browser'))
          const login = (await page.evaluate(`makeClient({ transport: 'body' }).login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)) as Record<string, unknown>
          assert.ok('refresh_token' in login, 'asked for explicitly, the body transport is what it says')
          assert.equal(warnings.length, 1)
          assert.match(warnings[0]!, /body transport in a browser keeps the 7-day refresh token where any script on the page can read it/)
          const storageAlone = `(() => { try { makeClient({ storage: { load: () => null, save() {}, clear() {} } }); return 'made' } catch (error) { return error.name } })()`
          assert.equal(await page.evaluate(storageAlone), 'TypeError', 'a storage without transport: "body" is refused, not taken as a request for it')
        })
      })

      test('client.fetch sends the token to the service and tokenOrigins only: a foreign URL, even through <base>, is refused unsent', async () => {
        const { t, app } = site
        const listed = await recordingSite()
        const evil = await recordingSite()
        try {
          await chromium.withContext(async (own) => {
            const page = await openClient(own, app.url)
            const { email } = await registerVerifyLogin(t, uniqueEmail('fetch-origins'))
            await page.evaluate(`(window.c = makeClient({ tokenOrigins: [${JSON.stringify(listed.origin)}] })).login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)
            const outcome = (url: string) => page.evaluate(`c.fetch(${JSON.stringify(url)}).then((response) => response.status, (error) => error.code)`)

            assert.equal(await outcome(`${evil.origin}/steal`), 'TOKEN_ORIGIN_NOT_ALLOWED')
            assert.equal(await outcome(`${app.origin}/`), 'TOKEN_ORIGIN_NOT_ALLOWED', 'not even the page\'s own origin unless listed')
            // Injected markup that rebases relative URLs onto the attacker's site.
            await page.evaluate(`document.head.append(Object.assign(document.createElement('base'), { href: ${JSON.stringify(`${evil.origin}/`)} }))`)
            assert.equal(await outcome('steal/relative'), 'TOKEN_ORIGIN_NOT_ALLOWED')
            assert.deepEqual(evil.seen, [], 'the foreign site received no request at all')

            assert.equal(await outcome(`${listed.origin}/portfolio`), 200)
            assert.match(listed.seen[0] ?? '', /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/, 'a listed origin gets the token')
            assert.equal(await outcome(`${t.config.publicUrl}/api/v1/auth/me`), 200, 'the service\'s own origin needs no listing')
          })
        } finally {
          await listed.close()
          await evil.close()
        }
      })

      test('cookie tossing: a second refresh cookie planted on a longer path is refused, so the browser is signed into neither account', async () => {
        const { t, app } = site
        await chromium.withContext(async (own) => {
          const page = await openClient(own, app.url)
          const { email } = await registerVerifyLogin(t, uniqueEmail('tossed'))
          await page.evaluate(`client.login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)
          // The attacker's own valid refresh token, planted as a sibling subdomain would: same name,
          // a longer path, so the browser sends it first, beside the victim's.
          const attacker = await registerVerifyLogin(t, uniqueEmail('tosser'))
          await own.addCookies([{ name: 'portcullis_refresh', value: attacker.refresh_token, domain: '127.0.0.1', path: '/api/v1/auth/refresh', httpOnly: true, sameSite: 'Strict', secure: false, expires: Math.floor(Date.now() / 1000) + 3600 }])
          const refreshesBefore = await refreshCount()

          await page.reload()
          await clientReady(page)
          assert.equal(await page.evaluate('client.restore()'), false, 'no session is restored, the attacker\'s least of all')
          assert.equal(await page.evaluate('client.me().then(() => "signed in", (e) => e.code)'), 'AUTH_REQUIRED')
          assert.equal((await refreshCount()) - refreshesBefore, 0, 'neither refresh token was used')
          assert.equal((await own.cookies()).filter((c) => c.name === 'portcullis_refresh').length, 2, 'the victim\'s cookie was not cleared, which would leave the planted one alone')
        })
      })
    })
  }
})

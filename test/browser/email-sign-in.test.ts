import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { decodeJwt } from 'jose'
import type { BrowserContext, BrowserContextOptions, Page, Response } from 'playwright-core'
import { registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'
import { clientReady, consoleMessages, gotoClient, screenshots, useChromium, useSite, type AxeViolation, type Site } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { mailText } from '../helpers/mail.ts'

/**
 * Sign in with an e-mailed code or link (docs/email-sign-in.md, "Sign in with an e-mailed code or link"), the
 * person's side in Debian's Chromium, once per engine. The application's page starts the sign-in
 * with the typed client, from an origin of its own (in CORS_ORIGINS, so an allowed redirect_to) and
 * from the service's origin; the mailed link opens as a mail client opens it, in a new tab of the
 * same browser (JavaScript on and off) or on another device; then a dead link, and a page of another
 * site posting the link's form. Every page of Portcullis shown is audited with axe-core (default
 * rules, any impact), kept as a screenshot, and its headers and style checked, and logs no console error.
 */

const PHONE = { width: 390, height: 844 }

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

/** Every violation axe-core finds with its default rules, whatever its impact, as `id (impact): help at nodes`. */
async function axeViolations(page: Page): Promise<string[]> {
  // page.evaluate goes through the DevTools protocol: the pages' CSP (no script) does not apply to it.
  await page.evaluate(axeSource)
  const violations = (await page.evaluate('axe.run(document).then((result) => result.violations)')) as AxeViolation[]
  return violations.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/**
 * A page of another site (`localhost`, where the service is `127.0.0.1`): /forged posts a form
 * (action and fields in its query) by itself as soon as it loads.
 */
async function startForeignSite() {
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://foreign')
    if (url.pathname !== '/forged') return response.writeHead(404).end()
    const fields = [...url.searchParams].filter(([name]) => name !== 'action').map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
    response
      .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
      .end(`<!doctype html><html lang="en"><head><title>Win a prize</title></head><body><main><h1>Win a prize</h1><form id="f" method="post" action="${escapeHtml(url.searchParams.get('action') ?? '')}">${fields.join('')}</form><script>document.getElementById('f').submit()</script></main></body></html>`)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    origin: `http://localhost:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}

/** The console errors and uncaught errors a page logs from now on, less the load of a 4xx page (asserted where expected). */
function watch(page: Page): string[] {
  return consoleMessages(page, ['error'], { except: /status of 4\d\d/, pageErrors: true })
}

/** Presses the button and waits for the navigation it starts; its answer (after any redirects). */
async function press(page: Page, button: string): Promise<Response> {
  const [response] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: button, exact: true }).click()])
  assert.ok(response, `pressing ${button} loaded a page`)
  return response
}

const heading = (page: Page) => page.locator('h1').textContent()

/**
 * Product faults found by this file, each carried by the tests it breaks (and only them) until fixed.
 * An application on an origin of its own is the case CORS_ORIGINS and redirect_to's allowed origins
 * exist for; on the service's own origin neither fault shows.
 */
describe('sign-in with an e-mailed code or link in a real browser', () => {
  const chromium = useChromium()
  const shots = screenshots('email-sign-in')
  // A tab with JavaScript on, where the markup of a page shown with it off is audited (axe.run never settles there).
  const auditing = chromium.useContext()
  let audit: Page
  let foreign: Awaited<ReturnType<typeof startForeignSite>>
  before(async () => {
    audit = await auditing.context.newPage()
    foreign = await startForeignSite()
  })
  after(async () => {
    await foreign?.close()
  })

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      // The client keeps the link's verifier in localStorage of the origin that started, so the
      // link must lead back to that origin: the application's page, wherever it is. Both places are
      // allowed redirect_to origins (PUBLIC_URL's, and CORS_ORIGINS').
      const placements = [
        { where: 'an application on its own origin', name: 'app', site: useSite(engine) },
        { where: 'an application on the service\'s origin', name: 'same', site: useSite(engine, { clientPage: 'service' }) },
      ]
      const served = placements[1]!.site

      /** The sign-in mail to email (a notice about the account may come first): its code and its link. */
      const signInMail = async (site: Site, email: string) => {
        await site.t.app.services.background.drain()
        let text = mailText(await site.t.mail.next(email))
        while (!text.includes('/sign-in/email?token=')) text = mailText(await site.t.mail.next(email))
        const code = /^(\d{6})\r?$/m.exec(text)?.[1]
        const link = /(https?:\/\/\S+\/sign-in\/email\?token=[A-Za-z0-9_-]+)/.exec(text)?.[1]
        assert.ok(code && link, text)
        assert.ok(link.startsWith(`${site.origin}/sign-in/email?token=`), link)
        return { code, link }
      }

      /**
       * A browser context (a device) for site's pages. Where the application's page is a route of
       * the service, it would carry the API's CSP (default-src 'none') and run nothing; that page
       * alone is served without it, as an application's own page would be. Portcullis's pages keep theirs.
       */
      const device = <T>(site: Site, options: BrowserContextOptions, body: (context: BrowserContext) => Promise<T>): Promise<T> =>
        chromium.withContext(options, async (context) => {
          const app = new URL(site.app.url)
          if (app.origin === site.origin) {
            await context.route((url) => url.origin === app.origin && url.pathname.startsWith(app.pathname), async (route) => {
              const response = await route.fetch()
              const headers = response.headers()
              delete headers['content-security-policy']
              await route.fulfill({ response, headers })
            })
          }
          return body(context)
        })

      /**
       * The application's page where the link led back, its client ready. On the service's origin it
       * came with the API's CSP (a redirect's answer is not routed), so it is loaded once more, as the
       * application would serve it.
       */
      const arrive = (site: Site, page: Page) => (new URL(site.app.url).origin === site.origin ? gotoClient(page, page.url()) : clientReady(page))

      /** The application's page, where the link leads back, with a query of its own. */
      const redirectOf = (site: Site) => `${site.app.url}?from=mail`

      /**
       * Starts a sign-in from context's cookie jar, as the application's page would from that browser
       * (for a context whose pages run no script, or where the client is not the point).
       */
      const startFrom = async (site: Site, context: BrowserContext, email: string) => {
        const started = await context.request.post(`${site.origin}${site.t.base}/auth/email/start`, { data: { email, redirect_to: redirectOf(site) } })
        assert.equal(started.status(), 202)
        assert.ok((await context.cookies(site.origin)).some((c) => c.name === 'portcullis_email'), 'the start bound this browser')
        return signInMail(site, email)
      }

      /** A login code from the link, exchanged with the binding of the browser that started (its cookie): the session's claims. */
      const exchangeFrom = async (site: Site, context: BrowserContext, code: string) => {
        const exchanged = await context.request.post(`${site.origin}${site.t.base}/auth/email/exchange`, { data: { code } })
        assert.equal(exchanged.status(), 200, await exchanged.text())
        return decodeJwt(((await exchanged.json()) as { data: { access_token: string } }).data.access_token)
      }

      /** Where a page is back at the application with the link's login code: that code. */
      const backAtApp = (site: Site, page: Page, response: Response): string => {
        assert.equal(response.status(), 200)
        const at = new URL(page.url())
        const app = new URL(site.app.url)
        assert.equal(`${at.origin}${at.pathname}`, `${app.origin}${app.pathname}`, `back at the application, not ${page.url()}`)
        assert.equal(at.searchParams.get('from'), 'mail', 'redirect_to\'s own query is kept')
        const code = at.searchParams.get('code')
        assert.ok(code, 'with a login code')
        return code
      }

      /**
       * A page of Portcullis's as shown: its headers (no-store, framing refused both ways), its style
       * applied, kept as a screenshot, and audited with axe-core: in the page itself, or, where the
       * page's JavaScript is off, its markup in the audit tab.
       */
      async function check(site: Site, page: Page, response: Response, name: string, options: { scriptOff?: boolean } = {}): Promise<void> {
        assert.equal(new URL(response.url()).origin, site.origin, `${name} is Portcullis's`)
        const headers = await response.allHeaders()
        assert.match(headers['content-type'] ?? '', /^text\/html/, `${name}: HTML`)
        assert.equal(headers['cache-control'], 'no-store', `${name}: cache-control`)
        assert.equal(headers['x-frame-options'], 'DENY', `${name}: x-frame-options`)
        const csp = headers['content-security-policy'] ?? ''
        assert.match(csp, /(^|;)\s*frame-ancestors 'none'\s*(;|$)/, `${name}: CSP ${csp}`)
        // The page's one stylesheet applied: its CSP hash matches the <style> it carries.
        assert.equal(await page.evaluate('getComputedStyle(document.body).backgroundColor'), 'rgb(244, 245, 247)', `${name}: styled`)
        await shots.take(page, `${engine}-${name}`)
        if (options.scriptOff) await audit.setContent(await page.content())
        assert.deepEqual(await axeViolations(options.scriptOff ? audit : page), [], `axe on ${name}`)
      }

      for (const { where, name, site } of placements) {
        test(`JavaScript on, one browser, ${where}: the client starts, the mailed link opens in a new tab, its button goes back to the application with a code that signs in with amr otp`, async () => {
          const { t, app } = site
          const { email } = await registerVerifyLogin(t, uniqueEmail('link'))
          await device(site, {}, async (context) => {
            const appTab = await context.newPage()
            const appErrors = watch(appTab)
            await gotoClient(appTab, app.url)
            await appTab.evaluate(`client.startEmailSignIn(${JSON.stringify(email)}, ${JSON.stringify(redirectOf(site))})`)
            const bound = (await context.cookies(site.origin)).find((c) => c.name === 'portcullis_email')
            assert.ok(bound, 'the start\'s answer bound this browser')
            assert.deepEqual([bound.httpOnly, bound.sameSite, bound.path], [true, 'Lax', '/'])
            const verifiers = `Object.keys(localStorage).filter((key) => key.startsWith('portcullis.email.')).length`
            assert.equal(await appTab.evaluate(verifiers), 1, 'the verifier waits in localStorage')

            // The mail client opens the link in a new tab of the same browser.
            const { link } = await signInMail(site, email)
            const linkTab = await context.newPage()
            const errors = watch(linkTab)
            const shown = await linkTab.goto(link)
            assert.equal(shown?.status(), 200)
            assert.equal(await heading(linkTab), `Sign in to ${t.config.appName}`)
            await check(site, linkTab, shown!, `${name}-1-link`)
            assert.deepEqual(errors, [], 'the link page')

            const code = backAtApp(site, linkTab, await press(linkTab, 'Sign in'))
            await arrive(site, linkTab)
            const session = (await linkTab.evaluate(`client.completeEmailLink(${JSON.stringify(code)})`)) as { access_token: string }
            const claims = decodeJwt(session.access_token)
            assert.deepEqual([claims.amr, claims.acr], [['otp'], 'aal1'])
            assert.equal(((await linkTab.evaluate('client.me()')) as { email: string }).email, email)
            assert.equal(await linkTab.evaluate(verifiers), 0, 'the verifier is gone once used')
            assert.deepEqual(appErrors, [], 'the application tab')
          })
        })

        test(`JavaScript off, on a phone, ${where}: the link's page is a plain form; its button goes back to the application with a code this browser exchanges`, async () => {
          const { t } = site
          const { email } = await registerVerifyLogin(t, uniqueEmail('no-script'))
          await device(site, { javaScriptEnabled: false, viewport: PHONE }, async (context) => {
            const { link } = await startFrom(site, context, email)
            const page = await context.newPage()
            const errors = watch(page)
            const shown = await page.goto(link)
            assert.equal(shown?.status(), 200)
            assert.equal(await heading(page), `Sign in to ${t.config.appName}`)
            await check(site, page, shown!, `${name}-2-link-no-script`, { scriptOff: true })
            assert.deepEqual(errors, [], 'the link page')

            const code = backAtApp(site, page, await press(page, 'Sign in'))
            assert.deepEqual((await exchangeFrom(site, context, code)).amr, ['otp'])
          })
        })

        test(`another device, ${where}: the link's button there shows the mail's 6-digit code, which typed where the sign-in started signs that browser in`, async () => {
          const { t, app } = site
          const { email } = await registerVerifyLogin(t, uniqueEmail('two-devices'))
          await device(site, {}, async (started) => {
            const appTab = await started.newPage()
            const appErrors = watch(appTab)
            await gotoClient(appTab, app.url)
            await appTab.evaluate(`client.startEmailSignIn(${JSON.stringify(email)}, ${JSON.stringify(redirectOf(site))})`)
            const mail = await signInMail(site, email)

            const shownCode = await device(site, {}, async (other) => {
              const page = await other.newPage()
              const errors = watch(page)
              const shown = await page.goto(mail.link)
              assert.equal(shown?.status(), 200)
              await check(site, page, shown!, `${name}-3-link-other-device`)
              const answer = await press(page, 'Sign in')
              assert.equal(answer.status(), 200)
              assert.equal(page.url(), `${site.origin}/sign-in/email`, 'not sent to the application')
              assert.equal(await heading(page), 'Type this code')
              await check(site, page, answer, `${name}-4-code-other-device`)
              assert.deepEqual((await other.cookies()).map((c) => c.name), [], 'nothing signs this device in')
              assert.deepEqual(errors, [])
              return (await page.locator('.code').textContent())?.trim()
            })
            assert.equal(shownCode, mail.code, 'the page shows the mail\'s code')

            const session = (await appTab.evaluate(`client.verifyEmailCode(${JSON.stringify(email)}, ${JSON.stringify(shownCode)})`)) as { access_token: string }
            assert.deepEqual(decodeJwt(session.access_token).amr, ['otp'])
            assert.equal(((await appTab.evaluate('client.me()')) as { email: string }).email, email)
            assert.deepEqual(appErrors, [])
          })
        })
      }

      // The two below need a working way back (see FAULTS.formAction): the application on the service's origin.
      test('a dead link (unknown, or used in another tab) shows the 400 page saying so', async () => {
        const { email } = await registerVerifyLogin(served.t, uniqueEmail('dead'))
        await device(served, {}, async (context) => {
          const page = await context.newPage()
          const errors = watch(page)
          const unknown = await page.goto(`${served.origin}/sign-in/email?token=${'A'.repeat(43)}`)
          assert.equal(unknown?.status(), 400)
          assert.equal(await heading(page), 'This link no longer works')
          await check(served, page, unknown!, '5-dead-unknown')

          // The link open in two tabs: the first one's button signs in; the second one's then finds it used.
          const { link } = await startFrom(served, context, email)
          const first = await context.newPage()
          await first.goto(link)
          assert.equal((await page.goto(link))?.status(), 200)
          const code = backAtApp(served, first, await press(first, 'Sign in'))
          const late = await press(page, 'Sign in')
          assert.equal(late.status(), 400)
          assert.equal(await heading(page), 'This link no longer works')
          await check(served, page, late, '6-dead-used')
          assert.equal((await page.goto(link))?.status(), 400, 'the used link\'s GET too')
          assert.deepEqual((await exchangeFrom(served, context, code)).amr, ['otp'], 'the first tab\'s code signs in')
          assert.deepEqual(errors, [])
        })
      })

      test('a page of another site that posts the link\'s form gets the "sent from another site" page (403); the link still works afterwards', async () => {
        const { email } = await registerVerifyLogin(served.t, uniqueEmail('forged'))
        await device(served, {}, async (context) => {
          const { link } = await startFrom(served, context, email)
          const action = `${served.origin}/sign-in/email`
          const page = await context.newPage()
          const errors = watch(page)
          const forged = new URL(`${foreign.origin}/forged`)
          forged.search = new URLSearchParams({ action, token: new URL(link).searchParams.get('token')! }).toString()
          const [refused] = await Promise.all([
            page.waitForResponse((response) => response.url() === action && response.request().method() === 'POST'),
            page.goto(forged.href),
          ])
          await page.waitForURL(action)
          assert.equal(refused.status(), 403)
          assert.equal(await heading(page), 'This form was sent from another site')
          await check(served, page, refused, '7-refused-cross-site')

          const shown = await page.goto(link)
          assert.equal(shown?.status(), 200, 'the link is still live')
          assert.deepEqual(errors, [], 'Portcullis\'s pages')
          const code = backAtApp(served, page, await press(page, 'Sign in'))
          assert.deepEqual((await exchangeFrom(served, context, code)).amr, ['otp'])
        })
      })

      test('where the screenshots are', (testContext) => {
        testContext.diagnostic(`screenshots in ${shots.dir}`)
      })
    })
  }
})

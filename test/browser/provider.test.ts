import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import * as client from 'openid-client'
import type { Page, Response } from 'playwright-core'
import { registerVerifyLogin, PASSWORD } from '../helpers/app.ts'
import { consoleMessages, screenshots, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { oathtool } from '../helpers/totp.ts'
import type { ClientCreate } from '../../src/provider/schemas.ts'

/**
 * Portcullis as an OpenID provider, the person's side in Debian's Chromium (docs/provider.md, "Portcullis as
 * an OpenID provider": no-JS pages, axe-clean, CSRF-safe, no-store, framing refused), once per
 * engine: a relying party on loopback (openid-client, PKCE) sends the browser to the sign-in page,
 * the second-factor page and the consent page, and to the pages the library renders (the error
 * page, the end-session confirmation); pages of another origin try to post the sign-in form and to
 * frame it. Every page shown is audited with axe-core (default rules, any impact), kept as a
 * screenshot, and its headers checked; no page may log a console error (a CSP that blocks the
 * pages' own style or a form's redirect shows up there).
 */

const SCOPE = 'openid profile email offline_access watchlists:read'
/** The consent page's words for SCOPE, in its order (src/pages/provider.ts). */
const SCOPE_WORDS = [
  'Know who you are when you sign in',
  'See your name',
  'See your e-mail address',
  'Stay signed in when you are not using it',
  'Read your watchlists',
]

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

interface AxeViolation {
  id: string
  impact: string | null
  help: string
  nodes: { target: string[] }[]
}

/** Every violation axe-core finds in the page with its default rules, whatever its impact, as `id (impact): nodes`. */
async function axeViolations(page: Page): Promise<string[]> {
  // page.evaluate goes through the DevTools protocol: the pages' CSP (no script) does not apply to it.
  await page.evaluate(axeSource)
  const violations = (await page.evaluate('axe.run(document).then((result) => result.violations)')) as AxeViolation[]
  return violations.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/**
 * The relying party's own origin on loopback: the redirect URI (/cb) and the post-logout URI
 * (/logged-out), each recording the query it was sent; and, as pages of another origin, /forged,
 * which posts a form (action and fields in its query) by itself as soon as it loads, and /framing,
 * which frames the page its query names.
 */
async function startRelyingParty() {
  const received: URL[] = []
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://rp')
    const page = (title: string, body = '') =>
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(`<!doctype html><html lang="en"><head><title>${title}</title></head><body><main><h1>${title}</h1>${body}</main></body></html>`)
    if (url.pathname === '/cb' || url.pathname === '/logged-out') {
      received.push(new URL(request.url!, origin))
      return page('Back at the app')
    }
    if (url.pathname === '/framing') {
      return page('Framing', `<iframe src="${escapeHtml(url.searchParams.get('src') ?? '')}" title="Framed"></iframe>`)
    }
    if (url.pathname === '/forged') {
      const fields = [...url.searchParams].filter(([name]) => name !== 'action').map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
      return page('Win a prize', `<form id="f" method="post" action="${escapeHtml(url.searchParams.get('action') ?? '')}">${fields.join('')}</form><script>document.getElementById('f').submit()</script>`)
    }
    response.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const origin = `http://127.0.0.1:${port}`
  return {
    origin,
    /** The same server under another host name: another site to the browser, not only another origin. */
    otherSite: `http://localhost:${port}`,
    redirectUri: `${origin}/cb`,
    loggedOutUri: `${origin}/logged-out`,
    /** What the RP was sent at /cb and /logged-out, oldest first. */
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}

/**
 * What a page does from now on: the console errors and uncaught errors it logs. Chromium also
 * logs a page whose own status is 4xx as a failed load; those statuses are asserted where expected.
 */
function watch(page: Page): { errors: string[] } {
  return { errors: consoleMessages(page, ['error'], { except: /status of 4\d\d/, pageErrors: true }) }
}

/** Presses the button and waits for the navigation it starts; its answer (after any redirects). */
async function press(page: Page, button: string): Promise<Response> {
  const [response] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: button, exact: true }).click()])
  assert.ok(response, `pressing ${button} loaded a page`)
  return response
}

describe('the OpenID provider\'s pages in a real browser', () => {
  const chromium = useChromium()
  const shots = screenshots('provider')
  // A tab with JavaScript on, where the markup of a page shown with it off is audited.
  const auditing = chromium.useContext()
  let audit: Page
  before(async () => {
    audit = await auditing.context.newPage()
  })

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const site = useSite(engine, { clientPage: 'none' })
      let rp: Awaited<ReturnType<typeof startRelyingParty>>
      /** A third-party client (consent asked), and a first-party one (not asked), both the RP's. */
      let partner: client.Configuration
      let firstParty: client.Configuration

      before(async () => {
        rp = await startRelyingParty()
        const discovered = await fetch(`${site.origin}/.well-known/openid-configuration`)
        assert.equal(discovered.status, 200)
        const server = (await discovered.json()) as client.ServerMetadata
        const register = async (fields: Partial<ClientCreate>) => {
          const { client: registered } = await site.t.app.services.clients.create({ type: 'public', redirect_uris: [rp.redirectUri], ...fields } as ClientCreate)
          const config = new client.Configuration(server, registered.client_id, {}, client.None())
          client.allowInsecureRequests(config)
          return config
        }
        partner = await register({ name: 'Partner app', post_logout_redirect_uris: [rp.loggedOutUri] })
        firstParty = await register({ name: 'Our own app', first_party: true })
      })
      after(async () => {
        await rp?.close()
      })

      const heading = (page: Page) => page.locator('h1').textContent()

      /** An authorization request as a careful RP makes it: PKCE S256, state, nonce. */
      const authorization = async (config: client.Configuration, params: Record<string, string> = {}) => {
        const verifier = client.randomPKCECodeVerifier()
        const checks = { pkceCodeVerifier: verifier, expectedState: client.randomState(), expectedNonce: client.randomNonce() }
        const url = client.buildAuthorizationUrl(config, {
          redirect_uri: rp.redirectUri,
          scope: 'openid',
          code_challenge: await client.calculatePKCECodeChallenge(verifier),
          code_challenge_method: 'S256',
          state: checks.expectedState,
          nonce: checks.expectedNonce,
          ...params,
        })
        return { url: url.href, checks }
      }

      /**
       * A page of Portcullis's as shown: its headers (no-store, framing refused both ways), its style
       * applied, kept as a screenshot, and audited with axe-core: in the page itself, or, where the
       * page's JavaScript is off (axe.run never settles there), its markup in the audit tab.
       */
      async function check(page: Page, response: Response, name: string, options: { scriptOff?: boolean } = {}): Promise<void> {
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

      /** The sign-in page of an authorization request: opened, checked, its interaction's URL. */
      const openSignIn = async (page: Page, url: string, clientName: string, name?: string, options: { scriptOff?: boolean } = {}) => {
        const shown = await page.goto(url)
        assert.equal(shown?.status(), 200)
        assert.match(new URL(page.url()).pathname, /^\/oauth\/interaction\/[^/]+$/)
        assert.equal(await heading(page), `Sign in to continue to ${clientName}`)
        if (name) await check(page, shown!, name, options)
        return page.url()
      }

      const typePassword = async (page: Page, email: string, password: string) => {
        await page.getByLabel('E-mail address').fill(email)
        await page.getByLabel('Password').fill(password)
      }

      /** The RP's last callback: where the browser is, and what the RP's server was sent. */
      const callback = async (page: Page, response: Response): Promise<URL> => {
        assert.equal(response.status(), 200)
        const at = new URL(page.url())
        assert.equal(`${at.origin}${at.pathname}`, rp.redirectUri, `at the RP, not ${page.url()}`)
        const received = rp.received.at(-1)!
        assert.equal(received.href, at.href, 'the RP was sent what the browser shows')
        return received
      }

      /** Consent as the third-party client asks it: the client by name, each scope in words; Allow. */
      const consent = async (page: Page, shown: Response, name?: string, options: { scriptOff?: boolean } = {}): Promise<Response> => {
        assert.equal(shown.status(), 200)
        assert.equal(await heading(page), 'Allow Partner app to use your account?')
        assert.deepEqual(await page.locator('main li').allTextContents(), SCOPE_WORDS)
        if (name) await check(page, shown, name, options)
        return press(page, 'Allow')
      }

      test('JavaScript on: a wrong password is shown on the page; the right one leads to consent naming the client and each scope; Allow sends the RP a code and iss, exchanged for the user\'s ID token', async () => {
        const user = await registerVerifyLogin(site.t)
        await chromium.withContext(async (context) => {
          const page = await context.newPage()
          const { errors } = watch(page)
          const request = await authorization(partner, { scope: SCOPE, prompt: 'consent' })
          const signInUrl = await openSignIn(page, request.url, 'Partner app', '1-sign-in')

          await typePassword(page, user.email, 'not the password at all')
          const wrong = await press(page, 'Sign in')
          assert.equal(wrong.status(), 401)
          assert.equal(page.url(), `${signInUrl}/login`)
          assert.equal(await heading(page), 'Sign in to continue to Partner app')
          const alert = page.getByRole('alert')
          assert.equal(await alert.textContent(), 'That e-mail address and password do not match an account.')
          assert.ok(await alert.isVisible())
          assert.equal(await page.getByLabel('E-mail address').inputValue(), user.email, 'the address is kept')
          assert.equal(await page.getByLabel('Password').inputValue(), '', 'the password is not sent back')
          // The message is about the pair: neither field is marked as the wrong one.
          assert.equal(await page.locator('[aria-invalid]').count(), 0)
          await check(page, wrong, '2-sign-in-wrong-password')

          await typePassword(page, user.email, PASSWORD)
          const consentPage = await press(page, 'Sign in')
          const back = await callback(page, await consent(page, consentPage, '3-consent'))
          assert.equal(back.searchParams.get('iss'), site.origin, 'RFC 9207')
          assert.equal(back.searchParams.get('state'), request.checks.expectedState)
          assert.ok(back.searchParams.get('code'))

          const tokens = await client.authorizationCodeGrant(partner, back, request.checks)
          const claims = tokens.claims()!
          assert.equal(claims.iss, site.origin)
          assert.equal(claims.sub, user.userId)
          assert.equal(claims.aud, partner.clientMetadata().client_id)
          assert.equal(claims.acr, 'aal1')
          assert.ok(tokens.refresh_token, 'offline_access was granted')
          // The scopes' claims are at userinfo (an access token was issued with the ID token).
          const info = await client.fetchUserInfo(partner, tokens.access_token, user.userId)
          assert.deepEqual([info.email, info.email_verified, info.name], [user.email, true, 'Test User'])
          assert.deepEqual(errors, [])
        })
      })

      test('JavaScript on, an account with TOTP: password, the code page, a code from oathtool; the RP gets a code and the ID token says acr aal2', async () => {
        const { t } = site
        const user = await registerVerifyLogin(t)
        const started = await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)
        assert.equal(started.statusCode, 201, started.body)
        const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
        const confirmed = await t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, user.access_token)
        assert.equal(confirmed.statusCode, 200, confirmed.body)

        await chromium.withContext(async (context) => {
          const page = await context.newPage()
          const { errors } = watch(page)
          const request = await authorization(firstParty)
          await openSignIn(page, request.url, 'Our own app')
          await typePassword(page, user.email, PASSWORD)
          const codePage = await press(page, 'Sign in')
          assert.equal(codePage.status(), 200)
          assert.equal(await heading(page), 'Enter your code')
          await check(page, codePage, '4-code')
          // The next step's code: the enrolment used this one. A first-party client: no consent page.
          await page.getByLabel('Code').fill(oathtool(secret, t.clock.now(), 1))
          const back = await callback(page, await press(page, 'Continue'))
          assert.equal(back.searchParams.get('iss'), site.origin)
          const claims = (await client.authorizationCodeGrant(firstParty, back, request.checks)).claims()!
          assert.equal(claims.sub, user.userId)
          assert.equal(claims.acr, 'aal2')
          assert.ok((claims.amr as string[]).includes('otp'), JSON.stringify(claims.amr))
          assert.deepEqual(errors, [])
        })
      })

      test('JavaScript off: the sign-in and consent pages are plain forms that work', async () => {
        const user = await registerVerifyLogin(site.t)
        await chromium.withContext({ javaScriptEnabled: false }, async (context) => {
          const page = await context.newPage()
          const { errors } = watch(page)
          const request = await authorization(partner, { scope: SCOPE, prompt: 'consent' })
          await openSignIn(page, request.url, 'Partner app', '5-no-js-sign-in', { scriptOff: true })
          await typePassword(page, user.email, PASSWORD)
          const consentPage = await press(page, 'Sign in')
          const back = await callback(page, await consent(page, consentPage, '6-no-js-consent', { scriptOff: true }))
          assert.equal(back.searchParams.get('iss'), site.origin)
          assert.equal((await client.authorizationCodeGrant(partner, back, request.checks)).claims()!.sub, user.userId)
          assert.deepEqual(errors, [])
        })
      })

      test('an unregistered redirect_uri gets the error page and no redirect', async () => {
        await chromium.withContext(async (context) => {
          const page = await context.newPage()
          const { errors } = watch(page)
          const received = rp.received.length
          const request = await authorization(partner, { redirect_uri: `${rp.origin}/elsewhere` })
          const shown = await page.goto(request.url)
          assert.equal(shown?.status(), 400)
          assert.equal(new URL(page.url()).origin, site.origin, 'no redirect')
          assert.equal(await heading(page), 'This sign-in cannot continue')
          await check(page, shown!, '7-error-unregistered-redirect-uri')
          assert.equal(rp.received.length, received, 'the RP was sent nothing')
          assert.deepEqual(errors, [])
        })
      })

      test('a form on another origin that posts the password to the interaction\'s /login gets the "sent from another site" page and signs no one in; a frame there shows nothing', async () => {
        const { t } = site
        const user = await registerVerifyLogin(t)
        const signIns = async () => (await t.app.services.accounts.events({ email: user.email })).filter((event) => event.type === 'login.succeeded').length
        const before = await signIns()
        await chromium.withContext(async (context) => {
          const signInPage = await context.newPage()
          const signInUrl = await openSignIn(signInPage, (await authorization(partner)).url, 'Partner app')
          const received = rp.received.length
          // Another port of the same host (same site: the interaction's Lax cookies come along), then another host (cross-site).
          for (const [which, origin] of [['same-site', rp.origin], ['cross-site', rp.otherSite]] as const) {
            const page = await context.newPage()
            const { errors } = watch(page)
            const forged = new URL(`${origin}/forged`)
            forged.search = new URLSearchParams({ action: `${signInUrl}/login`, email: user.email, password: PASSWORD }).toString()
            const [refused] = await Promise.all([
              page.waitForResponse((response) => response.url() === `${signInUrl}/login` && response.request().method() === 'POST'),
              page.goto(forged.href),
            ])
            await page.waitForURL(`${signInUrl}/login`)
            assert.equal(refused.status(), 403, which)
            assert.equal(await heading(page), 'This form was sent from another site')
            await check(page, refused, `8-refused-${which}-post`)
            assert.deepEqual(errors, [], which)
            await page.close()
          }
          // Nor can it frame the sign-in page: Chromium refuses to show it there.
          const framing = await context.newPage()
          const refusals = consoleMessages(framing, ['error'], { except: /status of 4\d\d/ })
          await framing.goto(`${rp.origin}/framing?src=${encodeURIComponent(signInUrl)}`)
          const framed = framing.frames().find((frame) => frame !== framing.mainFrame())!
          assert.match(framed.url(), /^chrome-error:/, 'the frame shows Chromium\'s "blocked" page')
          assert.ok(!(await framed.locator('h1').allTextContents()).some((text) => text.includes('Partner app')), 'not the sign-in page')
          assert.ok(refusals.some((message) => /frame-ancestors|X-Frame-Options/i.test(message)), JSON.stringify(refusals))
          await framing.close()

          assert.equal(await signIns(), before, 'no sign-in')
          assert.equal(rp.received.length, received, 'the RP was sent nothing')
          // The interaction still waits for a sign-in.
          await signInPage.reload()
          assert.equal(await heading(signInPage), 'Sign in to continue to Partner app')
        })
      })

      test('end-session: after a sign-in, the confirm page\'s "Sign out" lands on the RP\'s logged-out URI, and the browser is signed out', async () => {
        const user = await registerVerifyLogin(site.t)
        await chromium.withContext(async (context) => {
          const page = await context.newPage()
          const { errors } = watch(page)
          const request = await authorization(partner, { scope: SCOPE, prompt: 'consent' })
          await openSignIn(page, request.url, 'Partner app')
          await typePassword(page, user.email, PASSWORD)
          const back = await callback(page, await consent(page, await press(page, 'Sign in')))
          const tokens = await client.authorizationCodeGrant(partner, back, request.checks)

          const state = client.randomState()
          const confirm = await page.goto(client.buildEndSessionUrl(partner, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: rp.loggedOutUri, state }).href)
          assert.equal(confirm?.status(), 200)
          assert.equal(await heading(page), 'Sign out?')
          await check(page, confirm!, '9-end-session-confirm')
          const done = await press(page, 'Sign out')
          assert.equal(done.status(), 200)
          const loggedOut = new URL(page.url())
          assert.equal(`${loggedOut.origin}${loggedOut.pathname}`, rp.loggedOutUri)
          assert.equal(rp.received.at(-1)!.href, loggedOut.href)
          assert.equal(loggedOut.searchParams.get('state'), state)

          const silent = await authorization(partner, { prompt: 'none' })
          const answer = await callback(page, (await page.goto(silent.url))!)
          assert.equal(answer.searchParams.get('error'), 'login_required', 'signed out of Portcullis')
          assert.deepEqual(errors, [])
        })
      })
    })
  }

  test('the screenshots are kept', (testContext) => {
    testContext.diagnostic(`screenshots in ${shots.dir}`)
  })
})

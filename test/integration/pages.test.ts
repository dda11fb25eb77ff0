import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { ErrorCodes } from '../../src/errors.ts'
import { ENGINES } from '../helpers/db.ts'
import { linkFromMail, mailParts, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

const NEW_PASSWORD = 'a brand new passphrase'
const FORM = 'application/x-www-form-urlencoded'

for (const engine of ENGINES) {
  describe(`pages for the mailed links on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine)
    })
    after(async () => {
      await t.close()
    })

    const page = (url: string) => t.app.inject({ method: 'GET', url })
    const submit = (url: string, fields: Record<string, string>, headers: Record<string, string> = {}) =>
      t.app.inject({ method: 'POST', url, headers: { 'content-type': FORM, ...headers }, payload: new URLSearchParams(fields).toString() })
    const h1 = (response: LightMyRequestResponse) => /<h1>([^<]*)<\/h1>/.exec(response.body)?.[1]
    const hidden = (response: LightMyRequestResponse, name: string) => new RegExp(`<input type="hidden" name="${name}" value="([^"]*)">`).exec(response.body)?.[1]
    const isHtmlPage = (response: LightMyRequestResponse) => {
      assert.equal(response.headers['content-type'], 'text/html; charset=utf-8')
      assert.match(response.body, /^<!doctype html>\n<html lang="en">/)
      assert.doesNotMatch(response.body, /"success":|"error":/, 'no envelope on a page')
      for (const code of Object.keys(ErrorCodes)) assert.ok(!response.body.includes(code), `no error code (${code}) on a page`)
    }
    const register = async (email = uniqueEmail()) => {
      const response = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Page User' })
      assert.equal(response.statusCode, 201, response.body)
      return { email, mail: await t.mail.next(email) }
    }
    const loginStatus = async (email: string, password: string) => (await t.post('/auth/login', { email, password })).statusCode

    describe('verification', () => {
      test('the mailed link opens a page whose GET, even repeated, consumes nothing; the button confirms', async () => {
        const { email, mail } = await register()
        const link = new URL(linkFromMail(mail))
        assert.equal(link.pathname, '/verify-email')
        const token = link.searchParams.get('token')!
        for (let i = 0; i < 2; i++) {
          const shown = await page(link.pathname + link.search)
          assert.equal(shown.statusCode, 200)
          isHtmlPage(shown)
          assert.equal(hidden(shown, 'token'), token, 'the token travels on in a hidden field')
          assert.match(shown.body, /<form method="post" action="verify-email"/)
        }
        assert.equal(await loginStatus(email, PASSWORD), 403, 'not verified by the GETs')

        const confirmed = await submit('/verify-email', { token })
        assert.equal(confirmed.statusCode, 200)
        isHtmlPage(confirmed)
        assert.equal(h1(confirmed), 'Address confirmed')
        assert.ok(confirmed.body.includes(email))
        assert.equal(await loginStatus(email, PASSWORD), 200)

        const again = await submit('/verify-email', { token })
        assert.equal(again.statusCode, 400, 'single use')
        assert.equal(h1(again), 'This link no longer works')
        assert.match(again.body, /<form method="post" action="resend-verification"/)
      })

      test('an unknown, used, missing, repeated or oversized token gets the same 400 page with a form for a new link', async () => {
        const unknown = await submit('/verify-email', { token: 'A'.repeat(43) })
        assert.equal(unknown.statusCode, 400)
        isHtmlPage(unknown)
        for (const response of [
          await submit('/verify-email', {}),
          await submit('/verify-email', { token: 'A'.repeat(5000) }),
          await page('/verify-email'),
          await page(`/verify-email?token=${'A'.repeat(43)}`),
          await page('/verify-email?token=a&token=b'),
        ]) {
          assert.equal(response.statusCode, 400)
          assert.equal(response.body, unknown.body)
        }
      })

      test('an expired token (24 h) is refused on the page as in the API', async () => {
        const { email, mail } = await register()
        const token = tokenFromMail(mail)
        t.clock.advance(24 * 3600 + 1)
        try {
          assert.equal((await page(`/verify-email?token=${token}`)).statusCode, 400)
          assert.equal((await submit('/verify-email', { token })).statusCode, 400)
        } finally {
          t.clock.advance(-(24 * 3600 + 1))
        }
        assert.equal(await loginStatus(email, PASSWORD), 403)
      })

      test('resend answers the same page whether or not the address has an account; only the unverified one gets mail', async () => {
        const { email } = await register()
        const known = await submit('/resend-verification', { email })
        const unknown = await submit('/resend-verification', { email: uniqueEmail('ghost') })
        assert.equal(known.statusCode, 200)
        isHtmlPage(known)
        assert.equal(h1(known), 'Check your mail')
        assert.equal(known.body, unknown.body)
        const fresh = tokenFromMail(await t.mail.next(email))
        assert.equal((await submit('/verify-email', { token: fresh })).statusCode, 200)
      })
    })

    describe('password reset', () => {
      test('forgot, link, a mismatch and a refused password keep the token; the right one changes it and revokes every session', async () => {
        const user = await registerVerifyLogin(t)
        const asked = await submit('/forgot-password', { email: user.email })
        assert.equal(asked.statusCode, 200)
        assert.equal(h1(asked), 'Check your mail')
        const link = new URL(linkFromMail(await t.mail.next(user.email)))
        assert.equal(link.pathname, '/reset-password')
        const token = link.searchParams.get('token')!

        for (let i = 0; i < 2; i++) {
          const form = await page(link.pathname + link.search)
          assert.equal(form.statusCode, 200)
          isHtmlPage(form)
          assert.equal(hidden(form, 'token'), token)
          assert.equal([...form.body.matchAll(/autocomplete="new-password"/g)].length, 2)
          assert.match(form.body, /<label for="password">/)
          assert.match(form.body, /<label for="password_confirmation">/)
          assert.match(form.body, new RegExp(`autocomplete="username" value="${user.email}" readonly`))
        }

        const mismatch = await submit('/reset-password', { token, password: NEW_PASSWORD, password_confirmation: `${NEW_PASSWORD}!` })
        assert.equal(mismatch.statusCode, 400)
        isHtmlPage(mismatch)
        assert.equal(hidden(mismatch, 'token'), token, 'token kept')
        assert.match(mismatch.body, /aria-describedby="password_confirmation-error" aria-invalid="true" autofocus>/)
        assert.match(mismatch.body, /<p class="error" id="password_confirmation-error">The two passwords are not the same.<\/p>/)

        const weak = await submit('/reset-password', { token, password: 'password123', password_confirmation: 'password123' })
        assert.equal(weak.statusCode, 400)
        assert.equal(hidden(weak, 'token'), token)
        assert.match(weak.body, /id="password-error">This password [^<]+<\/p>/)

        assert.equal((await t.get('/auth/me', user.access_token)).statusCode, 200, 'nothing changed yet')
        assert.equal(await loginStatus(user.email, PASSWORD), 200)

        const changed = await submit('/reset-password', { token, password: NEW_PASSWORD, password_confirmation: NEW_PASSWORD })
        assert.equal(changed.statusCode, 200)
        isHtmlPage(changed)
        assert.equal(h1(changed), 'Password changed')
        assert.equal((await t.get('/auth/me', user.access_token)).json().error.code, 'INVALID_TOKEN', 'sessions revoked')
        assert.equal(await loginStatus(user.email, PASSWORD), 401)
        assert.equal(await loginStatus(user.email, NEW_PASSWORD), 200)

        const reused = await submit('/reset-password', { token, password: PASSWORD, password_confirmation: PASSWORD })
        assert.equal(reused.statusCode, 400)
        assert.equal(h1(reused), 'This link no longer works')
        assert.match(reused.body, /action="forgot-password"/)
        assert.equal((await page(link.pathname + link.search)).statusCode, 400)
      })

      test('forgot-password answers byte-identically for a known and an unknown address', async () => {
        const user = await registerVerifyLogin(t)
        const known = await submit('/forgot-password', { email: user.email })
        const unknown = await submit('/forgot-password', { email: uniqueEmail('ghost') })
        assert.equal(known.statusCode, unknown.statusCode)
        assert.equal(known.body, unknown.body)
        await t.mail.next(user.email)
      })

      test('the forgot form shows the field error for a malformed address, with the value kept and escaped', async () => {
        const form = await page('/forgot-password')
        assert.equal(form.statusCode, 200)
        isHtmlPage(form)
        assert.match(form.body, /<label for="email">E-mail address<\/label>/)
        const bad = await submit('/forgot-password', { email: '"><script>x</script>' })
        assert.equal(bad.statusCode, 400)
        assert.ok(!bad.body.includes('<script>'))
        assert.match(bad.body, /value="&quot;&gt;&lt;script&gt;x&lt;\/script&gt;"/)
        assert.match(bad.body, /aria-describedby="email-error" aria-invalid="true"/)
        for (const path of ['/forgot-password', '/resend-verification']) {
          const missing = await submit(path, {})
          assert.equal(missing.statusCode, 400, path)
          isHtmlPage(missing)
          assert.match(missing.body, /<p class="error" id="email-error">This address is required.<\/p>/)
        }
      })

      test('a refused request (wrong content type, too large a body) consumes nothing', async () => {
        const user = await registerVerifyLogin(t)
        await submit('/forgot-password', { email: user.email })
        const token = tokenFromMail(await t.mail.next(user.email))
        const fields = { token, password: NEW_PASSWORD, password_confirmation: NEW_PASSWORD }

        const json = await t.app.inject({ method: 'POST', url: '/reset-password', headers: { 'content-type': 'application/json' }, payload: JSON.stringify(fields) })
        assert.equal(json.statusCode, 415)
        isHtmlPage(json)
        const multipart = await t.app.inject({ method: 'POST', url: '/reset-password', headers: { 'content-type': 'multipart/form-data; boundary=x' }, payload: '--x--' })
        assert.equal(multipart.statusCode, 415)
        const huge = await submit('/reset-password', { ...fields, filler: 'x'.repeat(20_000) })
        assert.equal(huge.statusCode, 413)
        isHtmlPage(huge)
        assert.equal(h1(huge), 'That was too much')

        assert.equal(await loginStatus(user.email, PASSWORD), 200)
        assert.equal((await submit('/reset-password', fields)).statusCode, 200, 'the token still works')
      })

      test('an unknown or missing reset token on GET and POST is a 400 page with a form for a new link', async () => {
        for (const response of [
          await page(`/reset-password?token=${'B'.repeat(43)}`),
          await page('/reset-password'),
          await submit('/reset-password', { token: 'B'.repeat(43), password: NEW_PASSWORD, password_confirmation: NEW_PASSWORD }),
          await submit('/reset-password', {}),
        ]) {
          assert.equal(response.statusCode, 400)
          isHtmlPage(response)
          assert.match(response.body, /action="forgot-password"/)
        }
      })
    })

    describe('headers and boundaries', () => {
      test('every page: strict CSP without script or inline style beyond its hash, no framing, no referrer, no caching', async () => {
        for (const response of [await page('/forgot-password'), await submit('/forgot-password', { email: 'x' }), await page('/verify-email')]) {
          const csp = String(response.headers['content-security-policy'])
          assert.match(csp, /^default-src 'none'; style-src 'sha256-[A-Za-z0-9+/=]+'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'$/)
          assert.doesNotMatch(response.body, /<script|style="|\son[a-z]+=/i, 'no script, no inline style attribute, no handler')
          assert.equal(response.headers['referrer-policy'], 'no-referrer')
          assert.equal(response.headers['cache-control'], 'no-store')
          assert.equal(response.headers['x-frame-options'], 'DENY')
          assert.doesNotMatch(response.body, /(src|href)="(https?:)?\/\//, 'nothing from another origin')
        }
      })

      test('the JSON API still refuses form bodies with 415 in the envelope', async () => {
        const response = await t.app.inject({ method: 'POST', url: `${t.base}/auth/forgot-password`, headers: { 'content-type': FORM }, payload: 'email=a%40example.com' })
        assert.equal(response.statusCode, 415)
        assert.equal(response.json().error.code, 'UNSUPPORTED_MEDIA_TYPE')
      })

      test('__proto__ and constructor fields are plain fields, not a 500', async () => {
        const response = await t.app.inject({ method: 'POST', url: '/forgot-password', headers: { 'content-type': FORM }, payload: '__proto__=x&constructor=y&email=a%40example.com' })
        assert.equal(response.statusCode, 200)
      })
    })

    describe('cross-site posts', () => {
      const own = () => new URL(t.config.publicUrl).origin
      const foreign = 'https://evil.example'
      /** Where a browser says the post came from; none at all is a program such as curl. */
      const refused: [string, Record<string, string>][] = [
        ['Sec-Fetch-Site: cross-site', { 'sec-fetch-site': 'cross-site' }],
        ['Sec-Fetch-Site: same-site (a sibling subdomain)', { 'sec-fetch-site': 'same-site' }],
        ['Sec-Fetch-Site: cross-site even with our own Origin', { 'sec-fetch-site': 'cross-site', origin: 'OWN' }],
        ['no Sec-Fetch-Site, a foreign Origin (an older browser)', { origin: foreign }],
      ]
      const allowed: [string, Record<string, string>][] = [
        ['Sec-Fetch-Site: same-origin', { 'sec-fetch-site': 'same-origin', origin: 'null' }],
        ['Sec-Fetch-Site: none (typed or bookmarked)', { 'sec-fetch-site': 'none' }],
        ['no Sec-Fetch-Site, our own Origin', { origin: 'OWN' }],
        ['no Sec-Fetch-Site, Origin: null (our own no-referrer page in Chromium)', { origin: 'null' }],
        ['neither header (curl, old clients)', {}],
      ]
      const headersOf = (headers: Record<string, string>) => Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, v === 'OWN' ? own() : v]))

      test('a foreign site cannot spend a verification token, reset a password or send mail: 403 page, nothing used', async () => {
        const { email, mail } = await register()
        const verifyToken = tokenFromMail(mail)
        await t.post('/auth/forgot-password', { email })
        const resetToken = tokenFromMail(await t.mail.next(email))
        for (const [what, headers] of refused) {
          const attempts = [
            await submit('/verify-email', { token: verifyToken }, headersOf(headers)),
            await submit('/reset-password', { token: resetToken, password: NEW_PASSWORD, password_confirmation: NEW_PASSWORD }, headersOf(headers)),
            await submit('/forgot-password', { email }, headersOf(headers)),
            await submit('/resend-verification', { email }, headersOf(headers)),
          ]
          for (const response of attempts) {
            assert.equal(response.statusCode, 403, what)
            isHtmlPage(response)
            assert.equal(h1(response), 'This form was sent from another site', what)
          }
        }
        await t.app.services.background.drain()
        const queued = await t.app.services.db.kysely.selectFrom('mail_outbox').select('id').where('recipient', '=', email).execute()
        assert.equal(queued.length, 2, 'no mail beyond the two the test asked for')
        assert.equal(await loginStatus(email, NEW_PASSWORD), 401, 'the password was not changed')
        assert.equal((await t.post('/auth/verify-email', { token: verifyToken })).statusCode, 200, 'the verification token was not spent')
        assert.equal((await page(`/reset-password?token=${resetToken}`)).statusCode, 200, 'nor the reset token')
      })

      for (const [what, headers] of allowed) {
        test(`allowed: ${what}`, async () => {
          const { email, mail } = await register()
          const response = await submit('/verify-email', { token: tokenFromMail(mail) }, headersOf(headers))
          assert.equal(response.statusCode, 200, what)
          assert.equal(h1(response), 'Address confirmed')
          assert.equal(await loginStatus(email, PASSWORD), 200)
        })
      }
    })
  })

  describe(`pages with APP_NAME, APP_URL, a custom link template and tight limits on ${engine}`, () => {
    let t: TestApp
    const appName = 'Acme <Tools> & Co'
    before(async () => {
      t = await startTestApp(engine, {
        env: {
          APP_NAME: appName,
          APP_URL: 'https://app.example/welcome?from=mail&step=2',
          VERIFY_EMAIL_URL: 'https://app.example/verify?src=mail&token={token}',
          RATE_LIMIT_MAIL_PER_IP: '3',
        },
      })
    })
    after(async () => {
      await t.close()
    })

    test('the mail is multipart/alternative: the same link in text, and in HTML as a button, escaped', async () => {
      const email = uniqueEmail()
      await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Mail Reader' })
      const mail = await t.mail.next(email)
      const { contentType, parts } = mailParts(mail.raw)
      assert.equal(contentType, 'multipart/alternative')
      const text = parts['text/plain']!
      const htmlPart = parts['text/html']!
      const token = tokenFromMail(mail)
      const link = `https://app.example/verify?src=mail&token=${token}`
      assert.ok(text.includes(`\n${link}\n`), 'text part holds the raw link on its own line')
      assert.ok(text.includes(`Welcome to ${appName}.`))
      const escapedLink = link.replace('&', '&amp;')
      assert.equal([...htmlPart.matchAll(new RegExp(`href="${escapedLink.replace(/[.?]/g, '\\$&')}"`, 'g'))].length, 2, 'button and written-out link')
      assert.ok(htmlPart.includes('Acme &lt;Tools&gt; &amp; Co'))
      assert.ok(!htmlPart.includes(appName), 'the name never appears unescaped')
      assert.doesNotMatch(htmlPart, /<img|<script|<link/i, 'readable with images and remote content off')
      assert.match(htmlPart, />Verify my address<\/a>/)
    })

    test('pages name the app, escaped, and the success page links to APP_URL only', async () => {
      const email = uniqueEmail()
      await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Page User' })
      const token = tokenFromMail(await t.mail.next(email))
      const done = await t.app.inject({ method: 'POST', url: '/verify-email', headers: { 'content-type': FORM }, payload: `token=${token}` })
      assert.equal(done.statusCode, 200)
      assert.ok(done.body.includes('<title>Address confirmed · Acme &lt;Tools&gt; &amp; Co</title>'))
      assert.ok(done.body.includes('<a class="continue" href="https://app.example/welcome?from=mail&amp;step=2">Continue to Acme &lt;Tools&gt; &amp; Co</a>'))
      assert.equal([...done.body.matchAll(/href=/g)].length, 1)
    })

    test('page and API requests share the per-IP mail limit; over it the page is a 429 with Retry-After', async () => {
      const ip = '203.0.113.9'
      const pageRequest = () => t.app.inject({ method: 'POST', url: '/forgot-password', remoteAddress: ip, headers: { 'content-type': FORM }, payload: 'email=a%40example.com' })
      assert.equal((await pageRequest()).statusCode, 200)
      const api = await t.app.inject({ method: 'POST', url: `${t.base}/auth/forgot-password`, remoteAddress: ip, headers: { 'content-type': 'application/json' }, payload: '{"email":"a@example.com"}' })
      assert.equal(api.statusCode, 202)
      assert.equal((await pageRequest()).statusCode, 200)
      const refused = await pageRequest()
      assert.equal(refused.statusCode, 429)
      assert.equal(refused.headers['content-type'], 'text/html; charset=utf-8')
      assert.ok(Number(refused.headers['retry-after']) > 0)
      assert.match(refused.body, /<h1>Too many attempts<\/h1>/)
      assert.doesNotMatch(refused.body, /RATE_LIMITED/)
    })
  })
}

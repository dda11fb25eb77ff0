import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { BrowserContext, Page } from 'playwright-core'
import { startExample, type Example } from '../../examples/web/serve.mjs'
import { freePort, PASSWORD, uniqueEmail } from '../helpers/app.ts'
import { useChromium } from '../helpers/browser.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { Siteverify } from '../helpers/siteverify.ts'

/**
 * Bot protection in a real browser (docs/SECURITY.md, "Bot protection"): the sample app and the
 * service's own forgot-password page with Turnstile on. There is no network here, so Cloudflare's
 * widget script is answered by a stand-in at its real address (the pages' Content-Security-Policy
 * is checked against that address, as with the real one); it behaves as the widget does for the
 * page: explicit `turnstile.render()` / `getResponse()` / `reset()`, and, rendering implicitly, the
 * hidden `cf-turnstile-response` field in the form. The service checks the token with a siteverify
 * stand-in on loopback. No page may log a console error (a CSP violation would be one).
 */

const SECRET = `test-secret-${randomBytes(6).toString('hex')}`
const SITE_KEY = '1x00000000000000000000AA'
const GOOD = `good.${randomBytes(12).toString('base64url')}`

/** What `https://challenges.cloudflare.com/turnstile/v0/api.js` is answered with here. */
const WIDGET_SCRIPT = `
(() => {
  const TOKEN = ${JSON.stringify(GOOD)}
  const field = (container) => {
    const input = document.createElement('input')
    input.type = 'hidden'
    input.name = 'cf-turnstile-response'
    input.value = TOKEN
    container.append(input)
    container.dataset.rendered = container.dataset.sitekey || ''
  }
  window.turnstileResets = 0
  window.turnstile = {
    render(container, options) {
      container.dataset.sitekey = options.sitekey
      field(container)
      return 'widget-1'
    },
    getResponse: () => TOKEN,
    reset: () => { window.turnstileResets++ },
  }
  if (!document.currentScript.src.includes('render=explicit')) document.querySelectorAll('.cf-turnstile').forEach(field)
})()
`

async function routeWidgetScript(context: BrowserContext): Promise<string[]> {
  const loaded: string[] = []
  await context.route('https://challenges.cloudflare.com/**', async (route) => {
    loaded.push(route.request().url())
    await route.fulfill({ status: 200, contentType: 'text/javascript', body: WIDGET_SCRIPT })
  })
  return loaded
}

describe('bot protection in Chromium', () => {
  const chromium = useChromium()

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const person = chromium.useContext()
      let storage: TestStorage
      let provider: Siteverify
      let example: Example
      let page: Page
      let loaded: string[]
      let serviceOutput = ''
      const consoleErrors: string[] = []

      before(async () => {
        storage = await createStorage(engine)
        provider = await new Siteverify(SECRET, GOOD).start()
        const [port, apiPort] = [await freePort(), await freePort()]
        example = await startExample({
          port,
          apiPort,
          dataDir: storage.dataDir,
          output: (text) => (serviceOutput += text),
          env: {
            ...(storage.databaseUrl ? { DATABASE_URL: storage.databaseUrl } : {}),
            LOG_LEVEL: 'warn',
            SHUTDOWN_DRAIN_SECONDS: '0',
            CAPTCHA_PROVIDER: 'turnstile',
            CAPTCHA_SECRET: SECRET,
            CAPTCHA_SITE_KEY: SITE_KEY,
            CAPTCHA_VERIFY_URL: provider.url,
          },
        }).catch((error: Error) => {
          throw new Error(`${error.message}\n${serviceOutput}`)
        })
        loaded = await routeWidgetScript(person.context)
        page = await person.context.newPage()
        page.setDefaultTimeout(15_000)
        // restore() without a session is a 401 the page expects; Chromium logs it as a failed load.
        page.on('console', (message) => {
          if (message.type() === 'error' && !/status of 401/.test(message.text())) consoleErrors.push(message.text())
        })
        page.on('pageerror', (error) => consoleErrors.push(error.message))
      })
      after(async () => {
        await example?.stop()
        await provider?.close()
        await storage?.drop()
      })

      test('the sample app renders the widget in the sign-up form and sends its token with register(); the widget is reset after', async () => {
        await page.goto(example.appUrl)
        await page.getByRole('status').filter({ hasText: /^Not signed in\.$/ }).waitFor()
        await page.locator(`#register-captcha[data-rendered="${SITE_KEY}"]`).waitFor()
        assert.ok(loaded.some((url) => url.startsWith('https://challenges.cloudflare.com/turnstile/v0/api.js?render=explicit')), 'the widget script came from the provider\'s address')

        const email = uniqueEmail('widget')
        const asked = provider.received.length
        const form = page.getByRole('region', { name: 'Create an account' })
        await form.getByLabel('Full name').fill('Widget User')
        await form.getByLabel('E-mail address').fill(email)
        await form.getByLabel('Password').fill(PASSWORD)
        await form.getByRole('button', { name: 'Create account' }).click()
        await page.getByRole('status').filter({ hasText: new RegExp(`^Account created for ${email}\\.`) }).waitFor()
        assert.deepEqual(provider.received.slice(asked).map((sent) => [sent.form.secret, sent.form.response]), [[SECRET, GOOD]])
        assert.equal(await page.evaluate(() => (window as unknown as { turnstileResets: number }).turnstileResets), 1, 'a token is good once: the widget starts again')
        assert.deepEqual(consoleErrors, [])
      })

      test('the service\'s forgot-password page loads the widget under its policy and posts the widget\'s field; the mail goes', async () => {
        const apiOrigin = new URL(example.apiUrl).origin
        await page.goto(`${apiOrigin}/forgot-password`)
        await page.locator('.cf-turnstile[data-rendered]').waitFor({ state: 'attached' })
        const asked = provider.received.length
        await page.getByLabel('E-mail address').fill(uniqueEmail('page'))
        await page.getByRole('button', { name: 'Send a reset link' }).click()
        await page.getByRole('heading', { name: 'Check your mail' }).waitFor()
        assert.deepEqual(provider.received.slice(asked).map((sent) => sent.form.response), [GOOD])
        assert.deepEqual(consoleErrors, [])
      })
    })
  }
})

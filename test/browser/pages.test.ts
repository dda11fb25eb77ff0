import assert from 'node:assert/strict'
import { before, describe, test } from 'node:test'
import type { Page } from 'playwright-core'
import { consoleMessages, screenshots, seriousViolations, startSite, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { linkFromMail, tokenFromMail, mailParts } from '../helpers/mail.ts'
import { PASSWORD, uniqueEmail } from '../helpers/app.ts'

const NEW_PASSWORD = 'a fresh passphrase from the browser'
const PHONE = { width: 390, height: 844 }

/**
 * A person finishing verification and reset from the mail alone, in Debian's Chromium with
 * JavaScript switched off, on a phone-sized screen, against the real server on a socket. Each page
 * is also checked with axe-core and kept as a screenshot.
 */
describe('the mailed-link pages in a real browser', () => {
  const chromium = useChromium()
  const shots = screenshots('pages')
  // axe needs script, which the flows' context has switched off: each page's markup, exactly as
  // the browser received it, is audited here with the same viewport.
  const auditing = chromium.useContext({ viewport: PHONE })
  let audit: Page
  before(async () => {
    audit = await auditing.context.newPage()
  })

  async function check(page: Page, name: string): Promise<void> {
    await shots.take(page, name)
    await audit.setContent(await page.content())
    const violations = await seriousViolations(audit)
    assert.deepEqual(violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`), [], `axe on ${name}`)
  }

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const flows = chromium.useContext({ javaScriptEnabled: false, viewport: PHONE })
      const site = useSite(engine, { clientPage: 'none' })
      let page: Page
      let consoleErrors: string[]
      before(async () => {
        page = await flows.context.newPage()
        // Chromium reports a page's own 4xx status as a failed load; those statuses are asserted below.
        consoleErrors = consoleMessages(page, ['error'], { except: /status of 4\d\d/ })
      })

      const apiLogin = async (email: string, password: string) => (await site.t.post('/auth/login', { email, password })).statusCode
      const heading = () => page.locator('h1').textContent()

      test('verification: open the mailed link, press the button, the account can log in', async () => {
        const { t } = site
        const email = uniqueEmail('browser')
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Browser User' })).statusCode, 201)
        const mail = await t.mail.next(email)
        const link = linkFromMail(mail)
        assert.ok(link.startsWith(t.config.publicUrl))
        // The HTML part as a mail client would render it: the button is a link to the same address.
        await audit.setContent(mailParts(mail.raw).parts['text/html']!)
        assert.equal(await audit.getByRole('link', { name: 'Verify my address' }).getAttribute('href'), link)
        await shots.take(audit, `${engine}-0-mail`)
        assert.deepEqual(await seriousViolations(audit), [], 'axe on the HTML mail')

        const opened = await page.goto(link)
        assert.equal(opened?.status(), 200)
        assert.equal(await heading(), 'Confirm your e-mail address')
        await check(page, `${engine}-1-verify-confirm`)
        assert.equal(await apiLogin(email, PASSWORD), 403, 'opening the link verified nothing')

        const [confirmed] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Confirm my address' }).click()])
        assert.equal(confirmed?.status(), 200)
        assert.ok(!page.url().includes('token='), 'the token left the URL for the form body')
        assert.equal(await heading(), 'Address confirmed')
        await check(page, `${engine}-2-verify-done`)
        assert.equal(await apiLogin(email, PASSWORD), 200)

        const reopened = await page.goto(link)
        assert.equal(reopened?.status(), 400)
        assert.equal(await heading(), 'This link no longer works')
        await check(page, `${engine}-3-verify-dead-link`)
      })

      test('change of address: open the link mailed to the new address, press the button, the account signs in with it', async () => {
        const { t } = site
        const email = uniqueEmail('browser-move')
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Moving User' })).statusCode, 201)
        assert.equal((await t.post('/auth/verify-email', { token: tokenFromMail(await t.mail.next(email)) })).statusCode, 200)
        const access = (await t.post('/auth/login', { email, password: PASSWORD })).json().data.access_token as string
        const moved = uniqueEmail('browser-moved')
        assert.equal((await t.post('/auth/me/email', { new_email: moved, password: PASSWORD }, access)).statusCode, 202)
        const link = linkFromMail(await t.mail.next(moved))
        assert.ok(link.startsWith(`${t.config.publicUrl}/confirm-email-change?token=`))

        const opened = await page.goto(link)
        assert.equal(opened?.status(), 200)
        assert.equal(await heading(), 'Confirm your new e-mail address')
        await check(page, `${engine}-9-address-confirm`)
        assert.equal(await apiLogin(moved, PASSWORD), 401, 'opening the link changed nothing')

        const [confirmed] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Use this address' }).click()])
        assert.equal(confirmed?.status(), 200)
        assert.equal(await heading(), 'Address changed')
        await check(page, `${engine}-10-address-changed`)
        assert.equal(await apiLogin(moved, PASSWORD), 200)
        assert.equal(await apiLogin(email, PASSWORD), 401)
      })

      test('reset: ask for a link, open it, a mismatch is explained, the new password works and the old one not', async () => {
        const { t } = site
        const email = uniqueEmail('browser')
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Browser User' })
        await t.post('/auth/verify-email', { token: new URL(linkFromMail(await t.mail.next(email))).searchParams.get('token') })
        const session = (await t.post('/auth/login', { email, password: PASSWORD })).json().data.access_token as string

        await page.goto(`${t.config.publicUrl}/forgot-password`)
        assert.equal(await heading(), 'Reset your password')
        await check(page, `${engine}-4-forgot`)
        await page.getByLabel('E-mail address').fill(email)
        await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Send a reset link' }).click()])
        assert.equal(await heading(), 'Check your mail')
        await check(page, `${engine}-5-mail-sent`)

        const link = linkFromMail(await t.mail.next(email))
        await page.goto(link)
        assert.equal(await heading(), 'Choose a new password')
        assert.equal(await page.getByLabel('Account').inputValue(), email)
        await check(page, `${engine}-6-reset-form`)

        await page.getByLabel('New password', { exact: true }).fill(NEW_PASSWORD)
        await page.getByLabel('Repeat the new password').fill(`${NEW_PASSWORD} typo`)
        const [mismatch] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Change password' }).click()])
        assert.equal(mismatch?.status(), 400)
        const repeat = page.getByLabel('Repeat the new password')
        assert.equal(await repeat.getAttribute('aria-invalid'), 'true')
        assert.equal(await page.locator(`#${await repeat.getAttribute('aria-describedby')}`).textContent(), 'The two passwords are not the same.')
        await check(page, `${engine}-7-reset-mismatch`)

        await page.getByLabel('New password', { exact: true }).fill(NEW_PASSWORD)
        await repeat.fill(NEW_PASSWORD)
        const [changed] = await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Change password' }).click()])
        assert.equal(changed?.status(), 200)
        assert.equal(await heading(), 'Password changed')
        await check(page, `${engine}-8-reset-done`)

        assert.equal(await apiLogin(email, PASSWORD), 401, 'the old password is refused')
        assert.equal(await apiLogin(email, NEW_PASSWORD), 200)
        assert.equal((await t.get('/auth/me', session)).statusCode, 401, 'the earlier session was revoked')
      })

      test('a form on another site that posts to the forgot page gets the refusal page, and no mail is sent', async () => {
        const { t } = site
        const email = uniqueEmail('browser')
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Browser User' })
        await t.mail.next(email)
        // A page of no origin of ours (about:blank with content set), as a foreign site's would be.
        const foreign = await flows.context.newPage()
        try {
          await foreign.setContent(`<!doctype html><html lang="en"><title>Win a prize</title><form method="post" action="${t.config.publicUrl}/forgot-password"><input type="hidden" name="email" value="${email}"><button>Claim</button></form></html>`)
          const [refused] = await Promise.all([foreign.waitForNavigation(), foreign.getByRole('button', { name: 'Claim' }).click()])
          assert.equal(refused?.status(), 403)
          assert.equal(await foreign.locator('h1').textContent(), 'This form was sent from another site')
          await check(foreign, `${engine}-9-cross-site-refused`)
        } finally {
          await foreign.close()
        }
        await t.app.services.background.drain()
        const queued = await t.app.services.db.kysely.selectFrom('mail_outbox').select('kind').where('recipient', '=', email).execute()
        assert.deepEqual(queued.map((row) => row.kind), ['verification'], 'no reset mail went out')
      })

      test('no page logged an error in the browser console', (testContext) => {
        assert.deepEqual(consoleErrors, [])
        testContext.diagnostic(`screenshots in ${shots.dir}`)
      })
    })
  }

  test('/docs loads with a clean console and "Try it out" reaches the server it is served from', async () => {
    // PUBLIC_URL names localhost while the browser uses 127.0.0.1: a different origin.
    const site = await startSite('sqlite', { host: 'localhost', clientPage: 'none' })
    const { port } = new URL(site.origin)
    try {
      await chromium.withContext(async (context) => {
        const page = await context.newPage()
        const problems = consoleMessages(page, ['error', 'warning'], { pageErrors: true })
        await page.goto(`http://127.0.0.1:${port}/docs`)
        await page.getByText('/healthz', { exact: true }).click()
        await page.getByRole('button', { name: 'Try it out' }).click()
        await page.getByRole('button', { name: 'Execute' }).click()
        const status = page.locator('.live-responses-table tbody .response-col_status').first()
        await status.waitFor()
        assert.equal((await status.textContent())?.trim().slice(0, 3), '200')
        assert.equal(await page.locator('.request-url pre').textContent(), `http://127.0.0.1:${port}/healthz`)
        await shots.take(page, 'docs', { fullPage: false })
        assert.deepEqual(problems, [])
      })
    } finally {
      await site.close()
    }
  })
})

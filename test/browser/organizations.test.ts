import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { after, before, describe, test, type TestContext } from 'node:test'
import type { BrowserContext, Page } from 'playwright-core'
import { startExample, type Example } from '../../examples/web/serve.mjs'
import { freePort, PASSWORD, registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'
import { openClient, screenshots, useChromium, useSite, type AxeViolation } from '../helpers/browser.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { linkFromMail, tokenFromMail } from '../helpers/mail.ts'

/**
 * Organisations in the sample app (examples/web), in Debian's Chromium, once per engine, with two
 * people in two browsers: both sign up and confirm their addresses; the first creates an
 * organisation, makes a shared watchlist in it and invites the second by address; the second
 * pastes the mailed link, switches to the organisation and sees the shared list, without the
 * forms a member may not use (the page asks client.can()); after a reload the session is still
 * in the organisation. The owner then makes the member an admin, and the member's page offers
 * (and they use) what an admin may do. Both views are audited with axe-core, and no page logs a
 * console error. Screenshots of both views go to a temp folder (the test's diagnostics name it).
 *
 * Then the bundled client alone in two tabs: a switch of organisation in one tab is handed to the
 * other, as every refresh in cookie mode is.
 */

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

async function axeViolations(page: Page): Promise<string[]> {
  await page.evaluate(axeSource)
  const violations = (await page.evaluate('axe.run(document).then((result) => result.violations)')) as AxeViolation[]
  return violations.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)
}

/** Waits until the page's status region says `expected`, or fails at once with the problem it reports. */
async function status(page: Page, expected: RegExp): Promise<void> {
  const region = page.getByRole('status')
  await region.filter({ hasText: expected }).or(page.locator('#status.error')).waitFor().catch(async (error: Error) => {
    throw new Error(`waited for the status ${expected}; it says "${await region.textContent()}"`, { cause: error })
  })
  assert.match((await region.textContent()) ?? '', expected)
}

/** The first mail in the service's outbox to `to` whose text includes `marker`, once it is there. */
async function mailFromOutbox(dataDir: string, to: string, marker: string): Promise<{ to: string[]; raw: string }> {
  const outbox = path.join(dataDir, 'outbox')
  for (let waited = 0; waited < 10_000; waited += 100) {
    const files = existsSync(outbox) ? readdirSync(outbox).filter((name) => name.endsWith('.eml')).sort() : []
    const raw = files.map((name) => readFileSync(path.join(outbox, name), 'utf8')).find((text) => text.includes(`\r\nTo: ${to}\r\n`) && text.replace(/=\r?\n/g, '').includes(marker))
    if (raw) return { to: [to], raw }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`no mail to ${to} with "${marker}" in ${outbox}`)
}

const VIEWPORT = { width: 900, height: 1000 }

describe('organisations in the sample app (examples/web) in Chromium', () => {
  const chromium = useChromium()
  const shots = screenshots('organizations')

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const ownerBrowser = chromium.useContext({ viewport: VIEWPORT })
      const inviteeBrowser = chromium.useContext({ viewport: VIEWPORT })
      let storage: TestStorage
      let example: Example
      let serviceOutput = ''
      let owner: Page
      let invitee: Page
      const consoleErrors: string[] = []

      const ownerEmail = uniqueEmail('org-owner')
      const inviteeEmail = uniqueEmail('org-invitee')
      const organization = `Acme Research ${engine}`

      /** A page of this context whose console errors (a CSP violation among them) are collected. */
      async function watchedPage(context: BrowserContext): Promise<Page> {
        const page = await context.newPage()
        page.setDefaultTimeout(15_000)
        // Left out: the 401 of restore() without a session, which Chromium logs as a failed load.
        page.on('console', (message) => {
          if (message.type() === 'error' && !/status of 401/.test(message.text())) consoleErrors.push(message.text())
        })
        page.on('pageerror', (error) => consoleErrors.push(error.message))
        return page
      }

      before(async () => {
        storage = await createStorage(engine)
        example = await startExample({
          port: await freePort(),
          apiPort: await freePort(),
          dataDir: storage.dataDir,
          output: (text) => (serviceOutput += text),
          env: { ...(storage.databaseUrl ? { DATABASE_URL: storage.databaseUrl } : {}), LOG_LEVEL: 'warn', SHUTDOWN_DRAIN_SECONDS: '0' },
        }).catch((error: Error) => {
          throw new Error(`${error.message}\n${serviceOutput}`)
        })
        owner = await watchedPage(ownerBrowser.context)
        invitee = await watchedPage(inviteeBrowser.context)
      })
      after(async () => {
        await example?.stop()
        await storage?.drop()
      })

      async function step(testContext: TestContext, body: () => Promise<void>): Promise<void> {
        try {
          await body()
        } catch (error) {
          testContext.diagnostic(`the service's output:\n${serviceOutput || '(none)'}`)
          throw error
        }
      }

      /** Sign up, confirm the address with the outbox's token, sign in: as example.test.ts does it. */
      async function signUpAndIn(page: Page, email: string, fullName: string): Promise<void> {
        await page.goto(example.appUrl)
        await status(page, /^Not signed in\.$/)
        const form = page.getByRole('region', { name: 'Create an account' })
        await form.getByLabel('Full name').fill(fullName)
        await form.getByLabel('E-mail address').fill(email)
        await form.getByLabel('Password').fill(PASSWORD)
        await form.getByRole('button', { name: 'Create account' }).click()
        await status(page, /^Account created for /)
        await page.getByLabel('Or paste the token from the mail').fill(tokenFromMail(await mailFromOutbox(storage.dataDir, email, 'verify-email')))
        await page.getByRole('button', { name: 'Confirm address' }).click()
        await status(page, / is confirmed\./)
        const signIn = page.getByRole('region', { name: 'Sign in', exact: true })
        await signIn.getByLabel('E-mail address').fill(email)
        await signIn.getByLabel('Password').fill(PASSWORD)
        await signIn.getByRole('button', { name: 'Sign in', exact: true }).click()
        await status(page, /^Signed in\.$/)
      }

      const organizations = (page: Page) => page.getByRole('region', { name: 'Organisations' })
      const sharedLists = (page: Page) => page.locator('#shared-watchlists > li')

      test('two people sign up and confirm their addresses; neither belongs to an organisation yet', async (t) => {
        await step(t, async () => {
          await signUpAndIn(owner, ownerEmail, 'Olga Owner')
          await signUpAndIn(invitee, inviteeEmail, 'Ivan Invitee')
          for (const page of [owner, invitee]) {
            assert.match(await page.locator('#active-organization').innerText(), /^You belong to no organisation yet/)
            assert.equal(await page.locator('#organization').isVisible(), false)
          }
        })
      })

      test('the first creates an organisation, a shared watchlist in it, and invites the second by address', async (t) => {
        await step(t, async () => {
          await organizations(owner).getByLabel('Create an organisation').fill(organization)
          await owner.getByRole('button', { name: 'Create organisation' }).click()
          await status(owner, new RegExp(`^${organization} created\\. This session works in it now\\.$`))
          assert.match(await owner.locator('#active-organization').innerText(), new RegExp(`works in ${organization}, as Owner\\.`))

          await owner.getByLabel('New shared watchlist').fill('Team semis')
          await owner.getByLabel('Symbols, separated by commas').fill('nvda, amd')
          await owner.getByRole('button', { name: 'Create shared watchlist' }).click()
          await status(owner, /^Shared watchlist “Team semis” created\.$/)
          assert.match(await sharedLists(owner).innerText(), /^Team semis\nNVDA · AMD$/)

          await owner.getByLabel('Invite someone by e-mail address').fill(inviteeEmail)
          await owner.getByLabel('Role').selectOption('member')
          await owner.getByRole('button', { name: 'Send invitation' }).click()
          await status(owner, new RegExp(`^Invitation sent to ${inviteeEmail}`))
          assert.match(await owner.locator('#invitations').innerText(), new RegExp(`${inviteeEmail}\\nInvited as Member`))
          assert.equal(await owner.locator('#members > li').count(), 1)
          assert.deepEqual(await axeViolations(owner), [], 'axe on the owner view')
          t.diagnostic(`screenshot: ${await shots.take(owner, `${engine}-owner`)}`)
        })
      })

      test('the second pastes the mailed link, switches to the organisation and sees the shared watchlist, as a member', async (t) => {
        await step(t, async () => {
          const link = linkFromMail(await mailFromOutbox(storage.dataDir, inviteeEmail, 'accept-invitation'))
          assert.match(link, /\/accept-invitation\?token=/)
          await invitee.getByLabel('Accept an invitation: paste the link from the mail').fill(link)
          await invitee.getByRole('button', { name: 'Accept invitation' }).click()
          await status(invitee, /^Invitation accepted/)
          assert.match(await invitee.locator('#organizations').innerText(), new RegExp(`${organization}\\nMember`))

          await invitee.getByRole('button', { name: `Switch to ${organization}` }).click()
          await status(invitee, new RegExp(`^Switched to ${organization}\\.$`))
          assert.match(await invitee.locator('#active-organization').innerText(), new RegExp(`works in ${organization}, as Member\\.`))
          assert.equal(await sharedLists(invitee).count(), 1)
          assert.match(await sharedLists(invitee).innerText(), /^Team semis\nNVDA · AMD$/)
          // A member reads; the forms to change lists and invite are for those whose token says they may.
          assert.equal(await invitee.locator('#shared-watchlist-form').isVisible(), false)
          assert.equal(await invitee.locator('#invite-form').isVisible(), false)
          assert.deepEqual(
            (await invitee.locator('#members > li').allInnerTexts()).sort(),
            [`Ivan Invitee\n${inviteeEmail}, Member`, `Olga Owner\n${ownerEmail}, Owner`].sort(),
          )
          assert.deepEqual(await axeViolations(invitee), [], 'axe on the member view')
          t.diagnostic(`screenshot: ${await shots.take(invitee, `${engine}-member`)}`)

          // The session remembers its organisation: a reload comes back into it.
          await invitee.reload()
          await status(invitee, /^Welcome back\.$/)
          assert.match(await sharedLists(invitee).innerText(), /^Team semis/)

          // The owner's page, refreshed, lists the new member and no pending invitation.
          await owner.reload()
          await status(owner, /^Welcome back\.$/)
          assert.equal(await owner.locator('#members > li').count(), 2)
          assert.equal(await owner.locator('#invitations > li').count(), 0)
        })
      })

      test('the owner makes the member an admin; the member\'s page then offers what an admin may do, and they use it', async (t) => {
        await step(t, async () => {
          const row = owner.locator('#members > li').filter({ hasText: inviteeEmail })
          await row.getByLabel('Role of Ivan Invitee').selectOption('admin')
          await row.getByRole('button', { name: 'Change role of Ivan Invitee' }).click()
          await status(owner, /^Ivan Invitee is now an admin\.$/)
          assert.match(await row.innerText(), new RegExp(`${inviteeEmail}, Admin`))
          assert.equal(await owner.locator('#members > li').filter({ hasText: ownerEmail }).getByRole('button').count(), 0, 'no role to change on one\'s own row')

          // The member's token said "member" when it was issued; the page's next start gets one that says "admin".
          await invitee.reload()
          await status(invitee, /^Welcome back\.$/)
          assert.match(await invitee.locator('#active-organization').innerText(), /as Admin\./)
          assert.equal(await invitee.locator('#invite-form').isVisible(), true)
          await invitee.getByLabel('New shared watchlist').fill('Memory')
          await invitee.getByLabel('Symbols, separated by commas').fill('MU WDC')
          await invitee.getByRole('button', { name: 'Create shared watchlist' }).click()
          await status(invitee, /^Shared watchlist “Memory” created\.$/)
          assert.equal(await sharedLists(invitee).count(), 2)
          assert.deepEqual(await axeViolations(owner), [], 'axe on the owner view with member roles to change')
          t.diagnostic(`screenshot: ${await shots.take(owner, `${engine}-owner-members`)}`)
          assert.deepEqual(consoleErrors, [], 'no console errors (a CSP violation would be one)')
        })
      })
    })
  }
})

describe('switchOrganization across the tabs of one browser (the bundled client, cookie transport)', () => {
  const chromium = useChromium()

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const browser = chromium.useContext()
      const site = useSite(engine)

      test('a switch in one tab is one refresh, and the other tab holds the new token at once, without a call of its own', async () => {
        const { t, app } = site
        const { email, access_token } = await registerVerifyLogin(t, uniqueEmail('tabs'))
        const created = await t.post('/auth/organizations', { name: 'Household' }, access_token)
        assert.equal(created.statusCode, 201)
        const organizationId = created.json().data.organization.id as string
        const refreshCount = async () =>
          Number((await t.app.services.db.kysely.selectFrom('audit_events').select((eb) => eb.fn.countAll().as('n')).where('type', '=', 'token.refreshed').executeTakeFirstOrThrow()).n)

        const tab1 = await openClient(browser.context, app.url)
        await tab1.evaluate(`client.login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)
        const tab2 = await openClient(browser.context, app.url)
        assert.equal(await tab2.evaluate('client.restore()'), true)
        assert.equal(await tab2.evaluate('client.claims().org_id'), null)

        const before = await refreshCount()
        await tab1.evaluate(`client.switchOrganization(${JSON.stringify(organizationId)})`)
        assert.equal((await refreshCount()) - before, 1, 'one refresh, for the switch')
        assert.equal(await tab1.evaluate('client.claims().org_id'), organizationId)
        assert.equal(await tab2.evaluate('client.claims().org_id'), organizationId, 'handed over, not fetched')
        assert.equal(await tab2.evaluate('client.can("members:invite")'), true)
        assert.equal(await tab2.evaluate('client.getAccessToken()'), await tab1.evaluate('client.getAccessToken()'))
        assert.equal((await refreshCount()) - before, 1, 'the other tab made no refresh of its own')

        await tab2.evaluate('client.switchOrganization(null)')
        assert.equal(await tab1.evaluate('client.claims().org_id'), null)
        assert.equal(await tab1.evaluate('client.can("members:invite")'), false)
        assert.equal(await tab1.evaluate('client.switchOrganization("00000000-0000-4000-8000-000000000000").then(() => "switched", (e) => e.code)'), 'FORBIDDEN')
        assert.equal(await tab1.evaluate('client.me().then((me) => me.email)'), email, 'a refused switch leaves the session as it was')
        assert.deepEqual(await tab1.evaluate('window.ended'), [])
      })
    })
  }
})

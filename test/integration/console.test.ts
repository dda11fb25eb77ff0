import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { freePort, PASSWORD, registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'
import { formOf, formsOf, OpBrowser, type Page } from '../helpers/op-browser.ts'
import { oathtool } from '../helpers/totp.ts'

/**
 * The operators' console (API.md, "The operators' console"; docs/console.md), over HTTP with a
 * browser's side played by test/helpers/op-browser.ts: the sign-in through the provider with a
 * second factor, who may use it (console:read) and change things (console:write), the session's
 * cookie and its end with the account's sessions or the role, confirmation of destructive actions,
 * the audit actor, cross-site posts refused. Chromium walks it in test/browser/console.test.ts.
 */

type User = Awaited<ReturnType<typeof registerVerifyLogin>>

for (const engine of ENGINES) {
  describe(`the operators' console on ${engine}`, () => {
    let t: TestApp
    let origin: string
    before(async () => {
      const port = await freePort()
      origin = `http://localhost:${port}`
      t = await startTestApp(engine, { env: { PUBLIC_URL: origin } })
      await t.app.listen({ port, host: '127.0.0.1' })
    })
    after(async () => {
      await t?.close()
    })

    /** A user with a confirmed TOTP factor and, when given, a global role. */
    async function person(role?: 'operator' | 'viewer', factor = true): Promise<User & { secret: string | null }> {
      const user = await registerVerifyLogin(t)
      let secret: string | null = null
      if (factor) {
        const started = (await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)).json().data as { factor_id: string; secret: string }
        const confirmed = await t.post(`/auth/mfa/totp/${started.factor_id}/confirm`, { code: oathtool(started.secret, t.clock.now()) }, user.access_token)
        assert.equal(confirmed.statusCode, 200, confirmed.body)
        secret = started.secret
        t.clock.advance(30)
      }
      if (role) await t.app.services.roles.setUserRoles(user.userId, [role], { ip: null, userAgent: null, requestId: null, actor: 'cli' })
      return { ...user, secret }
    }

    /** The whole sign-in as a browser: the console sends it to the provider, password, code, and back. */
    async function signIn(user: User & { secret: string | null }): Promise<{ browser: OpBrowser; page: Page }> {
      const browser = new OpBrowser(origin)
      let page = await browser.go(`${origin}/console/users`)
      page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: user.email, password: PASSWORD })
      if (user.secret) {
        page = await browser.submit(formOf(page, { actionEndsWith: '/mfa' }), { code: oathtool(user.secret, t.clock.now()) })
        t.clock.advance(30)
      }
      return { browser, page }
    }

    test('an operator signs in through the provider with a second factor and lands on the users page; the cookie is HttpOnly, SameSite=Strict, under /console', async () => {
      const operator = await person('operator')
      const { browser, page } = await signIn(operator)
      assert.equal(page.status, 200, page.body.slice(0, 500))
      assert.match(page.body, /<h1>Users<\/h1>/)
      assert.match(page.body, new RegExp(`Signed in as ${operator.email.replace(/[.+]/g, '\\$&')}`))
      const set = browser.history.flatMap((answer) => answer.headers.getSetCookie()).find((line) => line.startsWith('portcullis_console=') && !line.startsWith('portcullis_console=;'))!
      assert.match(set, /Path=\/console/)
      assert.match(set, /HttpOnly/)
      assert.match(set, /SameSite=Strict/)
      assert.match(set, /Max-Age=43200/)
      assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'none'/)
    })

    test('without a second factor the provider refuses (the console says why); without the role the console does', async () => {
      const noFactor = await person('operator', false)
      const refused = await signIn(noFactor)
      assert.equal(refused.page.status, 403)
      assert.match(refused.page.body, /needs a second factor/)
      const noRole = await person()
      const outsider = await signIn(noRole)
      assert.equal(outsider.page.status, 403)
      assert.match(outsider.page.body, /may not use the console/)
      assert.ok(!outsider.browser.cookieNames().includes('portcullis_console'))
    })

    test('a viewer reads every page and changes nothing (403); an operator disables an account after a confirmation page, audited as user:{id}', async () => {
      const target = await registerVerifyLogin(t)
      const viewer = await signIn(await person('viewer'))
      const userPage = await viewer.browser.go(`${origin}/console/users/${target.userId}`)
      assert.equal(userPage.status, 200)
      assert.match(userPage.body, /reading only/)
      assert.equal(formsOf(userPage).filter((form) => form.action.endsWith('/disable')).length, 0, 'no change offered to a viewer')
      const forced = await viewer.browser.go(`${origin}/console/users/${target.userId}/disable`, { method: 'POST', form: { confirm: 'yes' } })
      assert.equal(forced.status, 403)
      assert.equal((await t.app.services.admin.getUser(target.userId)).status, 'active')

      const operatorUser = await person('operator')
      const operator = await signIn(operatorUser)
      let page = await operator.browser.go(`${origin}/console/users/${target.userId}`)
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/disable' }))
      assert.equal(page.status, 200)
      assert.match(page.body, /Disable .*\?/)
      assert.equal((await t.app.services.admin.getUser(target.userId)).status, 'active', 'asking changes nothing')
      page = await operator.browser.submit(formOf(page, { actionEndsWith: '/disable' }), { reason: 'banned' })
      assert.equal(page.status, 200)
      assert.match(page.body, /The account is disabled/)
      const after = await t.app.services.admin.getUser(target.userId)
      assert.equal(after.status, 'disabled')
      assert.equal(after.disabled_reason, 'banned')
      const events = (await t.app.services.admin.events({ user_id: target.userId, type: 'account.disabled' })).events
      assert.equal(events[0]?.actor, `user:${operatorUser.userId}`)
    })

    test('a cross-site post is refused before anything changes', async () => {
      const target = await registerVerifyLogin(t)
      const { browser } = await signIn(await person('operator'))
      const crossSite = await browser.request(`${origin}/console/users/${target.userId}/enable`, { method: 'POST', form: {}, headers: { 'sec-fetch-site': 'cross-site' } })
      assert.equal(crossSite.status, 403)
    })

    test('the console session ends with the account\'s sessions (all of them ended), with the role, and on its own sign-out', async () => {
      const first = await person('operator')
      const a = await signIn(first)
      // Every session of the account ends (as logout-all, or an operator's revoke-all, does).
      await t.app.services.admin.revokeSessions(first.userId, { ip: null, userAgent: null, requestId: null, actor: 'cli' })
      const afterLogoutAll = await a.browser.request(`${origin}/console/users`)
      assert.equal(afterLogoutAll.status, 303, 'sent to sign in again')
      assert.match(afterLogoutAll.location ?? '', /\/console\/sign-in$/)

      const second = await person('operator')
      const b = await signIn(second)
      assert.equal((await b.browser.request(`${origin}/console/users`)).status, 200)
      await t.app.services.roles.setUserRoles(second.userId, [], { ip: null, userAgent: null, requestId: null, actor: 'cli' })
      assert.equal((await b.browser.request(`${origin}/console/users`)).status, 303, 'the role gone, the session is')

      const third = await person('viewer')
      const c = await signIn(third)
      const out = await c.browser.submit(formOf(await c.browser.go(`${origin}/console/users`), { actionEndsWith: '/sign-out' }))
      assert.equal(out.status, 200)
      assert.equal((await c.browser.request(`${origin}/console/users`)).status, 303)
    })

    test('idle for 30 minutes, the session is over', async () => {
      const { browser } = await signIn(await person('viewer'))
      t.clock.advance(31 * 60)
      assert.equal((await browser.request(`${origin}/console/users`)).status, 303)
    })
  })
}

describe('the console turned off', () => {
  test('CONSOLE=off answers 404 under /console', async () => {
    const t = await startTestApp('sqlite', { env: { CONSOLE: 'off' } })
    try {
      assert.equal((await t.app.inject({ method: 'GET', url: '/console/users' })).statusCode, 404)
      assert.equal((await t.app.inject({ method: 'GET', url: '/console/sign-in' })).statusCode, 404)
    } finally {
      await t.close()
    }
  })
})

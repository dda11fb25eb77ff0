import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { BrowserContext, Cookie } from 'playwright-core'
import { openClient, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'

const NEW_PASSWORD = 'a passphrase changed in the browser'

/** The refresh cookies the browser holds (a cleared one, Max-Age=0, is not listed). */
async function refreshCookies(context: BrowserContext): Promise<Cookie[]> {
  return (await context.cookies()).filter((cookie) => cookie.name === 'portcullis_refresh')
}

/**
 * docs/SECURITY.md, "Browser sessions": logout and every revocation of that session clear the cookie.
 * Once per engine, one browser and one server: a page on the API's own origin, where the cookie
 * reaches every auth route and the server clears it; then a cross-origin application using the
 * client, where the cookie reaches only the cookie routes and the client must clear it.
 */
describe('every revocation of the browser\'s own session clears the refresh cookie', () => {
  const chromium = useChromium()

  for (const engine of ENGINES) {
    describe(`on ${engine}`, () => {
      const site = useSite(engine)

      test('logout-all, revoking the current session, a password reset and account deletion; a password change keeps it', async (s) => {
        const { t, app, origin: apiOrigin } = site
        await s.test('a page on the API\'s own origin: the server clears the cookie', async () => {
          // The service's pages forbid connections (CSP default-src 'none'), which would block the
          // page's fetch; evaluate itself goes through DevTools and is not subject to the CSP.
          await chromium.withContext({ bypassCSP: true }, async (context) => {
            const page = await context.newPage()
            await page.goto(`${apiOrigin}/forgot-password`)
            const { email } = await registerVerifyLogin(t, uniqueEmail('same-origin'))

            /** A call made by the page's own script: same origin, so the cookie goes along to every auth route. */
            const call = async (method: string, route: string, options: { token?: string; body?: unknown; cookieMode?: boolean } = {}) => {
              const headers: Record<string, string> = {}
              if (options.body !== undefined) headers['content-type'] = 'application/json'
              if (options.token) headers.authorization = `Bearer ${options.token}`
              if (options.cookieMode) headers['x-token-transport'] = 'cookie'
              const init = { method, headers, ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }) }
              const answer = (await page.evaluate(`fetch(${JSON.stringify(`${t.base}${route}`)}, ${JSON.stringify(init)}).then(async (r) => ({ status: r.status, body: await r.json() }))`)) as { status: number; body: { data?: Record<string, unknown> } }
              assert.equal(answer.status, 200, `${method} ${route}: ${JSON.stringify(answer.body)}`)
              return answer.body.data!
            }
            const login = async (password = PASSWORD): Promise<string> => {
              const { access_token: token } = await call('POST', '/auth/login', { body: { email, password }, cookieMode: true })
              assert.equal((await refreshCookies(context)).length, 1, 'the login set the cookie')
              return token as string
            }
            const cookieGone = async (what: string) => assert.deepEqual(await refreshCookies(context), [], `${what} cleared the cookie`)

            await call('POST', '/auth/logout-all', { token: await login() })
            await cookieGone('logout-all')

            let token = await login()
            await t.post('/auth/login', { email, password: PASSWORD })
            const { sessions } = (await call('GET', '/auth/sessions', { token })) as { sessions: { id: string; current: boolean }[] }
            const current = sessions.find((session) => session.current)!
            const other = sessions.find((session) => !session.current)!
            await call('DELETE', `/auth/sessions/${other.id}`, { token })
            assert.equal((await refreshCookies(context)).length, 1, 'revoking another session keeps the cookie')
            await call('DELETE', `/auth/sessions/${current.id}`, { token })
            await cookieGone('revoking the current session')

            token = await login()
            await call('POST', '/auth/change-password', { token, body: { current_password: PASSWORD, new_password: NEW_PASSWORD } })
            assert.equal((await refreshCookies(context)).length, 1, 'a password change keeps the caller\'s session and its cookie')
            await call('POST', '/auth/refresh', { cookieMode: true })

            await t.post('/auth/forgot-password', { email })
            await call('POST', '/auth/reset-password', { body: { token: tokenFromMail(await t.mail.next(email)), password: PASSWORD } })
            await cookieGone('a password reset')

            await call('DELETE', '/auth/me', { token: await login(), body: { password: PASSWORD } })
            await cookieGone('deleting the account')
          })
        })

        await s.test('a cross-origin application with the client: the client clears the cookie', async () => {
          await chromium.withContext(async (context) => {
            const open = () => openClient(context, app.url)
            const tab = await open()
            const { email } = await registerVerifyLogin(t, uniqueEmail('cross-origin'))
            const login = async () => {
              await tab.evaluate(`client.login({ email: ${JSON.stringify(email)}, password: ${JSON.stringify(PASSWORD)} })`)
              assert.equal((await refreshCookies(context)).length, 1, 'the login set the cookie')
            }
            const sessionForgotten = async (what: string) => {
              assert.deepEqual(await refreshCookies(context), [], `${what} cleared the cookie`)
              assert.equal(await tab.evaluate('client.me().then(() => "signed in", (e) => e.code)'), 'AUTH_REQUIRED', `${what} forgot the access token`)
            }

            await login()
            assert.equal(await tab.evaluate('client.logoutAll()'), 2)
            await sessionForgotten('logoutAll()')

            await login()
            await t.post('/auth/login', { email, password: PASSWORD })
            const sessions = (await tab.evaluate('client.listSessions()')) as { id: string; current: boolean }[]
            await tab.evaluate(`client.revokeSession(${JSON.stringify(sessions.find((session) => !session.current)!.id)})`)
            assert.equal((await refreshCookies(context)).length, 1, 'revoking another session keeps the cookie')
            assert.equal(((await tab.evaluate('client.me()')) as { email: string }).email, email, 'and the session')
            const tab2 = await open()
            assert.equal(await tab2.evaluate('client.restore()'), true)
            await tab.evaluate(`client.revokeSession(${JSON.stringify(sessions.find((session) => session.current)!.id)})`)
            await sessionForgotten('revokeSession(its own id)')
            await tab2.waitForFunction('window.ended.length > 0')
            assert.deepEqual(await tab2.evaluate('window.ended'), ['ended_in_another_tab'], 'the other tab was told')

            await login()
            assert.equal(((await tab.evaluate(`client.deleteAccount(${JSON.stringify(PASSWORD)})`)) as { deleted: boolean }).deleted, true)
            await sessionForgotten('deleteAccount()')

            assert.deepEqual(await tab.evaluate('window.ended'), [], 'the application asked each time: onSessionEnd stayed quiet')
          })
        })
      })
    })
  }
})

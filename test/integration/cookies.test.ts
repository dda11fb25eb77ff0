import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { ENGINES } from '../helpers/db.ts'
import { tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

const APP_ORIGIN = 'https://app.example.com'
const COOKIE = { 'x-token-transport': 'cookie' }

/** Browser sessions (docs/SECURITY.md, "Browser sessions"): the refresh token in an HttpOnly cookie, opted into per request. */
for (const engine of ENGINES) {
  describe(`cookie mode on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { CORS_ORIGINS: APP_ORIGIN } })
    })
    after(async () => {
      await t.close()
    })

    const json = { 'content-type': 'application/json' }
    const send = (path: string, headers: Record<string, string>, body?: unknown) =>
      t.app.inject({ method: 'POST', url: t.base + path, headers: { ...json, ...headers }, payload: body === undefined ? '' : JSON.stringify(body) })
    const setCookie = (response: LightMyRequestResponse) => [response.headers['set-cookie'] ?? []].flat()
    const cookieValue = (response: LightMyRequestResponse) => /^portcullis_refresh=([^;]*);/.exec(setCookie(response)[0] ?? '')?.[1]
    const code = (response: LightMyRequestResponse) => response.json().error?.code

    async function cookieLogin(headers: Record<string, string> = {}) {
      const email = uniqueEmail('cookie')
      const user = await registerVerifyLogin(t, email)
      const response = await send('/auth/login', { ...COOKIE, ...headers }, { email, password: PASSWORD })
      assert.equal(response.statusCode, 200, response.body)
      const refresh = cookieValue(response)
      assert.ok(refresh)
      return { ...user, cookie: `portcullis_refresh=${refresh}`, login: response }
    }

    test('login with the header: the seed body without refresh_token, and the token in an HttpOnly, Strict cookie', async () => {
      const { login } = await cookieLogin()
      assert.deepEqual(Object.keys(login.json().data), ['access_token', 'token_type', 'expires_in'])
      assert.ok(!login.body.includes('refresh_token'))
      const [cookie, ...more] = setCookie(login)
      assert.equal(more.length, 0)
      assert.match(cookie!, new RegExp(`^portcullis_refresh=[\\w-]+\\.[\\w-]+\\.[\\w-]+; Max-Age=604800; Path=${t.base}/auth; HttpOnly; SameSite=Strict$`), 'development on plain HTTP: no Secure')
      assert.equal(login.headers['cache-control'], 'no-store')
    })

    test('without the header nothing changes: the seed bodies, no cookie, and a cookie alone is ignored', async () => {
      const email = uniqueEmail()
      const user = await registerVerifyLogin(t, email)
      const login = await send('/auth/login', {}, { email, password: PASSWORD })
      assert.deepEqual(Object.keys(login.json().data), ['access_token', 'refresh_token', 'token_type', 'expires_in'])
      assert.deepEqual(setCookie(login), [])
      const refresh = await send('/auth/refresh', {}, { refresh_token: user.refresh_token })
      assert.deepEqual(Object.keys(refresh.json().data), ['access_token', 'expires_in'])
      const { cookie } = await cookieLogin()
      const cookieOnly = await send('/auth/refresh', { cookie })
      assert.equal(cookieOnly.statusCode, 400)
      assert.deepEqual(cookieOnly.json().error.details, [{ field: 'refresh_token', message: 'is required' }])
      assert.equal(code(await send('/auth/logout', { cookie })), 'VALIDATION_ERROR')
    })

    test('refresh with the header uses the cookie, with no body or an empty object, and returns no refresh token', async () => {
      const { cookie } = await cookieLogin()
      for (const body of [undefined, {}]) {
        const response = await send('/auth/refresh', { ...COOKIE, cookie }, body)
        assert.equal(response.statusCode, 200, response.body)
        assert.deepEqual(Object.keys(response.json().data), ['access_token', 'expires_in'])
        assert.deepEqual(setCookie(response), [], 'refresh never sets a new refresh token')
        assert.equal((await t.get('/auth/me', response.json().data.access_token)).statusCode, 200)
      }
      const both = await send('/auth/refresh', { ...COOKIE, cookie }, { refresh_token: 'x.y.z' })
      assert.equal(code(both), 'VALIDATION_ERROR', 'with the header the body may not carry a token')
      assert.equal(code(await send('/auth/refresh', { ...COOKIE })), 'INVALID_REFRESH_TOKEN', 'header but no cookie')
      assert.equal(code(await send('/auth/refresh', { 'x-token-transport': 'body', cookie })), 'VALIDATION_ERROR', 'an unknown transport')
    })

    test('a foreign Origin is refused with ORIGIN_NOT_ALLOWED; PUBLIC_URL, CORS_ORIGINS and no Origin pass', async () => {
      const { cookie, email } = await cookieLogin()
      for (const origin of ['https://evil.example', 'null', 'http://localhost:1']) {
        for (const path of ['/auth/refresh', '/auth/logout']) {
          const response = await send(path, { ...COOKIE, cookie, origin })
          assert.equal(response.statusCode, 403, `${path} from ${origin}`)
          assert.equal(code(response), 'ORIGIN_NOT_ALLOWED')
        }
        assert.equal(code(await send('/auth/login', { ...COOKIE, origin }, { email, password: PASSWORD })), 'ORIGIN_NOT_ALLOWED')
      }
      for (const origin of [APP_ORIGIN, new URL(t.config.publicUrl).origin]) {
        assert.equal((await send('/auth/refresh', { ...COOKIE, cookie, origin })).statusCode, 200, origin)
      }
      assert.equal((await send('/auth/refresh', { ...COOKIE, cookie })).statusCode, 200)
    })

    test('logout clears the cookie and revokes the session; a revoked session\'s cookie is cleared at refresh', async () => {
      const first = await cookieLogin()
      const logout = await send('/auth/logout', { ...COOKIE, cookie: first.cookie })
      assert.equal(logout.statusCode, 200)
      assert.match(setCookie(logout)[0]!, new RegExp(`^portcullis_refresh=; Max-Age=0; Path=${t.base}/auth; HttpOnly; SameSite=Strict$`))
      const after = await send('/auth/refresh', { ...COOKIE, cookie: first.cookie })
      assert.equal(code(after), 'INVALID_REFRESH_TOKEN')
      assert.match(setCookie(after)[0]!, /^portcullis_refresh=; Max-Age=0;/)
      const again = await send('/auth/logout', { ...COOKIE })
      assert.equal(again.statusCode, 200, 'logout without a cookie is idempotent and still clears')
      assert.match(setCookie(again)[0]!, /Max-Age=0/)

      const second = await cookieLogin()
      assert.equal((await t.post('/auth/logout-all', undefined, second.login.json().data.access_token)).statusCode, 200)
      const revoked = await send('/auth/refresh', { ...COOKIE, cookie: second.cookie })
      assert.equal(code(revoked), 'INVALID_REFRESH_TOKEN')
      assert.match(setCookie(revoked)[0]!, /Max-Age=0/)
    })

    test('cookie tossing: a second refresh cookie planted beside the victim\'s is refused as INVALID_REFRESH_TOKEN, and neither is used or cleared', async () => {
      const victim = await cookieLogin()
      // The attacker's own valid session, as a sibling subdomain would plant it (Domain=parent,
      // a longer Path): the browser then sends both, the planted one first.
      const attacker = await cookieLogin()
      const sessionsOf = async (u: typeof victim) => ((await t.get('/auth/sessions', u.login.json().data.access_token)).json().data.sessions as unknown[]).length
      const before = [await sessionsOf(victim), await sessionsOf(attacker)]
      for (const cookie of [`${attacker.cookie}; ${victim.cookie}`, `${victim.cookie}; ${attacker.cookie}`, `${victim.cookie}; other=1; ${victim.cookie}`]) {
        for (const path of ['/auth/refresh', '/auth/logout']) {
          const response = await send(path, { ...COOKIE, cookie, origin: APP_ORIGIN })
          assert.equal(response.statusCode, 401, `${path} with ${cookie}: ${response.body}`)
          assert.equal(code(response), 'INVALID_REFRESH_TOKEN')
          assert.match(String(response.headers['www-authenticate']), /error="invalid_token"/)
          assert.ok(!response.body.includes('access_token'), 'no session is served, the planted one least of all')
          assert.deepEqual(setCookie(response), [], 'clearing the victim\'s cookie would leave the planted one to be used')
        }
      }
      assert.deepEqual([await sessionsOf(victim), await sessionsOf(attacker)], before, 'the logouts revoked nothing')
      assert.equal((await send('/auth/refresh', { ...COOKIE, cookie: victim.cookie })).statusCode, 200, 'the victim\'s cookie alone still works')
    })

    test('CORS allows credentials on the cookie routes only, and only for CORS_ORIGINS', async () => {
      const preflight = (path: string, origin: string) =>
        t.app.inject({ method: 'OPTIONS', url: t.base + path, headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'x-token-transport' } })
      const refresh = await preflight('/auth/refresh', APP_ORIGIN)
      assert.equal(refresh.headers['access-control-allow-origin'], APP_ORIGIN)
      assert.equal(refresh.headers['access-control-allow-credentials'], 'true')
      assert.match(String(refresh.headers['access-control-allow-headers']), /x-token-transport/)
      const watchlists = await preflight('/watchlists', APP_ORIGIN)
      assert.equal(watchlists.headers['access-control-allow-origin'], APP_ORIGIN)
      assert.equal(watchlists.headers['access-control-allow-credentials'], undefined)
      const foreign = await preflight('/auth/refresh', 'https://evil.example')
      assert.equal(foreign.headers['access-control-allow-origin'], undefined)
      assert.equal(foreign.headers['access-control-allow-credentials'], undefined)

      const { cookie, login } = await cookieLogin({ origin: APP_ORIGIN })
      assert.equal(login.headers['access-control-allow-credentials'], 'true')
      const real = await send('/auth/refresh', { ...COOKIE, cookie, origin: APP_ORIGIN })
      assert.equal(real.headers['access-control-allow-credentials'], 'true')
      const me = await t.app.inject({ method: 'GET', url: `${t.base}/auth/me`, headers: { origin: APP_ORIGIN, authorization: `Bearer ${real.json().data.access_token}` } })
      assert.equal(me.statusCode, 200)
      assert.equal(me.headers['access-control-allow-credentials'], undefined)
    })

    /** Every route that can revoke the caller's own session, and whether the cookie's session survives it. */
    const revokers: { route: string; survives: boolean; call(user: Awaited<ReturnType<typeof cookieLogin>>): Promise<LightMyRequestResponse> }[] = [
      { route: 'POST /auth/logout-all', survives: false, call: (u) => t.app.inject({ method: 'POST', url: `${t.base}/auth/logout-all`, headers: { authorization: `Bearer ${u.login.json().data.access_token}`, cookie: u.cookie } }) },
      {
        route: 'DELETE /auth/sessions/{current}',
        survives: false,
        async call(u) {
          const access = u.login.json().data.access_token
          const sessions = (await t.get('/auth/sessions', access)).json().data.sessions as { id: string; current: boolean }[]
          const current = sessions.find((session) => session.current)!.id
          return t.app.inject({ method: 'DELETE', url: `${t.base}/auth/sessions/${current}`, headers: { authorization: `Bearer ${access}`, cookie: u.cookie } })
        },
      },
      { route: 'DELETE /auth/me', survives: false, call: (u) => t.app.inject({ method: 'DELETE', url: `${t.base}/auth/me`, headers: { ...json, authorization: `Bearer ${u.login.json().data.access_token}`, cookie: u.cookie }, payload: JSON.stringify({ password: PASSWORD }) }) },
      {
        route: 'POST /auth/reset-password',
        survives: false,
        async call(u) {
          await t.post('/auth/forgot-password', { email: u.email })
          const token = tokenFromMail(await t.mail.next(u.email))
          return send('/auth/reset-password', { cookie: u.cookie }, { token, password: 'a different passphrase' })
        },
      },
      { route: 'POST /auth/change-password (keeps the caller\'s session)', survives: true, call: (u) => t.app.inject({ method: 'POST', url: `${t.base}/auth/change-password`, headers: { ...json, authorization: `Bearer ${u.login.json().data.access_token}`, cookie: u.cookie }, payload: JSON.stringify({ current_password: PASSWORD, new_password: 'a different passphrase' }) }) },
      { route: 'DELETE /auth/sessions/{another}', survives: true, call: (u) => t.app.inject({ method: 'DELETE', url: `${t.base}/auth/sessions/${JSON.parse(Buffer.from(u.refresh_token.split('.')[1]!, 'base64url').toString()).sid}`, headers: { authorization: `Bearer ${u.login.json().data.access_token}`, cookie: u.cookie } }) },
    ]
    for (const { route, survives, call } of revokers) {
      test(`${route}: ${survives ? 'a cookie whose session lives on is left alone' : 'the refresh cookie of the revoked session is cleared'}`, async () => {
        const user = await cookieLogin()
        const response = await call(user)
        assert.equal(response.statusCode, 200, response.body)
        if (survives) {
          assert.deepEqual(setCookie(response), [])
          assert.equal((await send('/auth/refresh', { ...COOKIE, cookie: user.cookie })).statusCode, 200, 'and it still refreshes')
        } else {
          assert.deepEqual(setCookie(response), [`portcullis_refresh=; Max-Age=0; Path=${t.base}/auth; HttpOnly; SameSite=Strict`])
        }
      })
    }
  })
}

describe('cookie mode in production', () => {
  let t: TestApp
  before(async () => {
    t = await startTestApp('sqlite', { env: { NODE_ENV: 'production', TRUST_PROXY: '127.0.0.1', PUBLIC_URL: 'https://auth.example.com', KEY_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64') } })
  })
  after(async () => {
    await t.close()
  })

  test('the cookie is __Secure-portcullis_refresh with Secure, and refresh reads it by that name', async () => {
    const email = uniqueEmail()
    await t.app.inject({ method: 'POST', url: `${t.base}/auth/register`, remoteAddress: '127.0.0.1', headers: { 'content-type': 'application/json', 'x-forwarded-proto': 'https' }, payload: JSON.stringify({ email, password: PASSWORD, full_name: 'Prod' }) })
    const token = tokenFromMail(await t.mail.next(email))
    const https = { 'content-type': 'application/json', 'x-forwarded-proto': 'https', 'x-token-transport': 'cookie' }
    await t.app.inject({ method: 'POST', url: `${t.base}/auth/verify-email`, remoteAddress: '127.0.0.1', headers: https, payload: JSON.stringify({ token }) })
    const login = await t.app.inject({ method: 'POST', url: `${t.base}/auth/login`, remoteAddress: '127.0.0.1', headers: https, payload: JSON.stringify({ email, password: PASSWORD }) })
    assert.equal(login.statusCode, 200, login.body)
    const cookie = String(login.headers['set-cookie'])
    assert.match(cookie, new RegExp(`^__Secure-portcullis_refresh=[^;]+; Max-Age=604800; Path=${t.base}/auth; HttpOnly; SameSite=Strict; Secure$`))
    const refresh = await t.app.inject({ method: 'POST', url: `${t.base}/auth/refresh`, remoteAddress: '127.0.0.1', headers: { ...https, cookie: cookie.split(';')[0]!, origin: 'https://auth.example.com' } })
    assert.equal(refresh.statusCode, 200, refresh.body)
  })
})

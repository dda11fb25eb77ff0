import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { createRemoteJWKSet, errors as joseErrors, jwtVerify } from 'jose'
import { memoryStorage, PortcullisClient, PortcullisError, type TokenStorage, type Tokens } from '../../packages/client/dist/index.js'
import { ENGINES } from '../helpers/db.ts'
import { linkFromMail, tokenFromMail } from '../helpers/mail.ts'
import { oathtool } from '../helpers/totp.ts'
import { PASSWORD, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

const NEW_PASSWORD = 'another long passphrase'

/** The PortcullisError a call fails with; a call that succeeds fails the test. */
async function failure(call: Promise<unknown>): Promise<PortcullisError> {
  const outcome = await call.then(() => null, (error: unknown) => error)
  assert.ok(outcome instanceof PortcullisError, `expected a PortcullisError, got ${String(outcome)}`)
  return outcome
}
const ACCESS_LIFE = 15 * 60

test('the compiled client has no runtime dependency: it imports nothing but its own files', () => {
  const dir = path.resolve('packages/client/dist')
  for (const file of readdirSync(dir).filter((name) => name.endsWith('.js'))) {
    const source = readFileSync(path.join(dir, file), 'utf8')
    for (const [, specifier] of source.matchAll(/(?:import|export)[^'"]*from\s*['"]([^'"]+)['"]/g)) {
      assert.match(specifier!, /^\.\/[\w-]+\.js$/, `${file} imports ${specifier}`)
    }
    assert.doesNotMatch(source, /\brequire\(|import\(/, `${file} loads nothing at run time`)
  }
})

test('in Node a cookie-mode client opens no channel between tabs: clients in one process are separate sessions, and the process can exit', () => {
  // Node 24 has BroadcastChannel and navigator.locks as browsers do; a channel left open keeps the process alive.
  const ports = () => process.getActiveResourcesInfo().filter((name) => name === 'MessagePort').length
  const before = ports()
  const client = new PortcullisClient({ baseUrl: 'http://127.0.0.1:9/api/v1', transport: 'cookie' })
  assert.equal(ports(), before)
  client.close()
})

for (const engine of ENGINES) {
  describe(`the client against the real server on ${engine}`, () => {
    let t: TestApp
    let baseUrl: string
    /** Every request the clients under test send, by path, to count refreshes. */
    const sent: string[] = []
    const countingFetch: typeof fetch = (input, init) => {
      sent.push(new URL(String(input)).pathname)
      return fetch(input, init)
    }
    const refreshes = () => sent.filter((p) => p.endsWith('/auth/refresh')).length
    const newClient = (options: Partial<ConstructorParameters<typeof PortcullisClient>[0]> = {}) =>
      new PortcullisClient({ baseUrl, fetch: countingFetch, ...options })

    before(async () => {
      t = await startTestApp(engine)
      await t.app.listen({ port: 0, host: '127.0.0.1' })
      baseUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}${t.base}`
    })
    after(async () => {
      await t.close()
    })

    async function loggedIn(options: Partial<ConstructorParameters<typeof PortcullisClient>[0]> = {}) {
      const client = newClient(options)
      const email = uniqueEmail('client')
      await client.register({ email, password: PASSWORD, full_name: 'Client User' })
      await client.verifyEmail(tokenFromMail(await t.mail.next(email)))
      await client.login({ email, password: PASSWORD })
      return { client, email }
    }

    /** Moves the server's clock past the access token's life, and back afterwards. */
    async function withExpiredAccess<T>(run: () => Promise<T>): Promise<T> {
      t.clock.advance(ACCESS_LIFE + 60)
      try {
        return await run()
      } finally {
        t.clock.advance(-(ACCESS_LIFE + 60))
      }
    }

    test('has a method for every operation of the API in the OpenAPI document', async () => {
      const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json() as { paths: Record<string, Record<string, { operationId: string; tags: string[] }>> }
      // The admin API is for operators' back ends holding an API key, not for this client (docs/client.md).
      const operations = Object.values(doc.paths).flatMap((methods) => Object.values(methods)).filter((op) => !op.tags.includes('operations') && !op.tags.includes('admin'))
      assert.ok(operations.length >= 20)
      for (const { operationId } of operations) {
        assert.equal(typeof (PortcullisClient.prototype as unknown as Record<string, unknown>)[operationId], 'function', `no client method for ${operationId}`)
      }
    })

    test('every auth, session and password method against the server', async () => {
      const { client, email } = await loggedIn()
      const me = await client.me()
      assert.equal(me.email, email)
      assert.equal(me.email_verified, true)

      const other = newClient()
      await other.login({ email, password: PASSWORD })
      const sessions = await client.listSessions()
      assert.equal(sessions.length, 2)
      const otherSession = sessions.find((session) => !session.current)!
      assert.deepEqual(await client.revokeSession(otherSession.id), { id: otherSession.id, revoked: true })

      const refreshed = await client.refresh()
      assert.equal(refreshed.expires_in, ACCESS_LIFE)
      assert.equal((await client.me()).email, email)

      await other.login({ email, password: PASSWORD })
      assert.equal(await client.changePassword({ current_password: PASSWORD, new_password: NEW_PASSWORD }), 1)

      await client.forgotPassword(email)
      await client.resetPassword(tokenFromMail(await t.mail.next(email)), PASSWORD)
      await assert.rejects(client.me(), { code: 'INVALID_TOKEN' }, 'a reset revokes every session')

      await client.login({ email, password: PASSWORD })
      await other.login({ email, password: PASSWORD })
      assert.equal(await client.logoutAll(), 2)
      await assert.rejects(client.me(), (error: PortcullisError) => error.code === 'AUTH_REQUIRED', 'tokens forgotten')

      await client.login({ email, password: PASSWORD })
      await client.logout()
      await assert.rejects(client.me(), { code: 'AUTH_REQUIRED' })

      const fresh = uniqueEmail('resend')
      const registration = await client.register({ email: fresh, password: PASSWORD, full_name: 'Resend' })
      assert.equal(registration.verification_required, true)
      await t.mail.next(fresh)
      await client.resendVerification(fresh)
      assert.deepEqual(await client.verifyEmail(tokenFromMail(await t.mail.next(fresh))), { email: fresh, verified: true })
    })

    test('profile: updateMe answers the new me(); changeEmail mails a link to the new address, and a wrong password is INVALID_CREDENTIALS', async () => {
      const { client, email } = await loggedIn()
      const me = await client.updateMe({ full_name: 'Renamed User' })
      assert.equal(me.full_name, 'Renamed User')
      assert.deepEqual(await client.me(), me)
      const moved = uniqueEmail('client-moved')
      await assert.rejects(client.changeEmail({ new_email: moved, password: 'not the password' }), (error: unknown) => error instanceof PortcullisError && error.code === 'INVALID_CREDENTIALS' && error.status === 401)
      await client.changeEmail({ new_email: moved, password: PASSWORD })
      assert.match(linkFromMail(await t.mail.next(moved)), /\/confirm-email-change\?token=/)
      assert.equal((await client.me()).email, email, 'nothing changes before the link is used')
    })

    test('revoking its own session forgets it here without calling onSessionEnd; revoking another keeps it', async () => {
      const ended: string[] = []
      const { client, email } = await loggedIn({ onSessionEnd: ({ reason }) => ended.push(reason) })
      await newClient().login({ email, password: PASSWORD })
      const sessions = await client.listSessions()
      await client.revokeSession(sessions.find((session) => !session.current)!.id)
      assert.equal((await client.me()).email, email)
      const own = sessions.find((session) => session.current)!.id
      assert.deepEqual(await client.revokeSession(own), { id: own, revoked: true })
      const before = sent.length
      assert.equal((await failure(client.me())).code, 'AUTH_REQUIRED', 'the tokens were forgotten')
      assert.deepEqual(sent.slice(before), [`${t.base}/auth/me`], 'nothing refreshed')
      assert.deepEqual(ended, [], 'the application asked for it')
    })

    test('a malformed access token is no reason for revokeSession to fail before asking the server', async () => {
      const storage = memoryStorage()
      await storage.save({ accessToken: `e30.${Buffer.from('null').toString('base64url')}.sig`, refreshToken: 'unused' })
      const client = newClient({ storage })
      await assert.rejects(client.revokeSession('00000000-0000-4000-8000-000000000000'), { code: 'INVALID_TOKEN', status: 401 })
    })

    test('cookie transport: logoutAll, revoking its own session and deleting the account end with the cookie logout, whose failure is no failure', async () => {
      const calls: string[] = []
      let logoutFails = false
      const recording: typeof fetch = async (input, init) => {
        const { pathname } = new URL(String(input))
        const cookieMode = new Headers(init?.headers).get('x-token-transport') === 'cookie'
        calls.push(`${init?.method} ${pathname.slice(t.base.length)}${cookieMode ? ' (cookie)' : ''}`)
        if (logoutFails && pathname.endsWith('/auth/logout')) throw new TypeError('fetch failed')
        return fetch(input, init)
      }
      const { client, email } = await loggedIn({ transport: 'cookie', fetch: recording })
      const relogin = async () => {
        await client.login({ email, password: PASSWORD })
        calls.length = 0
      }

      await relogin()
      assert.equal(await client.logoutAll(), 2)
      assert.deepEqual(calls, ['POST /auth/logout-all', 'POST /auth/logout (cookie)'])

      await relogin()
      const own = (await client.listSessions()).find((session) => session.current)!.id
      await client.revokeSession(own)
      assert.deepEqual(calls, ['GET /auth/sessions', `DELETE /auth/sessions/${own}`, 'POST /auth/logout (cookie)'])
      assert.equal((await failure(client.me())).code, 'AUTH_REQUIRED')

      await relogin()
      logoutFails = true
      assert.equal((await client.deleteAccount(PASSWORD)).deleted, true)
      assert.deepEqual(calls, ['DELETE /auth/me', 'POST /auth/logout (cookie)'])
      assert.equal((await failure(client.me())).code, 'AUTH_REQUIRED')
    })

    test('second factors: enrol, an MFA login as a typed result, verify, step-up when a sensitive action asks, recovery codes, removal', async (context) => {
      // The clock moves on here; later cases judge tokens by the real time again.
      const start = t.clock.ms
      context.after(() => {
        t.clock.ms = start
      })
      const { client, email } = await loggedIn()
      const enrolment = await client.enrolTotp('Phone')
      const confirmed = await client.confirmTotp(enrolment.factor_id, oathtool(enrolment.secret, t.clock.now()))
      assert.equal(confirmed.recovery_codes?.length, 10)
      assert.deepEqual((await client.listFactors()).factors.map((factor) => factor.name), ['Phone'])

      const other = newClient()
      const first = await other.login({ email, password: PASSWORD })
      assert.ok('mfa_required' in first, 'a typed result, not a thrown error')
      assert.deepEqual(first.methods, ['totp', 'recovery_code'])
      t.clock.advance(30)
      const signedIn = await other.verifyMfa({ mfa_token: first.mfa_token, method: 'totp', code: oathtool(enrolment.secret, t.clock.now()) })
      assert.ok('refresh_token' in signedIn)
      assert.equal((await other.me()).email, email)

      // Eleven minutes on the access token has expired too: the single-flight refresh runs, then the
      // export is refused until a step-up.
      t.clock.advance(11 * 60)
      const refused = await failure(other.exportAccount())
      assert.equal(refused.code, 'MFA_REQUIRED')
      assert.equal(refused.stepUpRequired, true)
      await other.stepUp({ method: 'recovery_code', code: confirmed.recovery_codes![0]! })
      assert.equal((await other.exportAccount()).user.email, email)
      assert.equal((await other.regenerateRecoveryCodes()).recovery_codes.length, 10)
      assert.deepEqual(await other.removeFactor(enrolment.factor_id), { id: enrolment.factor_id, deleted: true })
      assert.ok('refresh_token' in (await newClient().login({ email, password: PASSWORD })), 'a password alone again')
    })

    test('every watchlist method, with pagination', async () => {
      const { client } = await loggedIn()
      const created = await client.createWatchlist({ name: 'Tech', symbols: ['aapl', 'msft'] })
      assert.deepEqual(created.symbols, ['AAPL', 'MSFT'])
      assert.equal((await client.getWatchlist(created.id)).name, 'Tech')
      assert.equal((await client.updateWatchlist(created.id, { name: 'Big tech' })).name, 'Big tech')
      assert.deepEqual((await client.addWatchlistSymbol(created.id, 'nvda')).symbols, ['AAPL', 'MSFT', 'NVDA'])
      assert.deepEqual((await client.removeWatchlistSymbol(created.id, 'MSFT')).symbols, ['AAPL', 'NVDA'])
      for (const name of ['A', 'B']) await client.createWatchlist({ name })
      const first = await client.listWatchlists({ limit: 2 })
      assert.equal(first.watchlists.length, 2)
      assert.ok(first.next_cursor)
      const second = await client.listWatchlists({ limit: 2, cursor: first.next_cursor! })
      assert.deepEqual(second.watchlists.map((w) => w.name), ['B'])
      assert.equal(second.next_cursor, null)
      assert.deepEqual(await client.deleteWatchlist(created.id), { id: created.id, deleted: true })
    })

    test('export and deletion: the copy of the account, then the account gone and the session forgotten', async () => {
      const { client, email } = await loggedIn()
      await client.createWatchlist({ name: 'Mine' })
      const copy = await client.exportAccount()
      assert.equal(copy.user.email, email)
      assert.deepEqual(copy.watchlists.map((w) => w.name), ['Mine'])
      assert.equal((await failure(client.deleteAccount('not the password'))).code, 'INVALID_CREDENTIALS')
      const deleted = await client.deleteAccount(PASSWORD)
      assert.equal(deleted.deleted, true)
      assert.equal(deleted.user_id, copy.user.user_id)
      assert.equal((await failure(client.me())).code, 'AUTH_REQUIRED')
    })

    test('errors arrive as one type with code, status, details and request id; a network failure is told apart', async () => {
      const client = newClient()
      const wrong = await failure(client.login({ email: uniqueEmail('nobody'), password: 'not the password' }))
      assert.equal(wrong.code, 'INVALID_CREDENTIALS')
      assert.equal(wrong.status, 401)
      assert.match(wrong.requestId ?? '', /^[0-9a-f-]{36}$/)
      assert.equal(wrong.isNetworkError, false)

      const invalid = await failure(client.register({ email: 'not-an-address', password: 'x', full_name: '' }))
      assert.equal(invalid.code, 'VALIDATION_ERROR')
      assert.ok(invalid.details?.some((detail) => detail.field === 'email'))

      const { client: user } = await loggedIn()
      await assert.rejects(user.getWatchlist('00000000-0000-4000-8000-000000000000'), { code: 'NOT_FOUND', status: 404 })

      const closed = createServer()
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
      const { port } = closed.address() as AddressInfo
      await new Promise((resolve) => closed.close(resolve))
      const offline = new PortcullisClient({ baseUrl: `http://127.0.0.1:${port}/api/v1` })
      const network = await failure(offline.me())
      assert.equal(network.code, 'NETWORK_ERROR')
      assert.equal(network.status, 0)
      assert.equal(network.isNetworkError, true)
    })

    test('20 concurrent calls with an expired access token cause exactly one refresh, and all 20 succeed', async () => {
      const { client } = await loggedIn()
      const before = sent.length
      const results = await withExpiredAccess(() => Promise.all(Array.from({ length: 20 }, () => client.me())))
      assert.equal(results.length, 20)
      const during = sent.slice(before)
      assert.equal(during.filter((p) => p.endsWith('/auth/refresh')).length, 1)
      assert.equal(during.filter((p) => p.endsWith('/auth/me')).length, 40, 'each call sent once, refused, and repeated once')
    })

    test('a refused refresh ends the session once, calls onSessionEnd once, and never loops', async () => {
      const ended: string[] = []
      const { client } = await loggedIn({ onSessionEnd: ({ reason }) => ended.push(reason) })
      const before = sent.length
      // Past the refresh token's 7 days: the access token says TOKEN_EXPIRED, the refresh is refused.
      t.clock.advance(8 * 24 * 3600)
      try {
        const failures = await Promise.all(Array.from({ length: 5 }, () => failure(client.me())))
        assert.ok(failures.every((error) => error.code === 'INVALID_REFRESH_TOKEN'))
      } finally {
        t.clock.advance(-8 * 24 * 3600)
      }
      assert.deepEqual(ended, ['refresh_failed'])
      assert.deepEqual(sent.slice(before).filter((p) => p.endsWith('/auth/refresh')).length, 1)
      assert.equal(sent.length - before, 6, 'five calls and one refresh, nothing repeated')
      await assert.rejects(client.me(), { code: 'AUTH_REQUIRED' }, 'the tokens were cleared')
      assert.deepEqual(ended, ['refresh_failed'])
    })

    test('a revoked session: onSessionEnd once with the reason, no refresh, no retry', async () => {
      const ended: string[] = []
      const { client, email } = await loggedIn({ onSessionEnd: ({ reason }) => ended.push(reason) })
      const elsewhere = newClient()
      await elsewhere.login({ email, password: PASSWORD })
      await elsewhere.logoutAll()
      const before = sent.length
      await assert.rejects(client.me(), { code: 'INVALID_TOKEN' })
      assert.deepEqual(sent.slice(before), [`${t.base}/auth/me`])
      assert.deepEqual(ended, ['revoked'])
      await assert.rejects(client.me(), { code: 'AUTH_REQUIRED' })
      assert.deepEqual(ended, ['revoked'])
    })

    test('ACCOUNT_DISABLED is surfaced, not retried and not refreshed', async () => {
      const { client, email } = await loggedIn()
      await t.app.services.accounts.disable(email, 'suspended')
      const before = sent.length
      await assert.rejects(client.me(), { code: 'ACCOUNT_DISABLED', status: 403 })
      assert.deepEqual(sent.slice(before), [`${t.base}/auth/me`])
    })

    test('refreshAheadSeconds refreshes before exp by the injected clock, so no call meets TOKEN_EXPIRED', async () => {
      let now = Date.now()
      const { client } = await loggedIn({ refreshAheadSeconds: 60, now: () => now })
      const before = refreshes()
      await client.me()
      assert.equal(refreshes() - before, 0)
      now += (ACCESS_LIFE - 30) * 1000
      await client.me()
      assert.equal(refreshes() - before, 1)
    })

    test('pluggable storage: tokens go to the given store and leave it at logout', async () => {
      const inner = memoryStorage()
      const saved: Tokens[] = []
      let cleared = 0
      const storage: TokenStorage = {
        load: () => inner.load(),
        save: (tokens) => {
          saved.push(tokens)
          return inner.save(tokens)
        },
        clear: () => {
          cleared++
          return inner.clear()
        },
      }
      const { client } = await loggedIn({ storage })
      assert.equal(saved.length, 1)
      assert.ok(saved[0]!.refreshToken.split('.').length === 3)
      await withExpiredAccess(() => client.me())
      assert.equal(saved.length, 2, 'the refreshed access token is stored')
      assert.equal(saved[1]!.refreshToken, saved[0]!.refreshToken)
      await client.logout()
      assert.equal(cleared, 1)
      assert.equal(await inner.load(), null)
      assert.throws(() => new PortcullisClient({ baseUrl, transport: 'cookie', storage }), TypeError)
    })

    test('outside a browser the default stays the body transport, without a warning', async (ctx) => {
      const warn = ctx.mock.method(console, 'warn', () => {})
      const client = newClient()
      const email = uniqueEmail('node-default')
      await client.register({ email, password: PASSWORD, full_name: 'Node' })
      await client.verifyEmail(tokenFromMail(await t.mail.next(email)))
      const login = await client.login({ email, password: PASSWORD })
      assert.ok('refresh_token' in login, 'a Node program holds its refresh token')
      assert.equal(warn.mock.callCount(), 0)
    })

    describe('client.fetch for an application\'s own API that verifies tokens with the JWKS', () => {
      let api: Server
      let apiUrl: string
      before(async () => {
        const jwks = createRemoteJWKSet(new URL('/.well-known/jwks.json', baseUrl))
        api = createServer(async (request, response) => {
          const token = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1]
          const answer = (status: number, body: unknown) => response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
          try {
            const { payload } = await jwtVerify(token ?? '', jwks, {
              issuer: t.config.issuer, audience: t.config.audience, typ: 'at+jwt', algorithms: ['EdDSA'], currentDate: new Date(t.clock.now()),
            })
            answer(200, { success: true, data: { user: payload.sub } })
          } catch (error) {
            answer(401, { success: false, error: { code: error instanceof joseErrors.JWTExpired ? 'TOKEN_EXPIRED' : 'INVALID_TOKEN', message: 'no' } })
          }
        })
        await new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve))
        apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}/portfolio`
      })
      after(async () => {
        await new Promise((resolve) => api.close(resolve))
      })

      test('attaches the token, and on TOKEN_EXPIRED refreshes once and repeats once', async () => {
        const { client } = await loggedIn({ tokenOrigins: [new URL(apiUrl).origin] })
        const me = await client.me()
        const ok = await client.fetch(apiUrl)
        assert.equal(ok.status, 200)
        assert.equal(((await ok.json()) as { data: { user: string } }).data.user, me.user_id)
        const before = refreshes()
        const again = await withExpiredAccess(() => client.fetch(apiUrl, { method: 'POST', body: 'kept for the repeat' }))
        assert.equal(again.status, 200)
        assert.equal(refreshes() - before, 1)
        const anonymous = await newClient({ tokenOrigins: [new URL(apiUrl).origin] }).fetch(apiUrl)
        assert.equal(anonymous.status, 401, 'another 401 is handed back, not retried')
      })

      test('the bearer token goes only to the service\'s origin and tokenOrigins: a fetch to any other URL is refused before it is sent', async () => {
        // The attacker's site, which would log any Authorization header it receives.
        const received: (string | null)[] = []
        const evil = createServer((request, response) => {
          received.push(request.headers.authorization ?? null)
          response.end('{}')
        })
        await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve))
        const evilOrigin = `http://127.0.0.1:${(evil.address() as AddressInfo).port}`
        try {
          const { client } = await loggedIn({ tokenOrigins: [new URL(apiUrl).origin] })
          const sentBefore = sent.length
          const foreign = [`${evilOrigin}/steal`, new URL('/steal', evilOrigin), `http://localhost:${new URL(apiUrl).port}/portfolio`, apiUrl.replace('http:', 'https:'), 'data:text/plain,x', '/relative/in/node']
          for (const url of foreign) {
            const refused = await failure(client.fetch(url))
            assert.equal(refused.code, 'TOKEN_ORIGIN_NOT_ALLOWED', String(url))
            assert.equal(refused.status, 0)
          }
          assert.deepEqual(received, [], 'nothing reached the foreign site')
          assert.equal(sent.length, sentBefore, 'and nothing was sent at all')
          // The service's own origin needs no listing.
          const own = await client.fetch(new URL(`${t.base}/auth/me`, baseUrl))
          assert.equal(own.status, 200)
          // A listed origin that redirects elsewhere: fetch itself drops the header on the way out.
          const redirecting = createServer((_request, response) => response.writeHead(302, { location: `${evilOrigin}/after-redirect` }).end())
          await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve))
          try {
            const listedOrigin = `http://127.0.0.1:${(redirecting.address() as AddressInfo).port}`
            const redirected = newClient({ tokenOrigins: [listedOrigin] })
            await redirected.login({ email: (await client.me()).email, password: PASSWORD })
            assert.equal((await redirected.fetch(`${listedOrigin}/moved`)).status, 200)
            assert.deepEqual(received, [null], 'the redirect reached the foreign site without the token')
          } finally {
            await new Promise((resolve) => redirecting.close(resolve))
          }
        } finally {
          await new Promise((resolve) => evil.close(resolve))
        }
        for (const entry of ['https://api.example.com/v1', 'api.example.com', 'ftp://api.example.com', 'https://user@api.example.com', '*']) {
          assert.throws(() => newClient({ tokenOrigins: [entry] }), TypeError, entry)
        }
      })
    })
  })
}

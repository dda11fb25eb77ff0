import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { createLocalJWKSet, decodeProtectedHeader, decodeJwt, jwtVerify } from 'jose'
import { sessions, users } from '../../src/db/repositories.ts'
import { ENGINES } from '../helpers/db.ts'
import { mailText, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'

/** Every 401 of the API names its protected resource metadata (RFC 9728 section 5.1). */
function metadataUrl(t: TestApp): string {
  return `${new URL(t.config.publicUrl).origin}/.well-known/oauth-protected-resource${t.base}`
}

for (const engine of ENGINES) {
  describe(`auth on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine)
    })
    after(async () => {
      await t.close()
    })

    describe('register', () => {
      test('answers 201 with exactly the seed body and a normalised address', async () => {
        const raw = `  Mixed.${uniqueEmail().toUpperCase()} `
        const response = await t.post('/auth/register', { email: raw, password: PASSWORD, full_name: '  Ada Lovelace ' })
        assert.equal(response.statusCode, 201)
        const body = response.json()
        assert.deepEqual(Object.keys(body).sort(), ['data', 'message', 'success'])
        assert.equal(body.success, true)
        assert.deepEqual(Object.keys(body.data).sort(), ['email', 'user_id', 'verification_required'])
        assert.match(body.data.user_id, /^[0-9a-f-]{36}$/)
        assert.equal(body.data.email, raw.trim().toLowerCase())
        assert.equal(body.data.verification_required, true)
        assert.match(body.message, /e-mail/i)
        const row = await users.findById(t.app.services.db.kysely, body.data.user_id)
        assert.equal(row?.full_name, 'Ada Lovelace')
        assert.equal(row?.email_verified_at, null)
      })

      test('stores an argon2id hash with its parameters in the PHC string, never the password', async () => {
        const email = uniqueEmail()
        const response = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Hash' })
        const row = await users.findById(t.app.services.db.kysely, response.json().data.user_id)
        assert.match(row!.password_hash, /^\$argon2id\$v=19\$m=\d+,t=\d+,p=\d+\$/)
        assert.ok(!row!.password_hash.includes(PASSWORD))
        assert.ok(!response.body.includes('argon2'))
      })

      test('refuses a second account for the same address in any case or padding with EMAIL_EXISTS', async () => {
        const email = uniqueEmail()
        assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'One' })).statusCode, 201)
        const again = await t.post('/auth/register', { email: ` ${email.toUpperCase()}`, password: PASSWORD, full_name: 'Two' })
        assert.equal(again.statusCode, 409)
        assert.equal(again.json().error.code, 'EMAIL_EXISTS')
      })

      test('concurrent registrations of one address give exactly one 201', async () => {
        const email = uniqueEmail()
        const responses = await Promise.all(
          Array.from({ length: 10 }, () => t.post('/auth/register', { email, password: PASSWORD, full_name: 'Racer' })),
        )
        const statuses = responses.map((r) => r.statusCode).sort()
        assert.deepEqual(statuses, [201, ...Array(9).fill(409)])
        assert.ok(responses.filter((r) => r.statusCode === 409).every((r) => r.json().error.code === 'EMAIL_EXISTS'))
      })

      const invalid: [string, Record<string, unknown>, string][] = [
        ['missing email', { password: PASSWORD, full_name: 'X' }, 'email'],
        ['missing password', { email: 'a@example.com', full_name: 'X' }, 'password'],
        ['missing full_name', { email: 'a@example.com', password: PASSWORD }, 'full_name'],
        ['email without @', { email: 'nobody.example.com', password: PASSWORD, full_name: 'X' }, 'email'],
        ['email with two @', { email: 'a@b@example.com', password: PASSWORD, full_name: 'X' }, 'email'],
        ['email with a display name', { email: 'Ann <ann@example.com>', password: PASSWORD, full_name: 'X' }, 'email'],
        ['email without a dotted domain', { email: 'ann@localhost', password: PASSWORD, full_name: 'X' }, 'email'],
        ['email with a space', { email: 'a nn@example.com', password: PASSWORD, full_name: 'X' }, 'email'],
        ['email over 254 characters', { email: `${'a'.repeat(60)}@${'b'.repeat(190)}.com`, password: PASSWORD, full_name: 'X' }, 'email'],
        ['email of the wrong type', { email: 42, password: PASSWORD, full_name: 'X' }, 'email'],
        ['password of 7 characters', { email: 'a@example.com', password: 'abcdefg', full_name: 'X' }, 'password'],
        ['password of 129 code points', { email: 'a@example.com', password: '😀'.repeat(129), full_name: 'X' }, 'password'],
        ['password equal to the address', { email: 'Same@Example.com', password: 'same@example.com', full_name: 'X' }, 'password'],
        ['a common password', { email: 'a@example.com', password: 'Password1', full_name: 'X' }, 'password'],
        ['blank full_name', { email: 'a@example.com', password: PASSWORD, full_name: '   ' }, 'full_name'],
        ['full_name over 100 characters', { email: 'a@example.com', password: PASSWORD, full_name: 'n'.repeat(101) }, 'full_name'],
        ['full_name with a control character', { email: 'a@example.com', password: PASSWORD, full_name: 'Ann\u0007' }, 'full_name'],
        ['an unknown field', { email: 'a@example.com', password: PASSWORD, full_name: 'X', role: 'admin' }, 'role'],
      ]
      for (const [name, body, field] of invalid) {
        test(`refuses ${name} with VALIDATION_ERROR naming ${field}`, async () => {
          const response = await t.post('/auth/register', body)
          assert.equal(response.statusCode, 400, response.body)
          const error = response.json().error
          assert.equal(error.code, 'VALIDATION_ERROR')
          assert.ok(error.details.some((d: { field: string }) => d.field === field), JSON.stringify(error.details))
        })
      }

      test('a password of exactly 128 code points (256 UTF-16 units) is accepted', async () => {
        const response = await t.post('/auth/register', { email: uniqueEmail(), password: '😀'.repeat(128), full_name: 'Emoji' })
        assert.equal(response.statusCode, 201, response.body)
      })
    })

    describe('e-mail verification', () => {
      test('the mailed token verifies the address once; a second use is refused', async () => {
        const email = uniqueEmail()
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'V' })
        const mail = await t.mail.next(email)
        assert.match(mail.raw, /Subject: Verify your e-mail address/)
        const token = tokenFromMail(mail)
        assert.ok(mailText(mail).includes(`/verify-email?token=${token}`))
        const first = await t.post('/auth/verify-email', { token })
        assert.equal(first.statusCode, 200)
        assert.deepEqual(first.json(), { success: true, data: { email, verified: true } })
        const second = await t.post('/auth/verify-email', { token })
        assert.equal(second.statusCode, 400)
        assert.equal(second.json().error.code, 'INVALID_VERIFICATION_TOKEN')
      })

      test('an unknown token is INVALID_VERIFICATION_TOKEN', async () => {
        const response = await t.post('/auth/verify-email', { token: 'A'.repeat(43) })
        assert.equal(response.statusCode, 400)
        assert.equal(response.json().error.code, 'INVALID_VERIFICATION_TOKEN')
      })

      test('a token older than 24 hours is refused', async () => {
        const email = uniqueEmail()
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Late' })
        const token = tokenFromMail(await t.mail.next(email))
        t.clock.advance(24 * 3600 + 1)
        try {
          const response = await t.post('/auth/verify-email', { token })
          assert.equal(response.json().error.code, 'INVALID_VERIFICATION_TOKEN')
        } finally {
          t.clock.advance(-(24 * 3600 + 1))
        }
      })

      test('only the hash of the token is stored', async () => {
        const email = uniqueEmail()
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'H' })
        const token = tokenFromMail(await t.mail.next(email))
        const rows = await t.app.services.db.kysely.selectFrom('one_time_tokens').select('token_hash').execute()
        assert.ok(rows.length > 0)
        assert.ok(rows.every((row) => row.token_hash !== token && /^[0-9a-f]{64}$/.test(row.token_hash)))
      })

      test('resend answers the same 202 for unknown, verified and unverified addresses; only the last gets mail', async () => {
        const pending = uniqueEmail('pending')
        await t.post('/auth/register', { email: pending, password: PASSWORD, full_name: 'P' })
        const oldToken = tokenFromMail(await t.mail.next(pending))
        const verified = await registerVerifyLogin(t)
        const answers = await Promise.all([uniqueEmail('ghost'), verified.email, pending].map((email) => t.post('/auth/resend-verification', { email })))
        for (const answer of answers) assert.equal(answer.statusCode, 202)
        assert.equal(new Set(answers.map((a) => a.body)).size, 1)
        const newToken = tokenFromMail(await t.mail.next(pending))
        assert.notEqual(newToken, oldToken)
        assert.equal((await t.post('/auth/verify-email', { token: oldToken })).json().error.code, 'INVALID_VERIFICATION_TOKEN')
        assert.equal((await t.post('/auth/verify-email', { token: newToken })).statusCode, 200)
        await t.app.services.background.drain()
        assert.equal(t.mail.received.filter((m) => m.to.includes(verified.email)).length, 0)
      })
    })

    describe('login', () => {
      test('answers the seed token pair with Cache-Control: no-store and creates a session', async () => {
        const { email, userId } = await registerVerifyLogin(t)
        const response = await t.post('/auth/login', { email, password: PASSWORD })
        assert.equal(response.statusCode, 200)
        assert.equal(response.headers['cache-control'], 'no-store')
        const body = response.json()
        assert.deepEqual(Object.keys(body.data).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type'])
        assert.equal(body.data.token_type, 'bearer')
        assert.equal(body.data.expires_in, 900)
        const sid = decodeJwt(body.data.access_token).sid as string
        const state = await sessions.findAuthState(t.app.services.db.kysely, sid)
        assert.equal(state?.user_id, userId)
      })

      test('an unknown address and a wrong password answer byte-identical 401s', async () => {
        const { email } = await registerVerifyLogin(t)
        const unknown = await t.post('/auth/login', { email: uniqueEmail('ghost'), password: PASSWORD })
        const wrong = await t.post('/auth/login', { email, password: `${PASSWORD}!` })
        assert.equal(unknown.statusCode, 401)
        assert.equal(wrong.statusCode, 401)
        assert.equal(unknown.body, wrong.body)
        assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS')
        assert.equal(wrong.headers['www-authenticate'], `Bearer realm="portcullis", resource_metadata="${metadataUrl(t)}"`)
      })

      test('the password is compared exactly as sent: no trimming or case folding', async () => {
        const { email } = await registerVerifyLogin(t)
        for (const password of [` ${PASSWORD}`, PASSWORD.toUpperCase(), `${PASSWORD} `]) {
          assert.equal((await t.post('/auth/login', { email, password })).json().error.code, 'INVALID_CREDENTIALS')
        }
        assert.equal((await t.post('/auth/login', { email: ` ${email.toUpperCase()} `, password: PASSWORD })).statusCode, 200)
      })

      test('an unverified account learns EMAIL_NOT_VERIFIED only with the right password', async () => {
        const email = uniqueEmail()
        await t.post('/auth/register', { email, password: PASSWORD, full_name: 'U' })
        const wrong = await t.post('/auth/login', { email, password: 'not the password' })
        assert.equal(wrong.statusCode, 401)
        assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS')
        const right = await t.post('/auth/login', { email, password: PASSWORD })
        assert.equal(right.statusCode, 403)
        assert.equal(right.json().error.code, 'EMAIL_NOT_VERIFIED')
      })

      test('a disabled account learns ACCOUNT_DISABLED only with the right password', async () => {
        const { email } = await registerVerifyLogin(t)
        await t.app.services.accounts.disable(email, 'suspended')
        try {
          const wrong = await t.post('/auth/login', { email, password: 'not the password' })
          assert.equal(wrong.json().error.code, 'INVALID_CREDENTIALS')
          const right = await t.post('/auth/login', { email, password: PASSWORD })
          assert.equal(right.statusCode, 403)
          assert.equal(right.json().error.code, 'ACCOUNT_DISABLED')
        } finally {
          await t.app.services.accounts.enable(email)
        }
        assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 200)
      })
    })

    describe('tokens', () => {
      test('access and refresh tokens are EdDSA JWTs with kid, their own typ and the documented claims', async () => {
        const { access_token, refresh_token, userId } = await registerVerifyLogin(t)
        const accessHeader = decodeProtectedHeader(access_token)
        assert.deepEqual({ alg: accessHeader.alg, typ: accessHeader.typ }, { alg: 'EdDSA', typ: 'at+jwt' })
        assert.ok(accessHeader.kid)
        const access = decodeJwt(access_token)
        assert.equal(access.iss, t.config.issuer)
        assert.equal(access.aud, t.config.audience)
        assert.equal(access.sub, userId)
        assert.equal(access.client_id, 'portcullis')
        assert.ok(access.jti && access.sid)
        assert.equal(access.exp! - access.iat!, 900)
        const refreshHeader = decodeProtectedHeader(refresh_token)
        assert.equal(refreshHeader.typ, 'rt+jwt')
        const refresh = decodeJwt(refresh_token)
        assert.equal(refresh.exp! - refresh.iat!, 7 * 24 * 3600)
        assert.equal(refresh.sid, access.sid)
        assert.notEqual(refresh.jti, access.jti)
        assert.equal(refresh.amr, undefined, 'the assurance claims are for resource servers: access tokens only')
      })

      test('a password login asserts amr ["pwd"], acr aal1 and auth_time; refresh carries what the session holds', async () => {
        const loginAt = Math.floor(t.clock.now() / 1000)
        const { access_token, refresh_token } = await registerVerifyLogin(t)
        const access = decodeJwt(access_token)
        assert.deepEqual(access.amr, ['pwd'])
        assert.equal(access.acr, 'aal1')
        assert.equal(access.auth_time, loginAt)

        // Ten minutes on, refresh keeps the login's auth_time: a refresh verifies nothing new.
        t.clock.advance(600)
        const refreshed = decodeJwt((await t.post('/auth/refresh', { refresh_token })).json().data.access_token)
        assert.deepEqual([refreshed.amr, refreshed.acr, refreshed.auth_time], [['pwd'], 'aal1', loginAt])
        assert.equal(refreshed.iat, loginAt + 600)

        // Once the session holds more (as a second factor verified in it will make it), refresh asserts that.
        const stepped = Math.floor(t.clock.now() / 1000)
        await t.app.services.db.kysely.updateTable('sessions').set({ amr: 'pwd otp mfa', acr: 'aal2', auth_time: t.clock.now() }).where('id', '=', access.sid as string).execute()
        const after = decodeJwt((await t.post('/auth/refresh', { refresh_token })).json().data.access_token)
        assert.deepEqual([after.amr, after.acr, after.auth_time], [['pwd', 'otp', 'mfa'], 'aal2', stepped])
      })

      test('another service verifies an access token with nothing but the published JWKS', async () => {
        const { access_token } = await registerVerifyLogin(t)
        const jwks = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })
        assert.equal(jwks.statusCode, 200)
        const set = jwks.json()
        for (const key of set.keys) {
          assert.deepEqual(Object.keys(key).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x'])
        }
        const { payload } = await jwtVerify(access_token, createLocalJWKSet(set), {
          issuer: t.config.issuer,
          audience: t.config.audience,
          typ: 'at+jwt',
          algorithms: ['EdDSA'],
          currentDate: new Date(t.clock.now()),
        })
        assert.ok(payload.sub)
      })
    })

    describe('refresh', () => {
      test('answers only access_token and expires_in, and the new token works', async () => {
        const { refresh_token } = await registerVerifyLogin(t)
        const response = await t.post('/auth/refresh', { refresh_token })
        assert.equal(response.statusCode, 200)
        assert.equal(response.headers['cache-control'], 'no-store')
        assert.deepEqual(Object.keys(response.json().data).sort(), ['access_token', 'expires_in'])
        assert.equal(response.json().data.expires_in, 900)
        assert.equal((await t.get('/auth/me', response.json().data.access_token)).statusCode, 200)
      })

      test('an access token sent as a refresh token is INVALID_REFRESH_TOKEN', async () => {
        const { access_token } = await registerVerifyLogin(t)
        const response = await t.post('/auth/refresh', { refresh_token: access_token })
        assert.equal(response.statusCode, 401)
        assert.equal(response.json().error.code, 'INVALID_REFRESH_TOKEN')
        assert.equal(response.headers['www-authenticate'], `Bearer realm="portcullis", error="invalid_token", resource_metadata="${metadataUrl(t)}"`)
      })

      test('garbage, a tampered token and an expired token are all INVALID_REFRESH_TOKEN', async () => {
        const { refresh_token } = await registerVerifyLogin(t)
        const [h, p, s] = refresh_token.split('.')
        const tampered = `${h}.${Buffer.from(JSON.stringify({ ...decodeJwt(refresh_token), sub: '00000000-0000-4000-8000-000000000000' })).toString('base64url')}.${s}`
        void p
        for (const token of ['garbage', tampered]) {
          assert.equal((await t.post('/auth/refresh', { refresh_token: token })).json().error.code, 'INVALID_REFRESH_TOKEN')
        }
        t.clock.advance(7 * 24 * 3600 + 31)
        try {
          assert.equal((await t.post('/auth/refresh', { refresh_token })).json().error.code, 'INVALID_REFRESH_TOKEN')
        } finally {
          t.clock.advance(-(7 * 24 * 3600 + 31))
        }
      })

      test('a revoked session refuses its refresh token and its access tokens', async () => {
        const { refresh_token, access_token } = await registerVerifyLogin(t)
        const sid = decodeJwt(refresh_token).sid as string
        await t.app.services.db.kysely.updateTable('sessions').set({ revoked_at: t.clock.now() }).where('id', '=', sid).execute()
        assert.equal((await t.post('/auth/refresh', { refresh_token })).json().error.code, 'INVALID_REFRESH_TOKEN')
        assert.equal((await t.get('/auth/me', access_token)).json().error.code, 'INVALID_TOKEN')
      })

      test('a disabled account is refused with ACCOUNT_DISABLED', async () => {
        const { refresh_token, email } = await registerVerifyLogin(t)
        await t.app.services.accounts.disable(email, 'banned')
        const response = await t.post('/auth/refresh', { refresh_token })
        assert.equal(response.statusCode, 403)
        assert.equal(response.json().error.code, 'ACCOUNT_DISABLED')
      })
    })

    describe('bearer authentication', () => {
      test('GET /auth/me answers the caller', async () => {
        const { access_token, email, userId } = await registerVerifyLogin(t)
        const response = await t.get('/auth/me', access_token)
        assert.equal(response.statusCode, 200)
        const data = response.json().data
        // The seed's five fields, and the two metadata objects API.md adds (null until set).
        assert.deepEqual(Object.keys(data).sort(), ['app_metadata', 'created_at', 'email', 'email_verified', 'full_name', 'user_id', 'user_metadata'])
        assert.equal(data.app_metadata, null)
        assert.equal(data.user_metadata, null)
        assert.equal(data.user_id, userId)
        assert.equal(data.email, email)
        assert.equal(data.email_verified, true)
        assert.ok(!Number.isNaN(Date.parse(data.created_at)))
      })

      test('no credential, or another scheme, is AUTH_REQUIRED with a bare challenge', async () => {
        for (const headers of [{}, { authorization: 'Basic dXNlcjpwYXNz' }]) {
          const response = await t.app.inject({ method: 'GET', url: `${t.base}/auth/me`, headers })
          assert.equal(response.statusCode, 401)
          assert.equal(response.json().error.code, 'AUTH_REQUIRED')
          assert.equal(response.headers['www-authenticate'], `Bearer realm="portcullis", resource_metadata="${metadataUrl(t)}"`)
        }
      })

      test('a malformed or refresh token is INVALID_TOKEN with error="invalid_token"', async () => {
        const { refresh_token } = await registerVerifyLogin(t)
        for (const token of ['not.a.jwt', 'abc', refresh_token]) {
          const response = await t.get('/auth/me', token)
          assert.equal(response.statusCode, 401)
          assert.equal(response.json().error.code, 'INVALID_TOKEN')
          assert.equal(response.headers['www-authenticate'], `Bearer realm="portcullis", error="invalid_token", resource_metadata="${metadataUrl(t)}"`)
        }
        const spaced = await t.app.inject({ method: 'GET', url: `${t.base}/auth/me`, headers: { authorization: 'Bearer a b' } })
        assert.equal(spaced.json().error.code, 'INVALID_TOKEN')
      })

      test('a genuine expired token is TOKEN_EXPIRED, only past the 30 s skew, and a tampered one stays INVALID_TOKEN', async () => {
        const { access_token } = await registerVerifyLogin(t)
        const [h, , s] = access_token.split('.')
        const tampered = `${h}.${Buffer.from(JSON.stringify({ ...decodeJwt(access_token), exp: 1 })).toString('base64url')}.${s}`
        t.clock.advance(900 + 29)
        try {
          assert.equal((await t.get('/auth/me', access_token)).statusCode, 200)
          t.clock.advance(2)
          const expired = await t.get('/auth/me', access_token)
          assert.equal(expired.statusCode, 401)
          assert.equal(expired.json().error.code, 'TOKEN_EXPIRED')
          assert.match(expired.headers['www-authenticate'] as string, /error="invalid_token"/)
          assert.equal((await t.get('/auth/me', tampered)).json().error.code, 'INVALID_TOKEN')
        } finally {
          t.clock.advance(-(900 + 31))
        }
      })

      test('a disable bites on the very next request, and enabling restores access', async () => {
        const { access_token, email } = await registerVerifyLogin(t)
        assert.equal((await t.get('/auth/me', access_token)).statusCode, 200)
        await t.app.services.accounts.disable(email, 'suspended')
        const refused = await t.get('/auth/me', access_token)
        assert.equal(refused.statusCode, 403)
        assert.equal(refused.json().error.code, 'ACCOUNT_DISABLED')
        await t.app.services.accounts.enable(email)
        assert.equal((await t.get('/auth/me', access_token)).statusCode, 200)
      })

      test('a JSON content type with an empty body is accepted on a route without a body', async () => {
        const { access_token } = await registerVerifyLogin(t)
        const response = await t.app.inject({
          method: 'GET',
          url: `${t.base}/auth/me`,
          headers: { authorization: `Bearer ${access_token}`, 'content-type': 'application/json' },
        })
        assert.equal(response.statusCode, 200)
      })
    })
  })
}

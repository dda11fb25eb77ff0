import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { rotateSigningKey } from '../../src/auth/keys.ts'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

/**
 * The cache of verified access tokens skips only the signature and claim checks: revocation,
 * account state, expiry and key removal still decide every request, cached or not.
 */
for (const engine of ENGINES) {
  describe(`verified-token cache on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { overrides: { tokenCacheSize: 3 } })
    })
    after(async () => {
      await t.close()
    })

    const code = async (token: string) => (await t.get('/auth/me', token)).json().error?.code as string | undefined
    const cached = () => t.app.services.tokens.cachedTokens()

    test('a revoked session is refused while its token is cached', async () => {
      const user = await registerVerifyLogin(t)
      assert.equal(await code(user.access_token), undefined)
      assert.ok(cached() >= 1)
      assert.equal(await code(user.access_token), undefined)
      assert.equal((await t.post('/auth/logout-all', undefined, user.access_token)).statusCode, 200)
      assert.equal(await code(user.access_token), 'INVALID_TOKEN')
    })

    test('a disable bites while the token is cached', async () => {
      const user = await registerVerifyLogin(t)
      assert.equal(await code(user.access_token), undefined)
      await t.app.services.accounts.disable(user.email, 'suspended')
      assert.equal(await code(user.access_token), 'ACCOUNT_DISABLED')
    })

    test('a cached token past exp is TOKEN_EXPIRED, and a clock moved back refuses one from the future', async () => {
      const user = await registerVerifyLogin(t)
      assert.equal(await code(user.access_token), undefined)
      t.clock.advance(900 + 31)
      try {
        assert.equal(await code(user.access_token), 'TOKEN_EXPIRED')
        const fresh = (await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().data.access_token as string
        assert.equal(await code(fresh), undefined, 'cached at the later time')
        t.clock.advance(-(900 + 31))
        assert.equal(await code(fresh), 'INVALID_TOKEN', 'issued more than the skew in the future')
      } finally {
        t.clock.ms = Date.now()
      }
    })

    test('removing the key that signed a cached token refuses it at once', async () => {
      const user = await registerVerifyLogin(t)
      assert.equal(await code(user.access_token), undefined)
      const { kid } = JSON.parse(Buffer.from(user.access_token.split('.')[0]!, 'base64url').toString()) as { kid: string }
      await rotateSigningKey(t.app.services.db, t.app.services.sealer, t.clock.now())
      await t.app.services.db.kysely.deleteFrom('signing_keys').where('kid', '=', kid).execute()
      await t.app.services.keys.reload()
      assert.equal(await code(user.access_token), 'INVALID_TOKEN')
    })

    test('the cache holds at most its size; an evicted token is simply verified again', async () => {
      const users = []
      for (let i = 0; i < 5; i++) users.push(await registerVerifyLogin(t))
      for (const user of users) assert.equal(await code(user.access_token), undefined)
      assert.equal(cached(), 3)
      assert.equal(await code(users[0]!.access_token), undefined)
      assert.equal(cached(), 3)
    })

    test('a cached token answers only as its own kind', async () => {
      const user = await registerVerifyLogin(t)
      assert.equal(await code(user.access_token), undefined)
      assert.equal((await t.post('/auth/refresh', { refresh_token: user.refresh_token })).statusCode, 200)
      // Both are cached now; neither passes for the other.
      assert.equal(await code(user.refresh_token), 'INVALID_TOKEN')
      const accessAsRefresh = await t.post('/auth/refresh', { refresh_token: user.access_token })
      assert.equal(accessAsRefresh.json().error.code, 'INVALID_REFRESH_TOKEN')
    })

    test('a cached refresh token still needs its live session, and stops at its exp', async () => {
      const user = await registerVerifyLogin(t)
      const before = cached()
      assert.equal((await t.post('/auth/refresh', { refresh_token: user.refresh_token })).statusCode, 200)
      assert.equal(cached(), Math.min(before + 1, 3))
      assert.equal((await t.post('/auth/refresh', { refresh_token: user.refresh_token })).statusCode, 200)
      assert.equal((await t.post('/auth/logout', { refresh_token: user.refresh_token })).statusCode, 200)
      assert.equal((await t.post('/auth/refresh', { refresh_token: user.refresh_token })).json().error.code, 'INVALID_REFRESH_TOKEN')

      const other = await registerVerifyLogin(t)
      assert.equal((await t.post('/auth/refresh', { refresh_token: other.refresh_token })).statusCode, 200)
      t.clock.advance(7 * 86_400 + 60)
      try {
        assert.equal((await t.post('/auth/refresh', { refresh_token: other.refresh_token })).json().error.code, 'INVALID_REFRESH_TOKEN')
      } finally {
        t.clock.advance(-(7 * 86_400 + 60))
      }
    })
  })
}

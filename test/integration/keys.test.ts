import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { decodeProtectedHeader } from 'jose'
import { keyGraceMs, rotateSigningKey } from '../../src/auth/keys.ts'
import { createArgon2Hasher, type PasswordHasher } from '../../src/auth/passwords.ts'
import { REFRESH_TTL_SECONDS } from '../../src/auth/tokens.ts'
import { users } from '../../src/db/repositories.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail } from '../helpers/app.ts'

for (const engine of ENGINES) {
  describe(`signing keys on ${engine}`, () => {
    test('two instances share one key set: a token from one is accepted by the other', async () => {
      const storage = await createStorage(engine)
      const a = await startTestApp(engine, { storage })
      const b = await startTestApp(engine, { storage })
      try {
        const jwksA = (await a.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json()
        const jwksB = (await b.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json()
        assert.equal(jwksA.keys.length, 1)
        assert.deepEqual(jwksA, jwksB)
        const { access_token } = await registerVerifyLogin(a)
        assert.equal((await b.get('/auth/me', access_token)).statusCode, 200)
      } finally {
        await a.close()
        await b.close()
        await storage.drop()
      }
    })

    test('rotation logs nobody out: old tokens keep verifying, new ones use the new kid everywhere', async () => {
      const storage = await createStorage(engine)
      const a = await startTestApp(engine, { storage })
      const b = await startTestApp(engine, { storage })
      try {
        const before = await registerVerifyLogin(a)
        const oldKid = decodeProtectedHeader(before.access_token).kid
        // A rotation happens later than the first key's creation; the test clock must say so too.
        a.clock.advance(60)
        b.clock.advance(60)
        const newKid = await rotateSigningKey(a.app.services.db, a.app.services.sealer, a.clock.now())
        await a.app.services.keys.reload()

        const fresh = await a.post('/auth/login', { email: before.email, password: PASSWORD })
        const freshToken = fresh.json().data.access_token as string
        assert.equal(decodeProtectedHeader(freshToken).kid, newKid)
        // B has not reloaded yet; an unknown kid makes it look again (no more often than every 5 s).
        b.clock.advance(6)
        assert.equal((await b.get('/auth/me', freshToken)).statusCode, 200)
        b.clock.advance(-6)
        assert.equal((await b.get('/auth/me', before.access_token)).statusCode, 200)
        assert.equal((await a.post('/auth/refresh', { refresh_token: before.refresh_token })).statusCode, 200)

        const kids = (await a.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json().keys.map((k: { kid: string }) => k.kid)
        assert.deepEqual(new Set(kids), new Set([oldKid, newKid]))

        // Once every token the old key signed has expired, it is no longer published.
        a.clock.advance(keyGraceMs(REFRESH_TTL_SECONDS) / 1000 + 1)
        await a.app.services.keys.reload()
        const later = (await a.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json().keys.map((k: { kid: string }) => k.kid)
        assert.deepEqual(later, [newKid])
      } finally {
        await a.close()
        await b.close()
        await storage.drop()
      }
    })

    test('the private key never appears in the JWKS', async () => {
      const t = await startTestApp(engine)
      try {
        const response = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })
        assert.equal(response.statusCode, 200)
        assert.match(String(response.headers['cache-control']), /max-age/)
        for (const key of response.json().keys) assert.equal(key.d, undefined)
      } finally {
        await t.close()
      }
    })
  })

  describe(`password hashes on ${engine}`, () => {
    test('raised argon2 parameters upgrade a hash at the next login (rehash-on-login)', async () => {
      const storage = await createStorage(engine)
      const old = await startTestApp(engine, { storage })
      const { email, userId } = await registerVerifyLogin(old)
      await old.close()
      const stronger: PasswordHasher = createArgon2Hasher({ memoryCost: 512, timeCost: 2, parallelism: 1 })
      const t = await startTestApp(engine, { storage, overrides: { hasher: stronger } })
      try {
        const before = (await users.findById(t.app.services.db.kysely, userId))!.password_hash
        assert.match(before, /m=256,t=1,p=1/)
        assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 200)
        const after = (await users.findById(t.app.services.db.kysely, userId))!.password_hash
        assert.match(after, /^\$argon2id\$v=19\$m=512,t=2,p=1\$/)
        assert.equal((await t.post('/auth/login', { email, password: PASSWORD })).statusCode, 200)
      } finally {
        await t.close()
        await storage.drop()
      }
    })
  })

  describe(`verification switched off on ${engine}`, () => {
    test('REQUIRE_EMAIL_VERIFICATION=false: no mail, verification_required false, login at once', async () => {
      const t = await startTestApp(engine, { env: { REQUIRE_EMAIL_VERIFICATION: 'false' } })
      try {
        const email = uniqueEmail()
        const registered = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Quick' })
        assert.equal(registered.statusCode, 201)
        assert.equal(registered.json().data.verification_required, false)
        const login = await t.post('/auth/login', { email, password: PASSWORD })
        assert.equal(login.statusCode, 200)
        assert.equal((await t.get('/auth/me', login.json().data.access_token)).json().data.email_verified, false)
        await t.app.services.background.drain()
        assert.equal(t.mail.received.length, 0)
      } finally {
        await t.close()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { decodeJwt, decodeProtectedHeader, generateKeyPair, SignJWT, type JWTPayload } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

for (const engine of ENGINES) {
  describe(`access token verification on ${engine}`, () => {
    let t: TestApp
    let genuine: string
    let claims: JWTPayload
    let kid: string
    before(async () => {
      t = await startTestApp(engine)
      genuine = (await registerVerifyLogin(t)).access_token
      claims = decodeJwt(genuine)
      kid = decodeProtectedHeader(genuine).kid!
    })
    after(async () => {
      await t.close()
    })

    /** Signed with the service's real key, so only the named defect can cause a refusal. */
    async function signWithServiceKey(payload: JWTPayload, header: Record<string, unknown> = {}) {
      const { privateKey } = t.app.services.keys.signingKey()
      return new SignJWT(payload).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'at+jwt', ...header }).sign(privateKey)
    }

    async function codeFor(token: string): Promise<string> {
      return (await t.get('/auth/me', token)).json().error?.code ?? 'OK'
    }

    test('the control: a token re-signed with the service key and unchanged claims is accepted', async () => {
      assert.equal(await codeFor(await signWithServiceKey(claims)), 'OK')
    })

    test('alg "none" is refused in any spelling', async () => {
      for (const alg of ['none', 'None', 'NONE', 'nOnE']) {
        assert.equal(await codeFor(`${b64({ alg, typ: 'at+jwt', kid })}.${b64(claims)}.`), 'INVALID_TOKEN', alg)
      }
    })

    test('HS256 signed with the public key (key confusion) is refused', async () => {
      const jwk = (await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json().keys[0]
      for (const secret of [Buffer.from(jwk.x, 'base64url'), Buffer.from(JSON.stringify(jwk))]) {
        const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid, typ: 'at+jwt' }).sign(secret)
        assert.equal(await codeFor(forged), 'INVALID_TOKEN')
      }
    })

    test('a token signed by another Ed25519 key under our kid is refused', async () => {
      const { privateKey } = await generateKeyPair('EdDSA')
      const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'at+jwt' }).sign(privateKey)
      assert.equal(await codeFor(forged), 'INVALID_TOKEN')
    })

    const defects: [string, () => Promise<string>][] = [
      ['typ of a refresh token', () => signWithServiceKey(claims, { typ: 'rt+jwt' })],
      ['typ "JWT"', () => signWithServiceKey(claims, { typ: 'JWT' })],
      ['no typ', () => signWithServiceKey(claims, { typ: undefined })],
      ['an unknown kid', () => signWithServiceKey(claims, { kid: 'someone-else' })],
      ['a wrong issuer', () => signWithServiceKey({ ...claims, iss: 'https://evil.example' })],
      ['a wrong audience', () => signWithServiceKey({ ...claims, aud: 'https://other-api.example' })],
      ['nbf 31 s in the future', async () => signWithServiceKey({ ...claims, nbf: Math.floor(t.clock.now() / 1000) + 31 })],
      ['iat 31 s in the future', async () => signWithServiceKey({ ...claims, iat: Math.floor(t.clock.now() / 1000) + 31, exp: Math.floor(t.clock.now() / 1000) + 900 })],
      ['sub that is a number', () => signWithServiceKey({ ...claims, sub: 42 as unknown as string })],
      ['exp that is a string', () => signWithServiceKey({ ...claims, exp: String(claims.exp) as unknown as number })],
      ['no sid', () => signWithServiceKey({ ...claims, sid: undefined })],
      ['a sid of no session', () => signWithServiceKey({ ...claims, sid: '00000000-0000-4000-8000-000000000000' })],
      ['a sub that does not own the sid', () => signWithServiceKey({ ...claims, sub: '00000000-0000-4000-8000-000000000000' })],
    ]
    for (const [name, make] of defects) {
      test(`${name} is INVALID_TOKEN`, async () => {
        assert.equal(await codeFor(await make()), 'INVALID_TOKEN')
      })
    }

    test('2 and 4 segments are INVALID_TOKEN', async () => {
      const [h, p, s] = genuine.split('.')
      assert.equal(await codeFor(`${h}.${p}`), 'INVALID_TOKEN')
      assert.equal(await codeFor(`${h}.${p}.${s}.${s}`), 'INVALID_TOKEN')
    })

    test('nbf within the 30 s skew is accepted', async () => {
      assert.equal(await codeFor(await signWithServiceKey({ ...claims, nbf: Math.floor(t.clock.now() / 1000) + 29 })), 'OK')
    })
  })
}

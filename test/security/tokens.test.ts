import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'
import { existsSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, SignJWT, type JWTPayload } from 'jose'
import { ENGINES } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

for (const engine of ENGINES) {
  describe(`token attacks on ${engine}`, () => {
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
      const { signer } = t.app.services.keys.signingKey()
      return new SignJWT(payload).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'at+jwt', ...header }).sign(signer)
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

    test('a null, empty or truncated signature is refused', async () => {
      const [h, p, sig] = genuine.split('.')
      for (const token of [`${h}.${p}.`, `${h}.${p}.null`, `${h}.${p}.${sig!.slice(0, -2)}`, `${h}.${p}.${sig!.slice(0, 20)}`]) {
        assert.equal(await codeFor(token), 'INVALID_TOKEN')
      }
    })

    test('a tampered payload under the genuine signature is refused', async () => {
      const [h, , sig] = genuine.split('.')
      for (const change of [{ sub: '00000000-0000-4000-8000-000000000000' }, { exp: (claims.exp ?? 0) + 3600 }, { aud: claims.aud, scope: 'admin' }]) {
        assert.equal(await codeFor(`${h}.${b64({ ...claims, ...change })}.${sig}`), 'INVALID_TOKEN')
      }
    })

    test('HS256 with an empty key is refused', async () => {
      const head = b64({ alg: 'HS256', typ: 'at+jwt', kid })
      const body = b64(claims)
      const signature = createHmac('sha256', '').update(`${head}.${body}`).digest('base64url')
      assert.equal(await codeFor(`${head}.${body}.${signature}`), 'INVALID_TOKEN')
    })

    test('an embedded jwk header (the attacker\'s own key) is not trusted', async () => {
      const { publicKey, privateKey } = await generateKeyPair('EdDSA', { extractable: true })
      const jwk = await exportJWK(publicKey)
      for (const header of [{ jwk }, { jwk, kid: undefined }]) {
        const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt', kid, ...header }).sign(privateKey)
        assert.equal(await codeFor(forged), 'INVALID_TOKEN')
      }
    })

    test('jku and x5u headers are never fetched', async () => {
      let hits = 0
      const listener: Server = createServer((_request, response) => {
        hits++
        response.end('{}')
      })
      await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve))
      const url = `http://127.0.0.1:${(listener.address() as AddressInfo).port}/keys`
      try {
        const { privateKey } = await generateKeyPair('EdDSA')
        for (const header of [{ jku: url }, { x5u: url }, { jku: url, kid: 'attacker' }]) {
          const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt', kid, ...header }).sign(privateKey)
          assert.equal(await codeFor(forged), 'INVALID_TOKEN')
        }
        await new Promise((resolve) => setTimeout(resolve, 200))
        assert.equal(hits, 0)
      } finally {
        listener.close()
      }
    })

    test('kid injection (path, SQL, command) is just an unknown kid', async () => {
      const { privateKey } = await generateKeyPair('EdDSA')
      const marker = `/tmp/portcullis-kid-${process.pid}`
      for (const evil of ['../../../../../../dev/null', '/etc/passwd', "' OR '1'='1", "x'; DROP TABLE signing_keys; --", `$(touch ${marker})`, `\`touch ${marker}\``, '|| touch ' + marker, 'a'.repeat(5000)]) {
        const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt', kid: evil }).sign(privateKey)
        assert.equal(await codeFor(forged), 'INVALID_TOKEN', evil.slice(0, 40))
        const hmac = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: evil }).sign(new Uint8Array(32))
        assert.equal(await codeFor(hmac), 'INVALID_TOKEN')
      }
      assert.equal(existsSync(marker), false)
      assert.equal((await t.app.services.db.kysely.selectFrom('signing_keys').select('kid').execute()).length >= 1, true)
      assert.equal(await codeFor(genuine), 'OK')
    })

    test('expired by one second (past exp plus the 30 s skew) is TOKEN_EXPIRED; one second before is fine', async () => {
      const offset = (claims.exp! - Math.floor(t.clock.now() / 1000)) + 30
      t.clock.advance(offset - 1)
      try {
        assert.equal(await codeFor(genuine), 'OK')
        t.clock.advance(2)
        assert.equal(await codeFor(genuine), 'TOKEN_EXPIRED')
      } finally {
        t.clock.advance(-(offset + 1))
      }
    })

    test('a refresh token as bearer and an access token as refresh token are refused', async () => {
      const user = await registerVerifyLogin(t)
      assert.equal(await codeFor(user.refresh_token), 'INVALID_TOKEN')
      const refresh = await t.post('/auth/refresh', { refresh_token: user.access_token })
      assert.equal(refresh.json().error.code, 'INVALID_REFRESH_TOKEN')
    })

    test('nbf within the 30 s skew is accepted', async () => {
      assert.equal(await codeFor(await signWithServiceKey({ ...claims, nbf: Math.floor(t.clock.now() / 1000) + 29 })), 'OK')
    })
  })
}

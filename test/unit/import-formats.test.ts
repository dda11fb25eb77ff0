import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, test } from 'node:test'
import bcrypt from 'bcryptjs'
import { argon2id } from '@noble/hashes/argon2.js'
import { scrypt } from '@noble/hashes/scrypt.js'
import { createArgon2Hasher, type PasswordHasher } from '../../src/auth/passwords.ts'
import { acceptImportedHash, withImportedFormats } from '../../src/imports/formats.ts'
import { LegacyVerifier } from '../../src/imports/legacy.ts'
import { AppError } from '../../src/errors.ts'

/**
 * The imported hash formats' rules (src/imports/formats.ts): what is refused and why, the limits that
 * keep an imported hash from making a login a denial of service, and the argon2id a wrong password
 * for an imported hash spends. The formats' verification against independent implementations, end to
 * end: test/integration/import.test.ts.
 */

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64').replace(/=+$/, '')
const salt = b64(randomBytes(16))
const key = b64(randomBytes(32))
const refusal = (input: unknown) => {
  const result = acceptImportedHash(input, null)
  return 'refused' in result ? result.refused : 'accepted'
}

describe('imported hash formats', () => {
  test('the limits: bcrypt cost 4 to 14, argon2 up to 128 MiB, t 10, p 16, scrypt up to N 2^17 and 128 MiB, PBKDF2 1000 to 1,000,000 iterations', () => {
    const bcryptOf = (cost: string) => `$2b$${cost}$${'A'.repeat(53)}`
    const cases: [string, unknown, string][] = [
      ['bcrypt cost 4', bcryptOf('04'), 'accepted'],
      ['bcrypt cost 14', bcryptOf('14'), 'accepted'],
      ['bcrypt cost 15', bcryptOf('15'), 'hash_too_costly'],
      ['bcrypt cost 3', bcryptOf('03'), 'weak_hash'],
      ['bcrypt $2x$ (the broken variant)', `$2x$10$${'A'.repeat(53)}`, 'invalid'],
      ['bcrypt cut short', `$2b$10$${'A'.repeat(40)}`, 'invalid'],
      ['argon2id 128 MiB', `$argon2id$v=19$m=131072,t=3,p=4$${salt}$${key}`, 'accepted'],
      ['argon2id 256 MiB', `$argon2id$v=19$m=262144,t=3,p=4$${salt}$${key}`, 'hash_too_costly'],
      ['argon2id t=11', `$argon2id$v=19$m=65536,t=11,p=1$${salt}$${key}`, 'hash_too_costly'],
      ['argon2i without a version', `$argon2i$m=4096,t=3,p=1$${salt}$${key}`, 'accepted'],
      ['argon2d', `$argon2d$v=19$m=4096,t=3,p=1$${salt}$${key}`, 'weak_hash'],
      ['scrypt ln=17 r=8', `$scrypt$ln=17,r=8,p=1$${salt}$${key}`, 'accepted'],
      ['scrypt ln=18', `$scrypt$ln=18,r=8,p=1$${salt}$${key}`, 'hash_too_costly'],
      ['scrypt ln=17 r=16 (256 MiB)', `$scrypt$ln=17,r=16,p=1$${salt}$${key}`, 'hash_too_costly'],
      ['scrypt written with N itself (Kratos)', `$scrypt$ln=32768,r=8,p=1$${salt}$${key}`, 'accepted'],
      ['scrypt ln=8', `$scrypt$ln=8,r=8,p=1$${salt}$${key}`, 'weak_hash'],
      ['Django PBKDF2 1,000,000', `pbkdf2_sha256$1000000$somesaltvalue$${key}`, 'accepted'],
      ['Django PBKDF2 1,000,001', `pbkdf2_sha256$1000001$somesaltvalue$${key}`, 'hash_too_costly'],
      ['Django PBKDF2 999', `pbkdf2_sha256$999$somesaltvalue$${key}`, 'weak_hash'],
      ['Django PBKDF2-SHA1', `pbkdf2_sha1$260000$somesaltvalue$${key}`, 'invalid'],
      ['PHC PBKDF2 passlib style', `$pbkdf2-sha256$29000$${salt.replace(/\+/g, '.')}$${key.replace(/\+/g, '.')}`, 'accepted'],
      ['PHC PBKDF2 with l not matching', `$pbkdf2-sha512$i=10000,l=64$${salt}$${key}`, 'invalid'],
      ['unsalted MD5', '5f4dcc3b5aa765d61d8327deb882cf99', 'weak_hash'],
      ['unsalted SHA-1', '5baa61e4c9b93f3f0682250b6cf8331b7ee68fd8', 'weak_hash'],
      ['SHA-256 hex', 'a'.repeat(64), 'weak_hash'],
      ['SHA-crypt', '$6$rounds=5000$salt$hash', 'weak_hash'],
      ['salted SHA-1 (Django)', 'sha1$salt$abcdef', 'weak_hash'],
      ['plain text', 'hunter2', 'weak_hash'],
      ['an empty string', '', 'invalid'],
      ['a number', 42, 'invalid'],
      ['Firebase without the project parameters', { algorithm: 'firebase-scrypt', hash: key, salt }, 'invalid'],
    ]
    for (const [name, input, expected] of cases) assert.equal(refusal(input), expected, name)
  })

  test('a refusal never quotes the hash', () => {
    const hash = '5f4dcc3b5aa765d61d8327deb882cf99'
    const result = acceptImportedHash(hash, null)
    assert.ok('refused' in result && !result.message.includes(hash))
  })

  /** The service's argon2id at test cost, counting the dummy checks it is asked for. */
  function counted(): { hasher: PasswordHasher; dummies: () => number } {
    const inner = createArgon2Hasher({ memoryCost: 256, timeCost: 1, parallelism: 1 })
    let dummies = 0
    return {
      hasher: withImportedFormats({ ...inner, verifyDummy: async (password) => (dummies++, inner.verifyDummy(password)) }, null),
      dummies: () => dummies,
    }
  }

  test('a wrong password for an imported hash also spends the argon2id check an unknown address spends; a right one does not, and asks for the rehash', async () => {
    const { hasher, dummies } = counted()
    const hash = bcrypt.hashSync('correct horse battery', 4)
    assert.equal(await hasher.verify(hash, 'wrong horse battery'), false)
    assert.equal(dummies(), 1)
    assert.equal(await hasher.verify(hash, 'correct horse battery'), true)
    assert.equal(dummies(), 1)
    assert.equal(hasher.needsRehash(hash), true)
    const own = await hasher.hash('correct horse battery')
    assert.equal(hasher.needsRehash(own), false, 'today\'s argon2id is not rehashed')
    assert.equal(await hasher.verify(own, 'correct horse battery'), true)
  })

  test('while an imported hash is left, every other failing check spends one check of it: an unknown address, a wrong password for a native account, an account without a password; an imported one spends argon2id instead; a right native password spends nothing more', async () => {
    const inner = createArgon2Hasher({ memoryCost: 256, timeCost: 1, parallelism: 1 })
    const imported = bcrypt.hashSync('someone else entirely', 4)
    let spent = 0
    let dummies = 0
    const hasher = withImportedFormats({ ...inner, verifyDummy: async (password) => (dummies++, inner.verifyDummy(password)) }, null, () => (spent++, imported))
    const own = await hasher.hash('my own password here')
    assert.equal(await hasher.verifyDummy('an unknown address'), false)
    assert.equal(spent, 1)
    assert.equal(await hasher.verify(own, 'my own password here'), true)
    assert.equal(spent, 1, 'a right password for a native account spends nothing more')
    assert.equal(await hasher.verify(own, 'not my password'), false)
    assert.equal(spent, 2)
    assert.equal(await hasher.verify('!', 'no password at all'), false)
    assert.equal(spent, 3)
    assert.equal(await hasher.verify(imported, 'a wrong guess here'), false)
    // The dummies counted: the unknown address's, then the imported account's (the one without a password spends its own inside inner.verify).
    assert.deepEqual([spent, dummies], [3, 2], 'the imported account spends argon2id, not the sample')
    const none = withImportedFormats(inner, null, () => null)
    assert.equal(await none.verify(own, 'my own password here'), true, 'with no imported hash left, only argon2id')
  })

  test('an argon2id hash at other parameters and a scrypt hash are checked with the parameters they carry', async () => {
    const { hasher } = counted()
    const s = randomBytes(16)
    const argon = `$argon2id$v=19$m=512,t=2,p=2$${b64(s)}$${b64(argon2id('pass phrase one', s, { m: 512, t: 2, p: 2, dkLen: 24 }))}`
    assert.equal(await hasher.verify(argon, 'pass phrase one'), true)
    assert.equal(hasher.needsRehash(argon), true)
    const sc = `$scrypt$ln=10,r=4,p=2$${b64(s)}$${b64(scrypt('pass phrase two', s, { N: 1024, r: 4, p: 2, dkLen: 20 }))}`
    assert.equal(await hasher.verify(sc, 'pass phrase two'), true)
    assert.equal(await hasher.verify(sc, 'pass phrase three'), false)
  })

  test('a stored hash above the limits (written by other means than an import) is never checked: it does not match', async () => {
    const { hasher } = counted()
    assert.equal(await hasher.verify(`$scrypt$ln=20,r=8,p=1$${salt}$${key}`, 'anything at all'), false)
  })
})

describe('lazy migration\'s connection', () => {
  test('in production an old system whose name resolves to a special-use address is never connected to: LEGACY_UNAVAILABLE', async () => {
    let reached = 0
    const server = createServer((_request, response) => {
      reached++
      response.writeHead(200).end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as AddressInfo).port
    const logger = { info() {}, warn() {}, error() {} } as never
    const resolveToLoopback = async () => [{ address: '127.0.0.1', family: 4 }]
    try {
      const guarded = new LegacyVerifier({ url: `http://legacy.example.com:${port}/verify`, secret: 'x'.repeat(20) }, logger, { production: true, resolve: resolveToLoopback })
      await assert.rejects(guarded.verify('a@example.com', 'password1'), (error: AppError) => error.code === 'LEGACY_UNAVAILABLE')
      assert.equal(reached, 0)
      guarded.close()
      // Outside production the same name reaches it (development and tests run the old system on loopback).
      const open = new LegacyVerifier({ url: `http://legacy.example.com:${port}/verify`, secret: 'x'.repeat(20) }, logger, { production: false, resolve: resolveToLoopback })
      assert.equal(await open.verify('a@example.com', 'password1'), true)
      assert.equal(reached, 1)
      open.close()
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })
})

describe('the import\'s progress line', () => {
  test('shows the lines, the rate and, with the file\'s size, the share read and the time left', async () => {
    const { progressLine } = await import('../../src/imports/run.ts')
    const totals = { lines: 250_000, imported: 249_000, present: 500, refused: 500 }
    assert.equal(progressLine(totals, 50_000, null), '250,000 lines, 249,000 imported, 5,000/s')
    assert.equal(progressLine(totals, 50_000, { bytes: 25, size: 100 }), '[######..................] 25% 250,000 lines, 249,000 imported, 5,000/s, about 2m30s left')
  })
})

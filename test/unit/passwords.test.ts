import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { emailProblem, normaliseEmail, normaliseFullName } from '../../src/auth/input.ts'
import { boundedHasher, createArgon2Hasher, OWASP_ARGON2_PARAMS, passwordProblems, type PasswordHasher } from '../../src/auth/passwords.ts'
import { AppError } from '../../src/errors.ts'

describe('argon2id hasher', () => {
  test('the default parameters are OWASP\'s m=19456 KiB, t=2, p=1 and appear in the PHC string', async () => {
    assert.deepEqual(OWASP_ARGON2_PARAMS, { memoryCost: 19456, timeCost: 2, parallelism: 1 })
    const hasher = createArgon2Hasher()
    const hash = await hasher.hash('a long enough password')
    assert.match(hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$/)
    assert.equal(await hasher.verify(hash, 'a long enough password'), true)
    assert.equal(await hasher.verify(hash, 'a long enough passworD'), false)
    assert.equal(hasher.needsRehash(hash), false)
  })

  test('other parameters, another algorithm or garbage need a rehash and never throw', async () => {
    const weak = createArgon2Hasher({ memoryCost: 256, timeCost: 1, parallelism: 1 })
    const strong = createArgon2Hasher()
    assert.equal(strong.needsRehash(await weak.hash('password one')), true)
    assert.equal(strong.needsRehash('$2b$10$abcdefghijklmnopqrstuv'), true)
    assert.equal(await strong.verify('not a hash', 'anything'), false)
  })

  test('the dummy verification always fails', async () => {
    assert.equal(await createArgon2Hasher({ memoryCost: 256, timeCost: 1, parallelism: 1 }).verifyDummy('anything at all'), false)
  })
})

/** A hasher whose verifications finish when the test says so, in the order they started. */
function heldHasher() {
  const held: (() => void)[] = []
  const inner: PasswordHasher = {
    hash: async () => 'hash',
    verify: () => new Promise<boolean>((resolve) => held.push(() => resolve(true))),
    verifyDummy: async () => false,
    needsRehash: () => false,
  }
  return { inner, started: () => held.length, finishOne: async () => { held.shift()!(); await new Promise((resolve) => setImmediate(resolve)) } }
}

/** One hashing slot over a held hasher, on a clock the test sets. */
function oneSlotOnClock(maxWaitMs: number) {
  const clock = { now: 0 }
  const held = heldHasher()
  const hasher = boundedHasher(held.inner, { concurrency: 1, queue: 10, maxWaitMs }, () => clock.now)
  return { clock, held, hasher }
}

const refusedForLoad = (error: unknown) => error instanceof AppError && error.code === 'SERVICE_UNAVAILABLE' && error.headers['retry-after'] === '1'

describe('bounded hashing', () => {
  test('a hash beyond the running and waiting ones is refused at once with 503 and Retry-After', async () => {
    const held = heldHasher()
    const hasher = boundedHasher(held.inner, { concurrency: 1, queue: 1, maxWaitMs: 5000 })
    const first = hasher.verify('h', 'p')
    const second = hasher.verify('h', 'p')
    assert.equal(hasher.saturated(), true)
    await assert.rejects(hasher.verify('h', 'p'), refusedForLoad)
    assert.equal(held.started(), 1)
    await held.finishOne()
    assert.equal(held.started(), 1, 'the waiting hash took the freed slot')
    await held.finishOne()
    assert.deepEqual(await Promise.all([first, second]), [true, true])
    assert.equal(hasher.saturated(), false)
  })

  test('a hash whose turn comes after the wait bound is refused; the next one within it runs', async () => {
    const { clock, held, hasher } = oneSlotOnClock(5000)
    const running = hasher.verify('h', 'p')
    const stale = hasher.verify('h', 'p')
    clock.now = 3000
    const fresh = hasher.verify('h', 'p')
    clock.now = 5001
    const staleRefused = assert.rejects(stale, refusedForLoad)
    await held.finishOne()
    assert.equal(await running, true)
    await staleRefused
    assert.equal(hasher.waiting(), 0)
    assert.equal(held.started(), 1, 'the hash within the bound started')
    await held.finishOne()
    assert.equal(await fresh, true)
  })

  test('when every waiter is past the bound the slot is given back', async () => {
    const { clock, held, hasher } = oneSlotOnClock(100)
    const running = hasher.verify('h', 'p')
    const stale = hasher.verify('h', 'p')
    clock.now = 1000
    const staleRefused = assert.rejects(stale, refusedForLoad)
    await held.finishOne()
    await running
    await staleRefused
    const next = hasher.verify('h', 'p')
    assert.equal(held.started(), 1, 'a new hash starts at once')
    await held.finishOne()
    assert.equal(await next, true)
  })
})

describe('password policy', () => {
  test('counts Unicode code points, not UTF-16 units', () => {
    assert.deepEqual(passwordProblems('😀'.repeat(8), 'a@example.com'), [])
    assert.equal(passwordProblems('😀'.repeat(7), 'a@example.com').length, 1)
    assert.deepEqual(passwordProblems('😀'.repeat(128), 'a@example.com'), [])
    assert.equal(passwordProblems('😀'.repeat(129), 'a@example.com').length, 1)
  })

  test('refuses common passwords from the shipped list, in any case, and says why', () => {
    for (const common of ['password', 'baseball', 'Baseball', 'QWERTYUIOP', '1qaz2wsx', 'iloveyou']) {
      const problems = passwordProblems(common, 'a@example.com')
      assert.equal(problems.length, 1, common)
      assert.match(problems[0]!.message, /common/)
    }
    assert.deepEqual(passwordProblems('correct horse battery staple', 'a@example.com'), [])
  })

  test('the shipped blocklist holds at least 10,000 passwords', async () => {
    const { readFileSync } = await import('node:fs')
    const lines = readFileSync(new URL('../../assets/common-passwords.txt', import.meta.url), 'utf8').split('\n').filter(Boolean)
    assert.ok(lines.length >= 10_000, String(lines.length))
  })

  test('refuses the e-mail address itself in any case', () => {
    assert.match(passwordProblems('Ann@Example.com', 'ann@example.com')[0]!.message, /e-mail/)
  })
})

describe('input normalisation', () => {
  test('an address is trimmed, NFC-normalised and lower-cased as a whole', () => {
    assert.equal(normaliseEmail('  Ann.Lee@Example.COM '), 'ann.lee@example.com')
    assert.equal(normaliseEmail('Jose\u0301@example.com'), 'jos\u00e9@example.com')
  })

  const addresses: [string, boolean][] = [
    ['ann@example.com', true],
    ['ann+tag@mail.example.co.uk', true],
    ['jos\u00e9@b\u00fccher.example', true],
    ['ann@example', false],
    ['ann@@example.com', false],
    ['@example.com', false],
    ['ann@.example.com', false],
    ['ann@example..com', false],
    ['ann@-example.com', false],
    ['"ann"@example.com', false],
    ['Ann <ann@example.com>', false],
    ['ann@exa mple.com', false],
    [`${'a'.repeat(65)}@example.com`, false],
  ]
  for (const [address, valid] of addresses) {
    test(`${JSON.stringify(address)} is ${valid ? 'accepted' : 'refused'}`, () => {
      assert.equal(emailProblem(normaliseEmail(address)) === null, valid)
    })
  }

  test('a full name is trimmed and refused when blank, too long or holding control characters', () => {
    assert.deepEqual(normaliseFullName('  Ann Lee '), { value: 'Ann Lee', problem: null })
    assert.ok(normaliseFullName(' \t ').problem)
    assert.ok(normaliseFullName('x'.repeat(101)).problem)
    assert.ok(normaliseFullName('Ann\nLee').problem)
    assert.ok(normaliseFullName('Ann\u2028Lee').problem)
  })
})

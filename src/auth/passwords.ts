import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { hash, parseOptions, verify, type Algorithm } from '@node-rs/argon2'
import { AppError, type ErrorDetail } from '../errors.ts'

export const ARGON2ID = 2 as Algorithm

export interface Argon2Params {
  memoryCost: number
  timeCost: number
  parallelism: number
}

/** OWASP Password Storage Cheat Sheet, argon2id option 2: 19 MiB, 2 passes, 1 lane. */
export const OWASP_ARGON2_PARAMS: Argon2Params = { memoryCost: 19456, timeCost: 2, parallelism: 1 }

/**
 * The stored "hash" of an account that has no password (made by an identity provider's sign-in):
 * no PHC string, so no password ever matches it. `forgot-password` can give the account one.
 */
export const NO_PASSWORD = '!'

export interface PasswordHasher {
  hash(password: string): Promise<string>
  verify(passwordHash: string, password: string): Promise<boolean>
  /**
   * Spends the time of one verification and always answers false. Used for unknown addresses so a
   * login for a missing account costs what a wrong password for a real one costs.
   */
  verifyDummy(password: string): Promise<false>
  /** True when the hash was made with other parameters than today's, so login should upgrade it. */
  needsRehash(passwordHash: string): boolean
}

export function createArgon2Hasher(params: Argon2Params = OWASP_ARGON2_PARAMS): PasswordHasher {
  const options = { ...params, algorithm: ARGON2ID }
  let dummy: Promise<string> | undefined
  const dummyHash = () => (dummy ??= hash(randomBytes(32).toString('base64url'), options))
  const verifyDummy = async (password: string): Promise<false> => {
    await verify(await dummyHash(), password).catch(() => false)
    return false
  }

  return {
    hash: (password) => hash(password, options),
    async verify(passwordHash, password) {
      // An account without a password costs what a wrong password costs: no hint that it has none.
      if (passwordHash === NO_PASSWORD) return verifyDummy(password)
      try {
        return await verify(passwordHash, password)
      } catch {
        // A stored value that is not a PHC string can never match; it must not become a 500.
        return false
      }
    },
    verifyDummy,
    needsRehash(passwordHash) {
      try {
        const current = parseOptions(passwordHash)
        return (
          current.algorithm !== ARGON2ID ||
          current.memoryCost !== params.memoryCost ||
          current.timeCost !== params.timeCost ||
          current.parallelism !== params.parallelism
        )
      } catch {
        return true
      }
    },
  }
}

/** This package's folder, found by its own name, so it holds from src/, dist/ and the bundle alike. */
function packageRoot(): string {
  return path.dirname(createRequire(import.meta.url).resolve('portcullis/package.json'))
}

let blocklist: Set<string> | undefined

/** The shipped list of common passwords (assets/README.md says where it comes from), loaded once. */
export function loadCommonPasswords(): Set<string> {
  blocklist ??= new Set(
    readFileSync(path.join(packageRoot(), 'assets', 'common-passwords.txt'), 'utf8')
      .split('\n')
      .filter(Boolean),
  )
  return blocklist
}

export function isCommonPassword(password: string): boolean {
  return loadCommonPasswords().has(password.toLowerCase())
}

export const PASSWORD_MIN = 8
export const PASSWORD_MAX = 128

/**
 * NIST SP 800-63B: length, no composition rules, not a known common password, never the address.
 * Length is counted in Unicode code points, not UTF-16 units.
 */
export function passwordProblems(password: string, normalisedEmail: string, field = 'password'): ErrorDetail[] {
  const length = [...password].length
  if (length < PASSWORD_MIN) return [{ field, message: `must be at least ${PASSWORD_MIN} characters` }]
  if (length > PASSWORD_MAX) return [{ field, message: `must be at most ${PASSWORD_MAX} characters` }]
  if (password.trim().normalize('NFC').toLowerCase() === normalisedEmail) {
    return [{ field, message: 'must not be the e-mail address' }]
  }
  if (isCommonPassword(password)) {
    return [{ field, message: 'is one of the most common passwords (seen in password leaks); choose another' }]
  }
  return []
}

/**
 * The refusal when password hashing is saturated: 503 with Retry-After, and the connection closed,
 * so a client that retries at once (a flood does) must open a new connection first instead of
 * sending its next attempt down this one in the same breath. In the 500-connection login flood of
 * bench/run.ts this cut the refusals the server had to write by about 95%.
 */
export function hashingSaturated(): AppError {
  return new AppError('SERVICE_UNAVAILABLE', { headers: { 'retry-after': '1', connection: 'close' } })
}

export interface HashingLimits {
  /** Hashes running at once. */
  concurrency: number
  /** Hashes waiting for a slot; a request beyond them is refused at once. */
  queue: number
  /** The longest a hash waits for a slot; one that has waited longer is refused when its turn comes. */
  maxWaitMs: number
}

/**
 * Caps how many hashes run at once, how many wait and for how long. Argon2 runs on libuv's thread
 * pool, which token verification (WebCrypto), token signing and file I/O share; leaving threads
 * free keeps bearer-token requests and refreshes fast during a login flood. A request beyond the
 * queue is refused at once with 503 and Retry-After, and so is one whose turn comes after
 * `maxWaitMs`, so neither memory nor a client's wait grows without bound. The queue is deep enough
 * to absorb a burst (a refusal costs the server a new connection from a client that retries, a
 * wait costs it nothing); the wait bound keeps a login from hanging.
 */
export interface BoundedHasher extends PasswordHasher {
  waiting(): number
  /** True when a new hash would be refused: lets a route say 503 before reading the body. */
  saturated(): boolean
}

interface Waiter {
  since: number
  start(): void
  refuse(error: AppError): void
}

export function boundedHasher(inner: PasswordHasher, limits: HashingLimits, now: () => number = () => performance.now()): BoundedHasher {
  let running = 0
  const waiting: Waiter[] = []

  /** Hands a freed slot to the oldest waiter still within the bound, refusing the ones past it. */
  function handOver(): void {
    const oldest = now() - limits.maxWaitMs
    for (let next = waiting.shift(); next; next = waiting.shift()) {
      if (next.since >= oldest) return next.start()
      next.refuse(hashingSaturated())
    }
    running--
  }

  async function slot<T>(work: () => Promise<T>): Promise<T> {
    if (running >= limits.concurrency) {
      if (waiting.length >= limits.queue) throw hashingSaturated()
      await new Promise<void>((start, refuse) => waiting.push({ since: now(), start, refuse }))
    } else {
      running++
    }
    try {
      return await work()
    } finally {
      handOver()
    }
  }

  return {
    hash: (password) => slot(() => inner.hash(password)),
    verify: (passwordHash, password) => slot(() => inner.verify(passwordHash, password)),
    verifyDummy: (password) => slot(() => inner.verifyDummy(password)),
    needsRehash: (passwordHash) => inner.needsRehash(passwordHash),
    waiting: () => waiting.length,
    saturated: () => running >= limits.concurrency && waiting.length >= limits.queue,
  }
}

import { createCipheriv, pbkdf2, randomBytes, scrypt, timingSafeEqual, type BinaryLike, type ScryptOptions } from 'node:crypto'
import { promisify } from 'node:util'
import { verify as bcryptVerify } from '@node-rs/bcrypt'
import { verify as argon2Verify } from '@node-rs/argon2'
import type { PasswordHasher } from '../auth/passwords.ts'

/**
 * The password hashes other systems made, as Portcullis keeps them until each account's first
 * sign-in replaces them with its own argon2id (docs/migrating.md). Everything about them lives
 * here: which ones an import accepts (and why it refuses the rest), the form kept in
 * `users.password_hash`, and the one verification every password check reaches through
 * `withImportedFormats`. Each verification reads its parameters from the hash itself, so the limits
 * below are what keeps an imported hash from making a login a denial of service: they are checked
 * at import, and again at every verification (a row written by other means is judged the same).
 */

/** Why an imported hash is refused: a malformed one, a weak one (sign in by code or reset instead), one too costly to check. */
export type HashRefusal = 'invalid' | 'weak_hash' | 'hash_too_costly'

export interface Refused {
  refused: HashRefusal
  /** For the operator: what is wrong, never the hash or any part of it. */
  message: string
}

/** Firebase's project-wide hash parameters, as its console shows them (FIREBASE_* in the README). */
export interface FirebaseParams {
  signerKey: Buffer
  saltSeparator: Buffer
  rounds: number
  memCost: number
}

/** The marker of an account whose first sign-in asks the old system (LEGACY_VERIFY_URL); no password matches it here. */
export const LEGACY_PASSWORD = '!legacy'

/**
 * The limits. About a second of one core and 128 MiB at most for one check: with HASH_CONCURRENCY
 * checks at once that is what a login flood can cost. Below the floors a hash is weak.
 */
export const HASH_LIMITS = {
  bcrypt: { minCost: 4, maxCost: 14 },
  argon2: { maxMemoryKib: 131_072, maxTime: 10, maxParallelism: 16 },
  scrypt: { minN: 2 ** 10, maxN: 2 ** 17, maxMemoryBytes: 128 * 1024 * 1024, maxP: 16 },
  pbkdf2: { minIterations: 1000, maxIterations: 1_000_000 },
  firebase: { maxRounds: 8, maxMemCost: 14 },
} as const

/** Shortest salt and derived key accepted: below them a hash is not worth keeping. */
const MIN_SALT_BYTES = 8
const MIN_KEY_BYTES = 16

const scryptAsync = promisify<BinaryLike, BinaryLike, number, ScryptOptions, Buffer>(scrypt)
const pbkdf2Async = promisify(pbkdf2)

/** Standard, URL-safe or passlib's adapted base64 ('.' for '+'), padded or not. */
function base64(text: string): Buffer | null {
  if (!/^[A-Za-z0-9+/._-]*={0,2}$/.test(text) || text.length === 0) return null
  return Buffer.from(text.replace(/\./g, '+').replace(/-/g, '+').replace(/_/g, '/'), 'base64')
}

function refuse(refused: HashRefusal, message: string): Refused {
  return { refused, message }
}

/** A parsed imported hash: how to check a password against it. */
interface Parsed {
  check(password: string, firebase: FirebaseParams | null): Promise<boolean>
}

const BCRYPT = /^\$(2[aby])\$(\d{2})\$[./A-Za-z0-9]{53}$/

function parseBcrypt(stored: string): Parsed | Refused {
  const match = BCRYPT.exec(stored)
  if (!match) return refuse('invalid', 'not a well-formed bcrypt hash ($2a$, $2b$ or $2y$, a two-digit cost, 53 characters of salt and hash)')
  const cost = Number(match[2])
  if (cost < HASH_LIMITS.bcrypt.minCost) return refuse('weak_hash', `bcrypt cost ${cost} is below ${HASH_LIMITS.bcrypt.minCost}`)
  if (cost > HASH_LIMITS.bcrypt.maxCost) return refuse('hash_too_costly', `bcrypt cost ${cost} is above ${HASH_LIMITS.bcrypt.maxCost}`)
  // The Rust binding reads $2y$ as the same algorithm as $2b$ (PHP's name for it).
  return { check: (password) => bcryptVerify(password, stored).catch(() => false) }
}

/** `a=1,b=2` into numbers; null when a part is not `name=digits`. */
function phcParams(text: string): Map<string, number> | null {
  const params = new Map<string, number>()
  for (const part of text.split(',')) {
    const match = /^([a-z]+)=(\d{1,12})$/.exec(part)
    if (!match) return null
    params.set(match[1]!, Number(match[2]))
  }
  return params
}

function parseArgon2(stored: string): Parsed | Refused {
  const parts = stored.split('$')
  // ['', 'argon2id', 'v=19', 'm=..,t=..,p=..', salt, hash]; the version may be left out (v=16).
  const [, variant] = parts
  if (variant === 'argon2d') return refuse('weak_hash', 'argon2d is open to side-channel attacks on a server; only argon2id and argon2i are accepted')
  if (variant !== 'argon2id' && variant !== 'argon2i') return refuse('invalid', 'not an argon2id or argon2i PHC string')
  const withVersion = parts.length === 6
  if (parts.length !== 5 && !withVersion) return refuse('invalid', 'not a well-formed argon2 PHC string')
  if (withVersion && parts[2] !== 'v=19' && parts[2] !== 'v=16') return refuse('invalid', 'unknown argon2 version')
  const params = phcParams(parts[withVersion ? 3 : 2]!)
  const [salt, hash] = parts.slice(withVersion ? 4 : 3).map(base64)
  const m = params?.get('m')
  const t = params?.get('t')
  const p = params?.get('p')
  if (!params || m === undefined || t === undefined || p === undefined || !salt || !hash) return refuse('invalid', 'an argon2 PHC string needs m, t and p, a salt and a hash')
  if (salt.length < MIN_SALT_BYTES || hash.length < MIN_KEY_BYTES) return refuse('weak_hash', 'the argon2 salt or hash is too short')
  const limits = HASH_LIMITS.argon2
  if (m > limits.maxMemoryKib || t > limits.maxTime || p > limits.maxParallelism) {
    return refuse('hash_too_costly', `argon2 above m=${limits.maxMemoryKib}, t=${limits.maxTime} or p=${limits.maxParallelism}`)
  }
  if (m < 8 * p || t < 1 || p < 1) return refuse('invalid', 'argon2 parameters out of range')
  return { check: (password) => argon2Verify(stored, password).catch(() => false) }
}

/**
 * scrypt's PHC string, `$scrypt$ln=17,r=8,p=1$salt$hash`, as passlib writes it (ln the base-2
 * logarithm of N). Ory Kratos writes N itself under the same name (`ln=32768`): a value above 64 can
 * only be that, and is read so when it is a power of two.
 */
function parseScrypt(stored: string): Parsed | Refused {
  const parts = stored.split('$')
  if (parts.length !== 5) return refuse('invalid', 'not a well-formed scrypt PHC string ($scrypt$ln=..,r=..,p=..$salt$hash)')
  const params = phcParams(parts[2]!)
  const saltText = parts[3]!
  const salt = base64(saltText)
  const hash = base64(parts[4]!)
  const ln = params?.get('ln')
  const r = params?.get('r')
  const p = params?.get('p')
  if (!params || ln === undefined || r === undefined || p === undefined || !salt || !hash || r < 1 || p < 1) return refuse('invalid', 'a scrypt PHC string needs ln, r and p, a salt and a hash')
  const N = ln <= 64 ? 2 ** ln : ln
  if (!Number.isSafeInteger(N) || (N & (N - 1)) !== 0) return refuse('invalid', 'scrypt N must be a power of two')
  if (N < HASH_LIMITS.scrypt.minN || salt.length < MIN_SALT_BYTES || hash.length < MIN_KEY_BYTES) return refuse('weak_hash', `scrypt below N=2^10, or its salt or hash too short`)
  const memory = 128 * N * r
  if (N > HASH_LIMITS.scrypt.maxN || memory > HASH_LIMITS.scrypt.maxMemoryBytes || p > HASH_LIMITS.scrypt.maxP) {
    return refuse('hash_too_costly', `scrypt above N=2^17, 128 MiB (128 x N x r) or p=${HASH_LIMITS.scrypt.maxP}`)
  }
  return {
    async check(password) {
      const derived = await scryptAsync(password, salt, hash.length, { N, r, p, maxmem: memory + 1024 * 1024 })
      return timingSafeEqual(derived, hash)
    },
  }
}

/**
 * PBKDF2, in Django's form (`pbkdf2_sha256$iterations$salt$hash`, the salt as text) and in the
 * PHC forms (`$pbkdf2-sha256$i=N,l=32$salt$hash`, or passlib's `$pbkdf2-sha256$N$salt$hash` in
 * adapted base64), with SHA-256 or SHA-512.
 */
function parsePbkdf2(stored: string): Parsed | Refused {
  let digest: 'sha256' | 'sha512'
  let iterations: number
  let salt: Buffer | null
  let hash: Buffer | null
  if (stored.startsWith('pbkdf2_')) {
    const parts = stored.split('$')
    if (parts.length !== 4 || parts[0] !== 'pbkdf2_sha256' || !/^\d{1,9}$/.test(parts[1]!)) return refuse('invalid', "not a well-formed Django PBKDF2 hash (pbkdf2_sha256$iterations$salt$hash)")
    digest = 'sha256'
    iterations = Number(parts[1])
    salt = parts[2] ? Buffer.from(parts[2], 'utf8') : null
    hash = base64(parts[3]!)
  } else {
    const parts = stored.split('$')
    const algorithm = parts[1]
    if (parts.length !== 5 || (algorithm !== 'pbkdf2-sha256' && algorithm !== 'pbkdf2-sha512')) return refuse('invalid', 'not a well-formed PBKDF2 PHC string ($pbkdf2-sha256$ or $pbkdf2-sha512$)')
    digest = algorithm === 'pbkdf2-sha256' ? 'sha256' : 'sha512'
    const params = /^\d{1,9}$/.test(parts[2]!) ? new Map([['i', Number(parts[2])]]) : phcParams(parts[2]!)
    iterations = params?.get('i') ?? NaN
    salt = base64(parts[3]!)
    hash = base64(parts[4]!)
    const length = params?.get('l')
    if (length !== undefined && hash && length !== hash.length) return refuse('invalid', 'the PBKDF2 key length does not match its hash')
  }
  if (!Number.isSafeInteger(iterations) || !salt || !hash) return refuse('invalid', 'a PBKDF2 hash needs its iterations, a salt and a hash')
  if (iterations < HASH_LIMITS.pbkdf2.minIterations || salt.length < MIN_SALT_BYTES || hash.length < MIN_KEY_BYTES) {
    return refuse('weak_hash', `PBKDF2 below ${HASH_LIMITS.pbkdf2.minIterations} iterations, or its salt or hash too short`)
  }
  if (iterations > HASH_LIMITS.pbkdf2.maxIterations) return refuse('hash_too_costly', `PBKDF2 above ${HASH_LIMITS.pbkdf2.maxIterations} iterations`)
  return {
    async check(password) {
      return timingSafeEqual(await pbkdf2Async(password, salt!, iterations, hash!.length, digest), hash!)
    },
  }
}

/** The form Portcullis keeps Firebase's hashes in: `$firebase-scrypt$salt$hash`, both in standard base64. */
const FIREBASE_PREFIX = '$firebase-scrypt$'

/**
 * Firebase's modified scrypt: scrypt of the password with the user's salt and the project's salt
 * separator (N = 2^mem_cost, r = rounds, p = 1) keys AES-256-CTR (a zero IV), which encrypts the
 * project's signer key; the result is the stored hash.
 */
function parseFirebase(stored: string): Parsed | Refused {
  const parts = stored.slice(FIREBASE_PREFIX.length).split('$')
  const salt = parts.length === 2 ? base64(parts[0]!) : null
  const hash = parts.length === 2 ? base64(parts[1]!) : null
  if (!salt || !hash) return refuse('invalid', 'a Firebase hash needs its salt and hash in base64')
  return {
    async check(password, firebase) {
      // Without the project's parameters nothing can be checked (the import refuses such lines).
      if (!firebase) return false
      const N = 2 ** firebase.memCost
      const derived = await scryptAsync(password, Buffer.concat([salt, firebase.saltSeparator]), 64, { N, r: firebase.rounds, p: 1, maxmem: 128 * N * firebase.rounds + 1024 * 1024 })
      const cipher = createCipheriv('aes-256-ctr', derived.subarray(0, 32), Buffer.alloc(16))
      const expected = Buffer.concat([cipher.update(firebase.signerKey), cipher.final()])
      return expected.length === hash.length && timingSafeEqual(expected, hash)
    },
  }
}

/** Hex digests and the crypt(3) families this importer will not keep: the users sign in by code or reset. */
const WEAK = [
  { pattern: /^[0-9a-f]{32}$/i, name: 'an unsalted MD5 digest' },
  { pattern: /^[0-9a-f]{40}$/i, name: 'an unsalted SHA-1 digest' },
  { pattern: /^[0-9a-f]{64}$/i, name: 'an unsalted SHA-256 digest' },
  { pattern: /^[0-9a-f]{128}$/i, name: 'an unsalted SHA-512 digest' },
  { pattern: /^\$1\$/, name: 'MD5-crypt' },
  { pattern: /^\$[56]\$/, name: 'SHA-crypt' },
  { pattern: /^\{S?(SHA|MD5|SSHA)/i, name: 'an LDAP digest' },
  { pattern: /^(md5|sha1|sha256|unsalted_md5|unsalted_sha1)\$/i, name: 'a salted digest' },
]

function parseStored(stored: string): Parsed | Refused {
  if (stored.startsWith('$2')) return parseBcrypt(stored)
  if (stored.startsWith('$argon2')) return parseArgon2(stored)
  if (stored.startsWith('$scrypt$')) return parseScrypt(stored)
  if (stored.startsWith('$pbkdf2-') || stored.startsWith('pbkdf2_')) return parsePbkdf2(stored)
  if (stored.startsWith(FIREBASE_PREFIX)) return parseFirebase(stored)
  const weak = WEAK.find((w) => w.pattern.test(stored))
  return refuse('weak_hash', weak ? `${weak.name} is not a password hash this service keeps` : 'not a hash format this service accepts (bcrypt, argon2id/argon2i, scrypt, Firebase scrypt, PBKDF2)')
}

function isRefused(value: Parsed | Refused): value is Refused {
  return 'refused' in value
}

/**
 * An import line's `password_hash` (a string, or Firebase's `{algorithm, hash, salt}`): the form
 * kept in `users.password_hash`, or why it is refused.
 */
export function acceptImportedHash(input: unknown, firebase: FirebaseParams | null): { stored: string } | Refused {
  let stored: string
  if (typeof input === 'string') {
    stored = input.trim()
    if (stored.length === 0 || stored.length > 1024) return refuse('invalid', 'password_hash must be a hash of at most 1024 characters')
  } else if (input && typeof input === 'object' && (input as { algorithm?: unknown }).algorithm === 'firebase-scrypt') {
    const { hash, salt } = input as { hash?: unknown; salt?: unknown }
    if (typeof hash !== 'string' || typeof salt !== 'string' || !base64(hash) || !base64(salt)) return refuse('invalid', 'a Firebase hash needs hash and salt, both base64')
    if (!firebase) return refuse('invalid', 'a Firebase hash needs the project\'s FIREBASE_HASH_KEY, FIREBASE_SALT_SEPARATOR, FIREBASE_ROUNDS and FIREBASE_MEM_COST')
    stored = `${FIREBASE_PREFIX}${base64(salt)!.toString('base64')}$${base64(hash)!.toString('base64')}`
  } else {
    return refuse('invalid', 'password_hash must be a string, or an object with algorithm "firebase-scrypt"')
  }
  const parsed = parseStored(stored)
  return isRefused(parsed) ? parsed : { stored }
}

/** The name of an imported hash's format, for the audit trail (`password.rehashed`); null for this service's own. */
export function importedFormat(stored: string): 'bcrypt' | 'argon2' | 'scrypt' | 'pbkdf2' | 'firebase-scrypt' | 'legacy' | null {
  if (stored === LEGACY_PASSWORD) return 'legacy'
  if (stored.startsWith('$2')) return 'bcrypt'
  if (stored.startsWith('$argon2')) return 'argon2'
  if (stored.startsWith('$scrypt$')) return 'scrypt'
  if (stored.startsWith('$pbkdf2-') || stored.startsWith('pbkdf2_')) return 'pbkdf2'
  if (stored.startsWith(FIREBASE_PREFIX)) return 'firebase-scrypt'
  return null
}

/** Checks Firebase's project parameters once, at start: the limits above hold for them too. */
export function firebaseParamsProblem(params: FirebaseParams): string | null {
  if (params.rounds < 1 || params.rounds > HASH_LIMITS.firebase.maxRounds) return `FIREBASE_ROUNDS must be 1 to ${HASH_LIMITS.firebase.maxRounds}`
  if (params.memCost < 1 || params.memCost > HASH_LIMITS.firebase.maxMemCost) return `FIREBASE_MEM_COST must be 1 to ${HASH_LIMITS.firebase.maxMemCost}`
  if (params.signerKey.length === 0) return 'FIREBASE_HASH_KEY must be base64'
  return null
}

/**
 * The one place a password is checked against a hash of any kind. Portcullis's own argon2id at
 * today's parameters, an account without a password and a legacy account (whose check is the old
 * system's, src/imports/legacy.ts) go to `inner`; anything else is checked here with the parameters
 * it carries, within the limits (an argon2 hash at other parameters too: an older release's or an
 * imported one). The work is the same whatever the address (docs/migrating.md, "Timing and
 * enumeration"): a wrong password for an imported hash also spends one argon2id check (a right one
 * is rehashed by the login, which spends that argon2id), and while `sample` gives an imported hash,
 * every other check that fails (a wrong password for today's argon2id, an account without a
 * password, an unknown address) also spends a check of it (src/imports/timing.ts). A right password
 * for today's argon2id spends nothing more: success tells that the account exists anyway.
 */
export function withImportedFormats(inner: PasswordHasher, firebase: FirebaseParams | null, sample: () => string | null = () => null): PasswordHasher {
  const own = (stored: string) => stored === '!' || stored === LEGACY_PASSWORD || !inner.needsRehash(stored)
  const check = async (stored: string, password: string) => {
    const parsed = parseStored(stored)
    return isRefused(parsed) ? false : parsed.check(password, firebase).catch(() => false)
  }
  /** One check of the sample against a password no one has: the imported accounts' cost. */
  const spendSample = async () => {
    const hash = sample()
    if (hash !== null) await check(hash, randomBytes(24).toString('base64url'))
  }
  return {
    hash: (password) => inner.hash(password),
    async verifyDummy(password) {
      await inner.verifyDummy(password)
      await spendSample()
      return false
    },
    needsRehash: (stored) => !own(stored),
    async verify(stored, password) {
      if (own(stored)) {
        const right = await inner.verify(stored, password)
        // Only a wrong password needs to look like an imported account's or an unknown address's: a
        // right one says the account exists anyway, so it signs in at argon2id's cost alone. Lazy
        // migration's accounts ask the old system instead (src/auth/password-check.ts).
        if (!right && stored !== LEGACY_PASSWORD) await spendSample()
        return right
      }
      const right = await check(stored, password)
      if (!right) await inner.verifyDummy(password)
      return right
    },
  }
}

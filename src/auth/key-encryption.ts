import { createCipheriv, createDecipheriv, randomBytes, createSecretKey, type KeyObject } from 'node:crypto'
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'

/** Where development keeps its generated key; production must be given one. */
export const KEK_FILE = 'key-encryption-key'

const PREFIX = 'enc:v1:'
const KEY_BYTES = 32
const IV_BYTES = 12

/** A stored value cannot be opened with the configured key: start-up stops, nothing is changed. */
export class KeyEncryptionError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'KeyEncryptionError'
  }
}

/** base64 of 32 bytes, or null. */
export function decodeKek(value: string): Buffer | null {
  const trimmed = value.trim()
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) return null
  const key = Buffer.from(trimmed.replace(/-/g, '+').replace(/_/g, '/'), 'base64')
  return key.length === KEY_BYTES ? key : null
}

/**
 * AES-256-GCM under the key-encryption key. Each sealed value names what it is (`aad`, e.g. the
 * key's kid), so a sealed value copied onto another row does not open there.
 * Format: `enc:v1:` + base64url(iv) + `.` + base64url(ciphertext) + `.` + base64url(tag).
 */
/** Random IVs drawn in blocks: one call to the system's generator per 512 seals instead of one each. */
const IV_BLOCK = IV_BYTES * 512
let ivBlock = Buffer.alloc(0)
let ivAt = 0

/** A fresh random 96-bit IV, never handed out twice (GCM's requirement). */
function freshIv(): Buffer {
  if (ivAt + IV_BYTES > ivBlock.length) {
    ivBlock = randomBytes(IV_BLOCK)
    ivAt = 0
  }
  const iv = ivBlock.subarray(ivAt, ivAt + IV_BYTES)
  ivAt += IV_BYTES
  return iv
}

export class KeySealer {
  /** Imported once: a Buffer key is imported again by every cipher made with it (about 25 us each on Node 24). */
  private readonly kek: KeyObject

  constructor(kek: Buffer) {
    if (kek.length !== KEY_BYTES) throw new Error('a key-encryption key is 32 bytes')
    this.kek = createSecretKey(kek)
  }

  static isSealed(value: string): boolean {
    return value.startsWith(PREFIX)
  }

  seal(plaintext: string, aad: string): string {
    const iv = freshIv()
    const cipher = createCipheriv('aes-256-gcm', this.kek, iv)
    cipher.setAAD(Buffer.from(aad, 'utf8'))
    const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()])
    return `${PREFIX}${iv.toString('base64url')}.${ciphertext.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}`
  }

  /** The plaintext, or null when this key (or this aad) does not open it. */
  tryOpen(sealed: string, aad: string): string | null {
    if (!KeySealer.isSealed(sealed)) return null
    const [iv, ciphertext, tag, ...rest] = sealed.slice(PREFIX.length).split('.')
    if (iv === undefined || ciphertext === undefined || tag === undefined || rest.length > 0) return null
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.kek, Buffer.from(iv, 'base64url'))
      decipher.setAAD(Buffer.from(aad, 'utf8'))
      decipher.setAuthTag(Buffer.from(tag, 'base64url'))
      return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64url')), decipher.final()]).toString('utf8')
    } catch {
      return null
    }
  }

  open(sealed: string, aad: string): string {
    const plaintext = this.tryOpen(sealed, aad)
    if (plaintext === null) {
      throw new KeyEncryptionError('KEY_ENCRYPTION_KEY does not decrypt the keys stored in the database (changed without `portcullis keys rewrap`?); nothing was changed')
    }
    return plaintext
  }
}

/**
 * The configured key, or in development one generated into DATA_DIR (mode 0600) the first time and
 * read from there afterwards, so the server and the CLI on one data directory agree. Production
 * never gets here without a key (the configuration refuses to load).
 */
export function resolveKek(configured: Buffer | undefined, dataDir: string, warn: (message: string) => void): Buffer {
  if (configured) return configured
  const file = path.join(dataDir, KEK_FILE)
  let text: string | undefined
  try {
    text = readFileSync(file, 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  if (text !== undefined) {
    const key = decodeKek(text)
    if (!key) throw new KeyEncryptionError(`${file} does not hold a key-encryption key (base64 of 32 bytes)`)
    return key
  }
  mkdirSync(dataDir, { recursive: true })
  const key = randomBytes(KEY_BYTES)
  try {
    // 'wx': if another process created it a moment ago, read theirs instead of overwriting it.
    writeFileSync(file, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' })
    chmodSync(file, 0o600)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return resolveKek(undefined, dataDir, warn)
    throw error
  }
  warn(`KEY_ENCRYPTION_KEY is not set: generated one into ${file} (development only; production must set it)`)
  return key
}

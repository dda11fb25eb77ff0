import { createPrivateKey, randomBytes, type JsonWebKey, type KeyObject } from 'node:crypto'
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from 'jose'
import type { Db } from '../db/index.ts'
import { secrets, signingKeys, type SigningKeyRow } from '../db/repositories.ts'
import type { Clock } from '../clock.ts'
import { KeyEncryptionError, KeySealer } from './key-encryption.ts'

export const SIGNING_ALG = 'EdDSA'

/**
 * The key families in the store: EdDSA signs Portcullis's own tokens and the OpenID provider's JWT
 * access tokens; RS256 signs the provider's ID tokens (the one algorithm OpenID Connect requires a
 * relying party to support). Each family rotates on its own: its newest key signs, older ones keep
 * verifying for the grace. The RS256 family exists only once the provider has been used.
 */
export type KeyAlg = typeof SIGNING_ALG | 'RS256'

/** How long a superseded key stays published and keeps verifying: the longest token life plus slack. */
export function keyGraceMs(refreshTtlSeconds: number): number {
  return (refreshTtlSeconds + 3600) * 1000
}

interface LoadedKey {
  kid: string
  alg: KeyAlg
  createdAt: number
  /** When this key stops verifying: its successor's creation plus the grace; null for the newest. */
  retiresAt: number | null
  publicJwk: JWK
  publicKey: CryptoKey
  /** The private key, for node:crypto's Ed25519 signing (src/auth/tokens.ts, signCompact) and the provider. */
  signer: KeyObject
}

export interface KeyStoreOptions {
  clock: Clock
  /** Opens and seals the private keys (AES-256-GCM under KEY_ENCRYPTION_KEY). */
  sealer: KeySealer
  refreshTtlSeconds: number
  /** How often other instances' rotations are picked up even when no unknown kid forces it. */
  reloadIntervalMs?: number
  /** Unknown kids force a reload at most this often, so random kids cannot flood the database. */
  unknownKidReloadMs?: number
}

/** What a sealed private key is bound to: a sealed value moved to another row does not open. */
function aadOf(kid: string): string {
  return `signing_key:${kid}`
}

async function createKeyRow(now: number, sealer: KeySealer, alg: KeyAlg): Promise<SigningKeyRow> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true, ...(alg === 'RS256' ? { modulusLength: 2048 } : {}) })
  const publicJwk = await exportJWK(publicKey)
  const kid = await calculateJwkThumbprint(publicJwk)
  const privateJwk = sealer.seal(JSON.stringify(await exportJWK(privateKey)), aadOf(kid))
  return { kid, alg, public_jwk: JSON.stringify(publicJwk), private_jwk: privateJwk, created_at: now }
}

/**
 * Adds a new signing key to each family in use (EdDSA always; RS256 once the provider made one);
 * every instance signs with them once it has reloaded. Returns the new kids, EdDSA's first.
 */
export async function rotateSigningKey(db: Db, sealer: KeySealer, now: number): Promise<string> {
  return (await rotateSigningKeys(db, sealer, now))[0]!
}

export async function rotateSigningKeys(db: Db, sealer: KeySealer, now: number): Promise<string[]> {
  const families = new Set((await signingKeys.list(db.kysely)).map((row) => row.alg as KeyAlg))
  const kids: string[] = []
  for (const alg of [SIGNING_ALG, 'RS256'] as const) {
    if (alg !== SIGNING_ALG && !families.has(alg)) continue
    const row = await createKeyRow(now, sealer, alg)
    await signingKeys.insert(db.kysely, row)
    kids.push(row.kid)
  }
  return kids
}

/** The private JWK of a stored row; a row from before encryption at rest is still read. */
function privateJwkOf(row: SigningKeyRow, sealer: KeySealer): JWK {
  return JSON.parse(KeySealer.isSealed(row.private_jwk) ? sealer.open(row.private_jwk, aadOf(row.kid)) : row.private_jwk) as JWK
}

function secretAad(name: string): string {
  return `secret:${name}`
}

/**
 * A named service secret stored sealed under the key-encryption key (the API-key hashing key):
 * created by whichever instance or command asks first, the same for all afterwards.
 */
export async function sealedSecret(db: Db, sealer: KeySealer, name: string, now: number): Promise<Buffer> {
  const fresh = sealer.seal(randomBytes(32).toString('base64url'), secretAad(name))
  const stored = await secrets.getOrCreate(db.kysely, name, fresh, now)
  return Buffer.from(sealer.open(stored, secretAad(name)), 'base64url')
}

/**
 * At start-up: proves the key opens every sealed private key, then seals any stored in the clear
 * (a database from before encryption at rest). Nothing is written unless every check passed, so
 * a wrong KEY_ENCRYPTION_KEY stops start-up and changes nothing.
 */
export async function sealStoredKeys(db: Db, sealer: KeySealer): Promise<number> {
  const rows = await signingKeys.list(db.kysely)
  for (const row of rows) if (KeySealer.isSealed(row.private_jwk)) sealer.open(row.private_jwk, aadOf(row.kid))
  for (const secret of await secrets.list(db.kysely)) if (KeySealer.isSealed(secret.value)) sealer.open(secret.value, secretAad(secret.name))
  let sealed = 0
  for (const row of rows.filter((r) => !KeySealer.isSealed(r.private_jwk))) {
    // Conditional on the clear value, so two instances starting together seal each row once.
    if (await signingKeys.replacePrivate(db.kysely, row.kid, row.private_jwk, sealer.seal(row.private_jwk, aadOf(row.kid)))) sealed++
  }
  return sealed
}

/** Another module's sealed values, re-sealed inside the rewrap's transaction; returns how many. */
export type Rewrap = (trx: Db['kysely'], from: KeySealer, to: KeySealer) => Promise<number>

/**
 * Re-encrypts every private key, every sealed service secret and whatever `also` covers (queued
 * mail) from the old key-encryption key to the new one, in one transaction: all or nothing. A row
 * the new key already opens is left alone, so an interrupted or repeated rewrap is harmless; a
 * row neither key opens stops it.
 */
export async function rewrapStoredKeys(db: Db, from: KeySealer, to: KeySealer, also: Rewrap[] = []): Promise<number> {
  return db.kysely.transaction().execute(async (trx) => {
    let rewrapped = 0
    for (const row of await signingKeys.list(trx)) {
      if (KeySealer.isSealed(row.private_jwk) && to.tryOpen(row.private_jwk, aadOf(row.kid)) !== null) continue
      const clear = KeySealer.isSealed(row.private_jwk) ? from.tryOpen(row.private_jwk, aadOf(row.kid)) : row.private_jwk
      if (clear === null) throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt signing key ${row.kid}; nothing was changed`)
      await signingKeys.replacePrivate(trx, row.kid, row.private_jwk, to.seal(clear, aadOf(row.kid)))
      rewrapped++
    }
    for (const secret of await secrets.list(trx)) {
      if (!KeySealer.isSealed(secret.value) || to.tryOpen(secret.value, secretAad(secret.name)) !== null) continue
      const clear = from.tryOpen(secret.value, secretAad(secret.name))
      if (clear === null) throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt the stored secret ${secret.name}; nothing was changed`)
      await secrets.replace(trx, secret.name, secret.value, to.seal(clear, secretAad(secret.name)))
      rewrapped++
    }
    for (const rewrap of also) rewrapped += await rewrap(trx, from, to)
    return rewrapped
  })
}

/** Each key's state within its family (rows in creation order): the newest signs, a superseded one verifies for the grace. */
export function describeKeys(rows: SigningKeyRow[], now: number, refreshTtlSeconds: number) {
  return rows.map((row) => {
    const successor = rows.find((later) => later.alg === row.alg && later !== row && (later.created_at > row.created_at || (later.created_at === row.created_at && later.kid > row.kid)))
    const retiresAt = successor ? successor.created_at + keyGraceMs(refreshTtlSeconds) : null
    const state = retiresAt === null ? 'signing' : retiresAt > now ? 'verifying' : 'retired'
    return { kid: row.kid, alg: row.alg, createdAt: row.created_at, retiresAt, state }
  })
}

/**
 * Signing keys live in the database so every instance signs and verifies with the same set.
 * The newest key signs; older ones keep verifying until every token they signed has expired.
 */
export class KeyStore {
  private keys = new Map<string, LoadedKey>()
  private signing: LoadedKey | undefined
  private readonly listeners = new Set<() => void>()
  private lastReload = 0
  private reloading: Promise<void> | undefined
  private timer: NodeJS.Timeout | undefined

  constructor(
    private readonly db: Db,
    private readonly options: KeyStoreOptions,
  ) {}

  /** Loads the keys and creates the first one on a new database. */
  async start(): Promise<void> {
    await sealStoredKeys(this.db, this.options.sealer)
    await this.reload()
    if (!this.signing) {
      await signingKeys.insert(this.db.kysely, await createKeyRow(this.options.clock.now(), this.options.sealer, SIGNING_ALG))
      await this.reload()
    }
    const interval = this.options.reloadIntervalMs ?? 60_000
    this.timer = setInterval(() => {
      this.reload().catch(() => {
        // The database may be away; the keys already loaded keep working until it is back.
      })
    }, interval)
    this.timer.unref()
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer)
  }

  async reload(): Promise<void> {
    this.reloading ??= this.load().finally(() => {
      this.reloading = undefined
    })
    return this.reloading
  }

  private async load(): Promise<void> {
    const rows = await signingKeys.list(this.db.kysely)
    const described = describeKeys(rows, this.options.clock.now(), this.options.refreshTtlSeconds)
    const next = new Map<string, LoadedKey>()
    for (const [index, row] of rows.entries()) {
      const cached = this.keys.get(row.kid)
      const retiresAt = described[index]!.retiresAt
      if (cached) {
        next.set(row.kid, { ...cached, retiresAt })
        continue
      }
      const publicJwk = JSON.parse(row.public_jwk) as JWK
      const alg = row.alg as KeyAlg
      next.set(row.kid, {
        kid: row.kid,
        alg,
        createdAt: row.created_at,
        retiresAt,
        publicJwk,
        publicKey: (await importJWK(publicJwk, alg)) as CryptoKey,
        signer: createPrivateKey({ key: privateJwkOf(row, this.options.sealer) as JsonWebKey, format: 'jwk' }),
      })
    }
    const changed = next.size !== this.keys.size || [...next.keys()].some((kid) => !this.keys.has(kid))
    this.keys = next
    this.signing = [...next.values()].find((key) => key.alg === SIGNING_ALG && key.retiresAt === null)
    this.lastReload = this.options.clock.now()
    if (changed) for (const listener of this.listeners) listener()
  }

  /** Told after a reload that found keys added or removed (the provider rebuilds on its key set). */
  onChange(listener: () => void): void {
    this.listeners.add(listener)
  }

  signingKey(): { kid: string; signer: KeyObject } {
    if (!this.signing) throw new Error('KeyStore used before start()')
    return this.signing
  }

  /**
   * Makes sure the family has a key (the provider's RS256 for ID tokens, made on its first use,
   * not at every start-up): a no-op when one exists.
   */
  async ensureFamily(alg: KeyAlg): Promise<void> {
    if ([...this.keys.values()].some((key) => key.alg === alg)) return
    const rows = await signingKeys.list(this.db.kysely)
    if (!rows.some((row) => row.alg === alg)) await signingKeys.insert(this.db.kysely, await createKeyRow(this.options.clock.now(), this.options.sealer, alg))
    await this.reload()
  }

  /**
   * The live keys with their private parts, as JWKs for the OpenID provider library: within each
   * family the signing key first, then those still verifying, marked verify-only.
   */
  privateJwks(): JWK[] {
    const live = [...this.keys.values()].filter((key) => this.isLive(key))
    live.sort((a, b) => (a.retiresAt === null ? 0 : 1) - (b.retiresAt === null ? 0 : 1) || b.createdAt - a.createdAt)
    return live.map((key) => ({
      ...(key.signer.export({ format: 'jwk' }) as JWK),
      kid: key.kid,
      alg: key.alg,
      use: 'sig',
      ...(key.retiresAt === null ? {} : { key_ops: ['verify'] }),
    }))
  }

  private isLive(key: LoadedKey): boolean {
    return key.retiresAt === null || key.retiresAt > this.options.clock.now()
  }

  /** The public key for a kid, or null. An unknown kid may be a fresh rotation elsewhere: reload, rarely. */
  async verificationKey(kid: string): Promise<CryptoKey | null> {
    let key = this.keys.get(kid)
    if (!key && this.options.clock.now() - this.lastReload >= (this.options.unknownKidReloadMs ?? 5000)) {
      await this.reload()
      key = this.keys.get(kid)
    }
    // Portcullis's tokens are EdDSA only; an ID-token key never verifies one.
    return key && key.alg === SIGNING_ALG && this.isLive(key) ? key.publicKey : null
  }

  /** Whether a kid is in the key set and not retired, without a reload (for cached verifications). */
  isLiveKid(kid: string): boolean {
    const key = this.keys.get(kid)
    return key !== undefined && this.isLive(key)
  }

  /** Public parts only, for /.well-known/jwks.json. */
  jwks(): { keys: JWK[] } {
    const keys = [...this.keys.values()]
      .filter((key) => this.isLive(key))
      .map((key) =>
        key.alg === SIGNING_ALG
          ? { kty: key.publicJwk.kty, crv: key.publicJwk.crv, x: key.publicJwk.x, kid: key.kid, alg: key.alg, use: 'sig' }
          : { kty: key.publicJwk.kty, n: key.publicJwk.n, e: key.publicJwk.e, kid: key.kid, alg: key.alg, use: 'sig' },
      )
    return { keys: keys as JWK[] }
  }
}

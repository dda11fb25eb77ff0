import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from 'jose'
import type { Db } from '../db/index.ts'
import { signingKeys, type SigningKeyRow } from '../db/repositories.ts'
import type { Clock } from '../clock.ts'

export const SIGNING_ALG = 'EdDSA'

/** How long a superseded key stays published and keeps verifying: the longest token life plus slack. */
export function keyGraceMs(refreshTtlSeconds: number): number {
  return (refreshTtlSeconds + 3600) * 1000
}

interface LoadedKey {
  kid: string
  createdAt: number
  /** When this key stops verifying: its successor's creation plus the grace; null for the newest. */
  retiresAt: number | null
  publicJwk: JWK
  publicKey: CryptoKey
  privateKey: CryptoKey
}

export interface KeyStoreOptions {
  clock: Clock
  refreshTtlSeconds: number
  /** How often other instances' rotations are picked up even when no unknown kid forces it. */
  reloadIntervalMs?: number
  /** Unknown kids force a reload at most this often, so random kids cannot flood the database. */
  unknownKidReloadMs?: number
}

async function createKeyRow(now: number): Promise<SigningKeyRow> {
  const { publicKey, privateKey } = await generateKeyPair(SIGNING_ALG, { extractable: true })
  const publicJwk = await exportJWK(publicKey)
  const privateJwk = await exportJWK(privateKey)
  const kid = await calculateJwkThumbprint(publicJwk)
  return { kid, alg: SIGNING_ALG, public_jwk: JSON.stringify(publicJwk), private_jwk: JSON.stringify(privateJwk), created_at: now }
}

/** Adds a new signing key; every instance signs with it once it has reloaded. */
export async function rotateSigningKey(db: Db, now: number): Promise<string> {
  const row = await createKeyRow(now)
  await signingKeys.insert(db.kysely, row)
  return row.kid
}

export function describeKeys(rows: SigningKeyRow[], now: number, refreshTtlSeconds: number) {
  return rows.map((row, index) => {
    const successor = rows[index + 1]
    const retiresAt = successor ? successor.created_at + keyGraceMs(refreshTtlSeconds) : null
    const state = index === rows.length - 1 ? 'signing' : retiresAt! > now ? 'verifying' : 'retired'
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
  private lastReload = 0
  private reloading: Promise<void> | undefined
  private timer: NodeJS.Timeout | undefined

  constructor(
    private readonly db: Db,
    private readonly options: KeyStoreOptions,
  ) {}

  /** Loads the keys and creates the first one on a new database. */
  async start(): Promise<void> {
    await this.reload()
    if (!this.signing) {
      await rotateSigningKey(this.db, this.options.clock.now())
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
      next.set(row.kid, {
        kid: row.kid,
        createdAt: row.created_at,
        retiresAt,
        publicJwk,
        publicKey: (await importJWK(publicJwk, SIGNING_ALG)) as CryptoKey,
        privateKey: (await importJWK(JSON.parse(row.private_jwk) as JWK, SIGNING_ALG)) as CryptoKey,
      })
    }
    this.keys = next
    this.signing = rows.length > 0 ? next.get(rows[rows.length - 1]!.kid) : undefined
    this.lastReload = this.options.clock.now()
  }

  signingKey(): { kid: string; privateKey: CryptoKey } {
    if (!this.signing) throw new Error('KeyStore used before start()')
    return this.signing
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
    return key && this.isLive(key) ? key.publicKey : null
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
      .map((key) => ({ kty: key.publicJwk.kty, crv: key.publicJwk.crv, x: key.publicJwk.x, kid: key.kid, alg: SIGNING_ALG, use: 'sig' }))
    return { keys: keys as JWK[] }
  }
}

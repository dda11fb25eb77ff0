import { createHmac, type KeyObject } from 'node:crypto'
import type { KeySealer } from '../auth/key-encryption.ts'
import { publishChanges } from '../changes/feed.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { isUuid } from '../text.ts'
import { records, type RecordRow } from './store.ts'
import { setBounded } from '../bounded-map.ts'

/** The keyed hash every identifier is stored under; a grant's (`grant`) is also its JWT access tokens' reference. */
export function keyedHash(key: Buffer | KeyObject, kind: string, value: string): string {
  return createHmac('sha256', key).update(`${kind}:${value}`).digest('base64url')
}

/**
 * A grant's keyed hash (its reference), remembered for the most recent grants: a token request
 * needs it four or five times (the grant's row, each token's, the last use, a JWT's `gid`). A grant
 * id is no credential (it is stored in every token's payload, sealed), so keeping it is harmless.
 */
export function grantReferences(key: KeyObject, max = 10_000): (grantId: string) => string {
  const known = new Map<string, string>()
  return (grantId) => {
    let hash = known.get(grantId)
    if (hash === undefined) {
      hash = keyedHash(key, 'grant', grantId)
      setBounded(known, grantId, hash, max)
    }
    return hash
  }
}

/** What the library hands its adapter to store: a model's payload (its own shape). */
export type Payload = Record<string, unknown>

/** How long a retry of a rotated refresh token gets the same successor (docs/provider.md). */
export const REFRESH_RETRY_MS = 10_000
/** How long the loser of two simultaneous refreshes waits for the winner's successor. */
const RACE_WAIT_MS = 2_000

/**
 * What one request to the library has done with its storage, for the parts of the refresh retry
 * and the session link that span several adapter calls (kept per request, see ProviderService).
 */
export interface RequestState {
  /** A refresh token presented again within the retry window, or the loser of a race: answer with its stored successor. */
  retry?: { idHash: string; successor: string | null }
  /** The Portcullis session a provider session was carried from when the library renamed it. */
  carriedSession?: string | null
  /** A provider session ended by logout: its Portcullis session is ended after the answer. */
  endedSession?: string | null
  /** The Portcullis session an interaction just opened (the sign-in behind this authorization). */
  openedSession?: string | null
  /** The rotated refresh token, when this request rotated one. */
  rotatedFrom?: string
  /**
   * A token request's writes, made together in one transaction once the library has answered
   * (ProviderService.commitTokenRequest): one commit a request instead of one a write.
   */
  deferred?: DeferredWrite[]
  /** The rows a token request found, by id hash (each model hashes under its own prefix): its consumption is judged on what the library just read. */
  found?: Map<string, RecordRow>
}

type Executor = Db['kysely']

/**
 * A write the token endpoint keeps for its transaction: the consumption of the code or refresh
 * token presented, the rotation (the new refresh token and the old one's successor), or anything
 * else it issued or changed.
 */
export interface DeferredWrite {
  kind: 'consume' | 'rotation' | 'other'
  run: (trx: Executor) => Promise<void>
  /** A refresh token's consumption: its id hash, and the successor sealed for it once the rotation made one (stored by the same statement). */
  rotation?: { idHash: string; successor?: string }
}

/**
 * Thrown inside a token request's transaction when another request consumed the same code or
 * refresh token between this one's read and its commit: the transaction rolls back.
 */
export class LostRace extends Error {
  constructor(
    readonly model: string,
    readonly idHash: string,
    readonly grantHash: string | null,
  ) {
    super(`${model} consumed by another request`)
  }
}

export interface AdapterDeps {
  db: Db
  clock: Clock
  sealer: KeySealer
  /** Keys the hashes every identifier is stored under (imported once: a Buffer is imported again at every HMAC). */
  hmacKey: KeyObject
  /** A grant's keyed hash under the same key (grantReferences). */
  grantHash: (grantId: string) => string
  /** The state of the request under way (the library's async-local context), if any. */
  current: () => RequestState | undefined
  /** Whether a Portcullis session is live: a provider session whose Portcullis session ended is gone. */
  sessionLive: (sessionId: string) => Promise<boolean>
  /** The library's error for a code or token that cannot be used (errors.InvalidGrant). */
  invalidGrant: (message: string) => Error
}

/**
 * The models whose value is their identifier and need not be kept: the row is found by its hash,
 * and the identifier comes back from the caller. A session (found by its uid too) and a device code
 * (found by its user code) keep theirs, sealed.
 */
const KEEPS_ID = new Set(['Session', 'DeviceCode', 'Interaction'])

/**
 * The storage of panva's oidc-provider on the project's database (table op_records): one class the
 * library instantiates per model. Identifiers are stored only as keyed hashes and payloads sealed
 * under KEY_ENCRYPTION_KEY, so neither a copy of the database nor one of its rows signs anyone in.
 * Beyond plain storage it makes consumption atomic (a code used twice at once is used once, and the
 * loser revokes what it issued), keeps a rotated refresh token's successor for the retry window, and
 * ties the library's browser sessions to Portcullis sessions.
 */
export class PortcullisAdapter {
  constructor(
    private readonly model: string,
    private readonly deps: AdapterDeps,
  ) {}

  private hash(kind: string, value: string): string {
    return keyedHash(this.deps.hmacKey, kind, value)
  }

  private idHash(id: string): string {
    return this.model === 'Grant' ? this.deps.grantHash(id) : this.hash(`id:${this.model}`, id)
  }

  private aad(idHash: string): string {
    return `op:${this.model}:${idHash}`
  }

  /** A write now, or in a token request, kept for its one transaction. */
  private async write(state: RequestState | undefined, kind: DeferredWrite['kind'], run: (db: Executor) => Promise<unknown>): Promise<void> {
    if (state?.deferred) state.deferred.push({ kind, run: async (trx) => void (await run(trx)) })
    else await run(this.deps.db.kysely)
  }

  private open(row: RecordRow, id: string | null): Payload {
    const payload = JSON.parse(this.deps.sealer.open(row.payload, this.aad(row.id_hash))) as Payload
    if (id !== null) payload.jti = id
    if (row.consumed_at !== null) payload.consumed = Math.floor(row.consumed_at / 1000)
    return payload
  }

  async upsert(id: string, payload: Payload, expiresIn: number): Promise<void> {
    const state = this.deps.current()
    const now = this.deps.clock.now()
    const idHash = this.idHash(id)
    if (this.model === 'RefreshToken' && state?.retry) {
      // A retry answers with the successor already stored; the one the library just made is never kept.
      return
    }
    const { jti: _jti, consumed: _consumed, ...rest } = payload
    const stored = KEEPS_ID.has(this.model) ? { ...rest, jti: id } : rest
    const grantId = this.model === 'Grant' ? id : typeof payload.grantId === 'string' ? payload.grantId : null
    const accountId = typeof payload.accountId === 'string' && isUuid(payload.accountId) ? payload.accountId : null
    const clientId = typeof payload.clientId === 'string' ? payload.clientId : null
    let sessionId: string | null = null
    if (this.model === 'Session') {
      const existing = await records.read(this.deps.db, 'Session', idHash, now)
      sessionId = state?.openedSession ?? state?.carriedSession ?? existing?.session_id ?? null
      // A signed-in provider session is always a Portcullis session; one without is not kept signed in.
      if (payload.accountId && sessionId === null) throw new Error('a provider session signed in without a Portcullis session')
    }
    const row: RecordRow = {
      model: this.model,
      id_hash: idHash,
      grant_hash: grantId === null ? null : this.deps.grantHash(grantId),
      uid_hash: typeof payload.uid === 'string' ? this.hash('uid', payload.uid) : null,
      user_code_hash: typeof payload.userCode === 'string' ? this.hash('user_code', payload.userCode) : null,
      user_id: accountId,
      client_id: clientId,
      session_id: sessionId,
      payload: this.deps.sealer.seal(JSON.stringify(stored), this.aad(idHash)),
      successor: null,
      sids: this.model === 'Session' ? JSON.stringify(sidsOf(payload)) : null,
      created_at: now,
      last_used_at: null,
      expires_at: now + expiresIn * 1000,
      consumed_at: typeof payload.consumed === 'number' ? now : null,
    }
    const rotating = this.model === 'RefreshToken' && state?.rotatedFrom !== undefined
    await this.write(state, rotating ? 'rotation' : 'other', (db) => records.upsert(db, row))
    if (rotating) {
      // The retry window: the rotated token remembers what replaced it; in a token request, in the
      // statement that consumes it.
      const rotatedFrom = state!.rotatedFrom!
      const successor = this.deps.sealer.seal(id, `op:successor:${rotatedFrom}`)
      const consumption = state!.deferred?.find((write) => write.rotation?.idHash === rotatedFrom)?.rotation
      if (consumption) consumption.successor = successor
      else await this.write(state, 'rotation', (db) => records.setSuccessor(db, 'RefreshToken', rotatedFrom, successor))
    }
  }

  async find(id: string): Promise<Payload | undefined> {
    const now = this.deps.clock.now()
    const idHash = this.idHash(id)
    const row = await records.read(this.deps.db, this.model, idHash, now)
    if (!row) return undefined
    const state = this.deps.current()
    if (state?.deferred) (state.found ??= new Map()).set(idHash, row)
    if (this.model === 'Session' && !(await this.sessionStillLive(row))) return undefined
    const payload = this.open(row, KEEPS_ID.has(this.model) ? null : id)
    if (this.model === 'RefreshToken' && row.consumed_at !== null) return this.retryOrReuse(row, payload, now)
    return payload
  }

  /**
   * A rotated refresh token presented again: within the window, and while its successor is unused,
   * it is a client that lost the answer, which gets the same successor again; otherwise it is a
   * reuse, and the library revokes the grant.
   */
  private async retryOrReuse(row: RecordRow, payload: Payload, now: number): Promise<Payload> {
    const state = this.deps.current()
    if (!state || row.successor === null || now - row.consumed_at! > REFRESH_RETRY_MS) return payload
    const successor = this.deps.sealer.open(row.successor, `op:successor:${row.id_hash}`)
    const next = await records.read(this.deps.db, 'RefreshToken', this.idHash(successor), now)
    if (!next || next.consumed_at !== null) return payload
    state.retry = { idHash: row.id_hash, successor }
    const { consumed: _consumed, ...unconsumed } = payload
    return unconsumed
  }

  /**
   * A signed-in provider session lives as long as its Portcullis session: one revoked, expired or of
   * a disabled account is gone. A session nobody signed in to (the library keeps a form's state in
   * one) has nothing to check.
   */
  private async sessionStillLive(row: RecordRow): Promise<boolean> {
    if (row.user_id === null && row.session_id === null) return true
    return row.session_id !== null && (await this.deps.sessionLive(row.session_id))
  }

  async findByUid(uid: string): Promise<Payload | undefined> {
    const row = await records.findBy(this.deps.db.kysely, this.model, 'uid_hash', this.hash('uid', uid), this.deps.clock.now())
    if (!row) return undefined
    if (this.model === 'Session' && !(await this.sessionStillLive(row))) return undefined
    return this.open(row, null)
  }

  async findByUserCode(userCode: string): Promise<Payload | undefined> {
    const row = await records.findBy(this.deps.db.kysely, this.model, 'user_code_hash', this.hash('user_code', userCode), this.deps.clock.now())
    return row ? this.open(row, null) : undefined
  }

  async consume(id: string): Promise<void> {
    const state = this.deps.current()
    const idHash = this.idHash(id)
    if (this.model === 'RefreshToken' && state?.retry?.idHash === idHash) return
    const now = this.deps.clock.now()
    if (state?.deferred) {
      // A token request: judged now by a read, made in its transaction, which checks again and
      // rolls back if another request consumed it in between (ProviderService.commitTokenRequest).
      const row = state.found?.get(idHash) ?? (await records.read(this.deps.db, this.model, idHash, 0))
      if (row && row.consumed_at === null) {
        const { model } = this
        const rotation = model === 'RefreshToken' ? { idHash, successor: undefined as string | undefined } : undefined
        state.deferred.push({
          kind: 'consume',
          rotation,
          run: async (trx) => {
            if (!(await records.consume(trx, model, idHash, now, rotation?.successor ?? null))) throw new LostRace(model, idHash, row.grant_hash)
          },
        })
        if (rotation) state.rotatedFrom = idHash
        return
      }
    } else if (await records.consume(this.deps.db.kysely, this.model, idHash, now)) {
      if (this.model === 'RefreshToken' && state) state.rotatedFrom = idHash
      return
    }
    // Two requests used the same value at once and this one lost.
    if (this.model === 'RefreshToken' && state) {
      // Two refreshes with one token at once are one client's retry: the loser answers with the winner's successor.
      state.retry = { idHash, successor: null }
      return
    }
    // A code used twice is an attack (RFC 9700 4.5): what the first use issued dies with it.
    const row = await records.read(this.deps.db, this.model, idHash, 0)
    if (row?.grant_hash) await revokeGrant(this.deps.db, row.grant_hash)
    throw this.deps.invalidGrant(`${this.model === 'AuthorizationCode' ? 'authorization code' : 'code'} already used`)
  }

  async destroy(id: string): Promise<void> {
    const row = await records.destroy(this.deps.db.kysely, this.model, this.idHash(id))
    const state = this.deps.current()
    // The library renames a session by destroying it and saving it anew (same request): carry the link over.
    if (this.model === 'Session' && row && state) {
      state.carriedSession = row.session_id
      state.endedSession = row.session_id
    }
  }

  async revokeByGrantId(grantId: string): Promise<void> {
    await revokeGrant(this.deps.db, this.deps.grantHash(grantId))
  }
}

/**
 * Ends a grant at once: its rows (codes, refresh and opaque tokens) go, and the change feed tells
 * every instance, so its JWT access tokens stop working on Portcullis's own API within the bound.
 */
export async function revokeGrant(db: Db, grantHash: string): Promise<void> {
  await db.kysely.transaction().execute((trx) => revokeGrantIn(trx, grantHash))
}

/** revokeGrant in the caller's transaction. */
export async function revokeGrantIn(trx: Db['kysely'], grantHash: string): Promise<void> {
  const owner = await records.destroyGrant(trx, grantHash)
  if (owner !== null) await publishChanges(trx, [{ kind: 'grant_revoked', user_id: owner, target_id: grantHash }])
}

/** Waits for the winner of a refresh race to store its successor; null if it never does. */
export async function successorOf(db: Db, sealer: KeySealer, idHash: string, clock: Clock): Promise<string | null> {
  const deadline = Date.now() + RACE_WAIT_MS
  for (;;) {
    const row = await records.read(db, 'RefreshToken', idHash, clock.now() - REFRESH_RETRY_MS)
    if (row?.successor) return sealer.open(row.successor, `op:successor:${idHash}`)
    if (Date.now() > deadline) return null
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

/** The clients a provider session signed in to, with the `sid` each was told (for Back-Channel Logout). */
function sidsOf(payload: Payload): [string, string][] {
  const authorizations = (payload.authorizations ?? {}) as Record<string, { sid?: unknown }>
  return Object.entries(authorizations).flatMap(([clientId, { sid }]) => (typeof sid === 'string' ? [[clientId, sid] as [string, string]] : []))
}

/** The adapter as the library takes it: a function from a model's name to its storage. */
export function adapterFactory(deps: AdapterDeps): (model: string) => PortcullisAdapter {
  return (model) => new PortcullisAdapter(model, deps)
}

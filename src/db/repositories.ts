import { CompiledQuery, sql, type ExpressionBuilder, type Insertable, type Kysely, type Selectable } from 'kysely'
import { randomUUID } from 'node:crypto'
import { proofStands } from '../auth/pending-proofs.ts'
import { ReadBatch } from './batch.ts'
import { hotQuery } from './hot-query.ts'
import type { Db } from './index.ts'
import { databaseStatementNowMs } from './now.ts'
import type { ChangeFeedTable, Database, OneTimeTokenPurpose, SessionsTable, SigningKeysTable, UsersTable, WatchlistsTable } from './schema.ts'

/**
 * Storage calls, one group a table. Each takes the executor first, so the same call runs on the
 * pool or inside a transaction. They return data or null; services decide what that means.
 */
type Executor = Kysely<Database>
type Engine = 'sqlite' | 'postgres'

export type UserRow = Selectable<UsersTable>
export type SessionRow = Selectable<SessionsTable>
export type SigningKeyRow = Selectable<SigningKeysTable>
export type WatchlistRow = Selectable<WatchlistsTable>
export type ChangeRow = Selectable<ChangeFeedTable>

// The reads on the request path, compiled once (src/db/hot-query.ts).
const userById = hotQuery<{ id: string }, UserRow>((db, arg) => db.selectFrom('users').selectAll().where('id', '=', arg('id')))
const sessionAuthState = hotQuery<{ id: string }, SessionAuthState>((db, arg) =>
  db
    .selectFrom('sessions')
    .innerJoin('users', 'users.id', 'sessions.user_id')
    .select(['sessions.user_id', 'sessions.expires_at', 'sessions.revoked_at', 'sessions.amr', 'sessions.acr', 'sessions.auth_time', 'sessions.created_at', 'sessions.organization_id', 'users.status', 'users.email_verified_at', 'users.claims_version'])
    .where('sessions.id', '=', arg('id')),
)
// A user's own lists only: an organisation's list (organization_id set) keeps its maker's user_id.
const watchlistPage = hotQuery<{ userId: string; after: number; limit: number }, WatchlistRow>((db, arg) =>
  db.selectFrom('watchlists').selectAll().where('user_id', '=', arg('userId')).where('organization_id', 'is', null).where('position', '>', arg('after')).orderBy('position').limit(arg('limit')),
  { literal: ['limit'] },
)

const touchSession = hotQuery<{ id: string; at: number }, never>((db, arg) =>
  db.updateTable('sessions').set({ last_used_at: arg('at') }).where('id', '=', arg('id')),
)

// On PostgreSQL the two reads behind GET /auth/me and GET /watchlists go out as one query for all
// the requests of a turn of the event loop (src/db/batch.ts): a round trip each was most of their
// cost. SQLite runs in-process, where a query costs microseconds and batching would only add a turn.
const USERS_BY_IDS = 'select * from "users" where "id" = any($1::text[])'
const WATCHLIST_PAGES = `select q.n as batch_slot, w.* from unnest($1::text[], $2::bigint[], $3::int[]) with ordinality as q(user_id, after_position, page_size, n)
cross join lateral (select * from "watchlists" where "watchlists"."user_id" = q.user_id and "watchlists"."organization_id" is null and "watchlists"."position" > q.after_position order by "watchlists"."position" limit q.page_size) as w
order by q.n, w.position`

interface PageKey {
  userId: string
  after: number
  limit: number
}

function readBatches(db: Kysely<Database>) {
  return {
    users: new ReadBatch<string, UserRow | null>(
      (id) => id,
      async (ids) => {
        const rows = (await db.executeQuery<UserRow>(CompiledQuery.raw(USERS_BY_IDS, [ids]))).rows
        const byId = new Map(rows.map((row) => [row.id, row]))
        return ids.map((id) => byId.get(id) ?? null)
      },
    ),
    pages: new ReadBatch<PageKey, WatchlistRow[]>(
      (key) => `${key.userId}/${key.after}/${key.limit}`,
      async (keys) => {
        const parameters = [keys.map((k) => k.userId), keys.map((k) => k.after), keys.map((k) => k.limit)]
        const rows = (await db.executeQuery<WatchlistRow & { batch_slot: number }>(CompiledQuery.raw(WATCHLIST_PAGES, parameters))).rows
        const pages = keys.map((): WatchlistRow[] => [])
        for (const { batch_slot, ...row } of rows) pages[batch_slot - 1]!.push(row)
        return pages
      },
    ),
  }
}

const batches = new WeakMap<Db, ReturnType<typeof readBatches>>()

/** The read batches of a PostgreSQL database, made on first use; their counts go to /metrics. */
export function batchesOf(db: Db): ReturnType<typeof readBatches> {
  let batch = batches.get(db)
  if (!batch) {
    batch = readBatches(db.kysely)
    batches.set(db, batch)
  }
  return batch
}

export const users = {
  async insert(db: Executor, row: UserRow): Promise<void> {
    await db.insertInto('users').values(row).execute()
  },

  /**
   * Many new accounts at once (an import's batch), one statement per thousand: the ids of those
   * inserted. A row whose address or id was taken meanwhile is left out, never overwritten.
   */
  async insertNew(db: Executor, rows: Insertable<UsersTable>[]): Promise<Set<string>> {
    const inserted = new Set<string>()
    for (let at = 0; at < rows.length; at += 1000) {
      const done = await db.insertInto('users').values(rows.slice(at, at + 1000)).onConflict((conflict) => conflict.doNothing()).returning('id').execute()
      for (const row of done) inserted.add(row.id)
    }
    return inserted
  },

  /**
   * One password hash of an account still on an imported one (lazy migration's marker aside), or
   * null when none is left: found through users_imported_hash_idx (migration 0022), whose
   * condition this repeats.
   */
  async anImportedHash(db: Executor): Promise<string | null> {
    const row = await db.selectFrom('users').select('password_hash').where(sql<boolean>`password_hash not like '$argon2id$%' and password_hash not like '!%'`).limit(1).executeTakeFirst()
    return row?.password_hash ?? null
  },

  /** Which of these addresses and ids are taken (an import's check). */
  async taken(db: Executor, emails: readonly string[], ids: readonly string[]): Promise<{ emails: Set<string>; ids: Set<string> }> {
    const found = { emails: new Set<string>(), ids: new Set<string>() }
    for (let at = 0; at < emails.length; at += 1000) {
      for (const row of await db.selectFrom('users').select('email').where('email', 'in', emails.slice(at, at + 1000)).execute()) found.emails.add(row.email)
    }
    for (let at = 0; at < ids.length; at += 1000) {
      for (const row of await db.selectFrom('users').select('id').where('id', 'in', ids.slice(at, at + 1000)).execute()) found.ids.add(row.id)
    }
    return found
  },

  async findByEmail(db: Executor, email: string): Promise<UserRow | null> {
    return (await db.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirst()) ?? null
  },

  async findById(db: Executor, id: string): Promise<UserRow | null> {
    return (await userById(db, { id }))[0] ?? null
  },

  /**
   * findById on the request path, outside any transaction: batched on PostgreSQL (above), on
   * SQLite read at once on the reader connection (src/db/hot-query.ts's `committed`).
   */
  async read(db: Db, id: string): Promise<UserRow | null> {
    if (db.engine === 'postgres') return batchesOf(db).users.load(id)
    return (await userById.committed(db, { id }))[0] ?? null
  },

  async list(db: Executor, limit: number): Promise<UserRow[]> {
    return db.selectFrom('users').selectAll().orderBy('created_at').orderBy('id').limit(limit).execute()
  },

  /** Sets the verification time once; returns false when the user was already verified or is gone. */
  async markVerified(db: Executor, id: string, at: number): Promise<boolean> {
    const result = await db
      .updateTable('users')
      .set({ email_verified_at: at, updated_at: at })
      .where('id', '=', id)
      .where('email_verified_at', 'is', null)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  async setStatus(db: Executor, id: string, status: UserRow['status'], reason: UserRow['disabled_reason'], at: number): Promise<void> {
    await db.updateTable('users').set({ status, disabled_reason: reason, updated_at: at }).where('id', '=', id).execute()
  },

  /**
   * A session opens: records the time, if the account's credential epoch is still the one the
   * sign-in checked (docs/SECURITY.md). False when it moved (or the account is gone): no session.
   */
  async recordLogin(db: Executor, user: { id: string; credential_epoch: number }, at: number): Promise<boolean> {
    const result = await db
      .updateTable('users')
      .set({ last_login_at: at })
      .where('id', '=', user.id)
      .where('credential_epoch', '=', user.credential_epoch)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /**
   * Takes the account's row lock for the rest of the transaction (a no-op write; SQLite serialises
   * writers anyway): changes to an account's ways in, made concurrently, then happen one by one.
   */
  async lockRow(db: Executor, id: string): Promise<boolean> {
    const result = await db
      .updateTable('users')
      .set((eb) => ({ updated_at: eb.ref('updated_at') }))
      .where('id', '=', id)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /** Every sign-in under way for the account is superseded (src/auth/sign-out.ts). */
  async bumpCredentialEpoch(db: Executor, id: string): Promise<void> {
    await db.updateTable('users').set((eb) => ({ credential_epoch: eb('credential_epoch', '+', 1) })).where('id', '=', id).execute()
  },

  async setPasswordHash(db: Executor, id: string, hash: string, at: number): Promise<void> {
    await db.updateTable('users').set({ password_hash: hash, updated_at: at }).where('id', '=', id).execute()
  },

  /** The account state the bearer check needs, without the password hash. */
  async findState(db: Executor, id: string): Promise<Pick<UserRow, 'status' | 'email_verified_at' | 'claims_version'> | null> {
    return (await db.selectFrom('users').select(['status', 'email_verified_at', 'claims_version']).where('id', '=', id).executeTakeFirst()) ?? null
  },

  /** Replaces the hash only if it is still the one the caller read, so a concurrent password change wins. */
  /** Replaces the hash only if it is still `previousHash`; false when something else replaced it first. */
  async replacePasswordHash(db: Executor, id: string, previousHash: string, nextHash: string, at: number): Promise<boolean> {
    const result = await db
      .updateTable('users')
      .set({ password_hash: nextHash, updated_at: at })
      .where('id', '=', id)
      .where('password_hash', '=', previousHash)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },
}

export interface SessionAuthState {
  user_id: string
  expires_at: number
  revoked_at: number | null
  amr: string
  acr: SessionRow['acr']
  auth_time: number | null
  created_at: number
  /** The session's active organisation (migration 0021). */
  organization_id: string | null
  status: UserRow['status']
  email_verified_at: number | null
  /** What the user's tokens must claim at least (docs/authorization.md). */
  claims_version: number
}

export const sessions = {
  async insert(db: Executor, row: SessionRow): Promise<void> {
    await db.insertInto('sessions').values(row).execute()
  },

  /** The session and its owner's state in one indexed read. */
  async findAuthState(db: Executor, id: string): Promise<SessionAuthState | null> {
    return (await sessionAuthState(db, { id }))[0] ?? null
  },

  async touch(db: Executor, id: string, at: number): Promise<void> {
    await touchSession(db, { id, at })
  },

  /** The session's active organisation, carried by its next access tokens (null: none). */
  async setOrganization(db: Executor, id: string, organizationId: string | null): Promise<void> {
    await db.updateTable('sessions').set({ organization_id: organizationId }).where('id', '=', id).execute()
  },

  /** A second factor verified in the session: what its next tokens assert (docs/tokens.md). */
  async raiseAssurance(db: Executor, id: string, assurance: Pick<SessionRow, 'amr' | 'acr' | 'auth_time'>): Promise<void> {
    await db.updateTable('sessions').set(assurance).where('id', '=', id).execute()
  },

  async listLive(db: Executor, userId: string, now: number): Promise<SessionRow[]> {
    return db
      .selectFrom('sessions')
      .selectAll()
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .orderBy('created_at', 'desc')
      .orderBy('id')
      .execute()
  },

  async findOwned(db: Executor, userId: string, id: string): Promise<SessionRow | null> {
    return (await db.selectFrom('sessions').selectAll().where('id', '=', id).where('user_id', '=', userId).executeTakeFirst()) ?? null
  },

  /**
   * Revokes the user's unrevoked sessions (all, one, or all but one) and returns their ids, so
   * the caller can publish exactly those to the revocation feed in the same transaction.
   */
  /**
   * Retention: deletes up to `limit` sessions that expired, or were revoked, before `before`; one
   * short statement per call, each a range of its own index (migration 0008).
   */
  async deleteEnded(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('sessions').select('id').where('expires_at', '<', before).limit(limit)
    const revoked = db.selectFrom('sessions').select('id').where('revoked_at', '<', before).limit(limit)
    const first = await db.deleteFrom('sessions').where('id', 'in', expired).executeTakeFirst()
    const second = await db.deleteFrom('sessions').where('id', 'in', revoked).executeTakeFirst()
    return Number(first.numDeletedRows) + Number(second.numDeletedRows)
  },

  async revoke(db: Executor, userId: string, at: number, which: { only?: string; except?: string } = {}): Promise<string[]> {
    let query = db.updateTable('sessions').set({ revoked_at: at }).where('user_id', '=', userId).where('revoked_at', 'is', null)
    if (which.only !== undefined) query = query.where('id', '=', which.only)
    if (which.except !== undefined) query = query.where('id', '!=', which.except)
    return (await query.returning('id').execute()).map((row) => row.id)
  },
}

export const oneTimeTokens = {
  async insert(
    db: Executor,
    row: { token_hash: string; user_id: string; purpose: OneTimeTokenPurpose; credential_epoch: number; created_at: number; expires_at: number },
  ): Promise<void> {
    await db.insertInto('one_time_tokens').values({ ...row, used_at: null }).execute()
  },

  /**
   * Marks a live token used and returns its user, in one statement: two concurrent uses of the
   * same token cannot both succeed, and one made before the account's sessions last ended is dead.
   */
  async consume(db: Executor, tokenHash: string, purpose: OneTimeTokenPurpose, at: number): Promise<string | null> {
    const row = await db
      .updateTable('one_time_tokens')
      .set({ used_at: at })
      .where('token_hash', '=', tokenHash)
      .where('purpose', '=', purpose)
      .where('used_at', 'is', null)
      .where('expires_at', '>', at)
      .where(proofStands('one_time_tokens', at))
      .returning('user_id')
      .executeTakeFirst()
    return row?.user_id ?? null
  },

  /** A live token's user, without using it up (the reset flow validates the new password first). */
  async findLive(db: Executor, tokenHash: string, purpose: OneTimeTokenPurpose, at: number): Promise<string | null> {
    const row = await db
      .selectFrom('one_time_tokens')
      .select('user_id')
      .where('token_hash', '=', tokenHash)
      .where('purpose', '=', purpose)
      .where('used_at', 'is', null)
      .where('expires_at', '>', at)
      .where(proofStands('one_time_tokens', at))
      .executeTakeFirst()
    return row?.user_id ?? null
  },

  /** Retention: deletes up to `limit` tokens (used or not) that expired before `before`. */
  async deleteExpired(db: Executor, before: number, limit: number): Promise<number> {
    const expired = db.selectFrom('one_time_tokens').select('token_hash').where('expires_at', '<', before).limit(limit)
    return Number((await db.deleteFrom('one_time_tokens').where('token_hash', 'in', expired).executeTakeFirst()).numDeletedRows)
  },

  /** Retires every unused token of one purpose, so only the newest mail's link works. */
  async retireAll(db: Executor, userId: string, purpose: OneTimeTokenPurpose, at: number): Promise<void> {
    await db
      .updateTable('one_time_tokens')
      .set({ used_at: at })
      .where('user_id', '=', userId)
      .where('purpose', '=', purpose)
      .where('used_at', 'is', null)
      .execute()
  },
}

export const changeFeed = {
  /** `seq` and `at` come from the database. */
  async publish(db: Executor, changes: { kind: ChangeFeedTable['kind']; user_id?: string; target_id?: string }[]): Promise<void> {
    if (changes.length === 0) return
    await db
      .insertInto('change_feed')
      .values(changes.map((change) => ({ kind: change.kind, user_id: change.user_id ?? null, target_id: change.target_id ?? null })))
      .execute()
  },

  /** The rows of the last `windowMs`, by the database's clock. */
  async recent(db: Executor, engine: Engine, windowMs: number): Promise<ChangeRow[]> {
    return db
      .selectFrom('change_feed')
      .selectAll()
      .where('at', '>=', sql<number>`${databaseStatementNowMs(engine)} - ${windowMs}`)
      // By time, then number: the time index serves the range and the order (changes are idempotent,
      // so rows of one millisecond may come in any order; seq keeps it stable).
      .orderBy('at')
      .orderBy('seq')
      .execute()
  },

  async prune(db: Executor, engine: Engine, olderThanMs: number): Promise<void> {
    await db.deleteFrom('change_feed').where('at', '<', sql<number>`${databaseStatementNowMs(engine)} - ${olderThanMs}`).execute()
  },
}

export const signingKeys = {
  async list(db: Executor): Promise<SigningKeyRow[]> {
    return db.selectFrom('signing_keys').selectAll().orderBy('created_at').orderBy('kid').execute()
  },

  async insert(db: Executor, row: SigningKeyRow): Promise<void> {
    await db.insertInto('signing_keys').values(row).execute()
  },

  /** Swaps the stored private key only if it is still `previous`; true when it did. */
  async replacePrivate(db: Executor, kid: string, previous: string, next: string): Promise<boolean> {
    const result = await db.updateTable('signing_keys').set({ private_jwk: next }).where('kid', '=', kid).where('private_jwk', '=', previous).executeTakeFirst()
    return result.numUpdatedRows > 0n
  },
}

export const secrets = {
  async list(db: Executor): Promise<{ name: string; value: string }[]> {
    return db.selectFrom('secrets').select(['name', 'value']).orderBy('name').execute()
  },

  async replace(db: Executor, name: string, previous: string, next: string): Promise<boolean> {
    const result = await db.updateTable('secrets').set({ value: next }).where('name', '=', name).where('value', '=', previous).executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /** The named secret, created with `fresh` by whichever instance asks first. */
  async getOrCreate(db: Executor, name: string, fresh: string, at: number): Promise<string> {
    await db.insertInto('secrets').values({ name, value: fresh, created_at: at }).onConflict((oc) => oc.column('name').doNothing()).execute()
    const row = await db.selectFrom('secrets').select('value').where('name', '=', name).executeTakeFirstOrThrow()
    return row.value
  },
}

/**
 * Whose list: a user's own (`organization_id` null; `user_id` the owner) or an organisation's
 * (`user_id` only says who made it). Every statement on one list names its owner, so a list is
 * never reached through the other kind.
 */
export type WatchlistOwner = { user: string } | { organization: string }

const ownedBy = (eb: ExpressionBuilder<Database, 'watchlists'>, owner: WatchlistOwner) =>
  'organization' in owner
    ? eb('organization_id', '=', owner.organization)
    : eb.and([eb('user_id', '=', owner.user), eb('organization_id', 'is', null)])

export const watchlists = {
  /**
   * Takes the owner's row lock for the rest of the transaction (a no-op write), so concurrent
   * creations for one user are serialised and the per-user limit and positions hold.
   */
  lockOwner(db: Executor, userId: string): Promise<boolean> {
    return users.lockRow(db, userId)
  },

  /** The same for an organisation's creations (its limit, and its lists' order); false when it is gone. */
  async lockOrganization(db: Executor, organizationId: string): Promise<boolean> {
    const result = await db
      .updateTable('organizations')
      .set((eb) => ({ updated_at: eb.ref('updated_at') }))
      .where('id', '=', organizationId)
      .executeTakeFirst()
    return result.numUpdatedRows > 0n
  },

  /**
   * The user's own lists (their limit) and the highest position of every list they made, their
   * organisations' included: positions are unique per maker (watchlists_user_position_key).
   */
  async countAndMaxPosition(db: Executor, userId: string): Promise<{ count: number; maxPosition: number }> {
    const row = await db
      .selectFrom('watchlists')
      .select((eb) => [
        eb.fn.sum<number | string | null>(eb.case().when('organization_id', 'is', null).then(1).else(0).end()).as('count'),
        eb.fn.max<number | null>('position').as('max_position'),
      ])
      .where('user_id', '=', userId)
      .executeTakeFirstOrThrow()
    return { count: Number(row.count ?? 0), maxPosition: Number(row.max_position ?? 0) }
  },

  /**
   * An organisation's lists (its limit), and the highest position of its lists and of every list
   * the maker made: a new one sorts last in the organisation and stays unique for its maker.
   */
  async countAndMaxPositionIn(db: Executor, organizationId: string, makerId: string): Promise<{ count: number; maxPosition: number }> {
    const row = await db
      .selectFrom('watchlists')
      .select((eb) => [
        eb.fn.sum<number | string | null>(eb.case().when('organization_id', '=', organizationId).then(1).else(0).end()).as('count'),
        eb.fn.max<number | null>('position').as('max_position'),
      ])
      .where((eb) => eb.or([eb('user_id', '=', makerId), eb('organization_id', '=', organizationId)]))
      .executeTakeFirstOrThrow()
    return { count: Number(row.count ?? 0), maxPosition: Number(row.max_position ?? 0) }
  },

  async insert(db: Executor, row: WatchlistRow): Promise<void> {
    await db.insertInto('watchlists').values(row).execute()
  },

  /** Any list by its id, whoever owns it: the service decides who may see it. */
  async findById(db: Executor, id: string): Promise<WatchlistRow | null> {
    return (await db.selectFrom('watchlists').selectAll().where('id', '=', id).executeTakeFirst()) ?? null
  },

  /** One page of the user's own lists in position order, starting after `afterPosition`. */
  async page(db: Executor, userId: string, afterPosition: number, limit: number): Promise<WatchlistRow[]> {
    return watchlistPage(db, { userId, after: afterPosition, limit })
  },

  /** page on the request path, outside any transaction: as users.read. */
  async readPage(db: Db, userId: string, afterPosition: number, limit: number): Promise<WatchlistRow[]> {
    if (db.engine === 'postgres') return batchesOf(db).pages.load({ userId, after: afterPosition, limit })
    return watchlistPage.committed(db, { userId, after: afterPosition, limit })
  },

  /** One page of an organisation's lists in position order (at most a hundred of them: sorted after the index). */
  async pageIn(db: Executor, organizationId: string, afterPosition: number, limit: number): Promise<WatchlistRow[]> {
    return db
      .selectFrom('watchlists')
      .selectAll()
      .where('organization_id', '=', organizationId)
      .where('position', '>', afterPosition)
      .orderBy('position')
      .limit(limit)
      .execute()
  },

  /**
   * Touches the list and returns it, holding its row lock until the transaction ends. On
   * PostgreSQL a waiting writer re-reads the row after the lock is released, so what this returns
   * is the latest committed state; on SQLite transactions are serialised anyway.
   */
  async lockForUpdate(db: Executor, owner: WatchlistOwner, id: string, at: number): Promise<WatchlistRow | null> {
    return (
      (await db
        .updateTable('watchlists')
        .set({ updated_at: at })
        .where('id', '=', id)
        .where((eb) => ownedBy(eb, owner))
        .returningAll()
        .executeTakeFirst()) ?? null
    )
  },

  async update(db: Executor, owner: WatchlistOwner, id: string, changes: { name?: string; symbols?: string }, at: number): Promise<WatchlistRow | null> {
    return (
      (await db
        .updateTable('watchlists')
        .set({ ...changes, updated_at: at })
        .where('id', '=', id)
        .where((eb) => ownedBy(eb, owner))
        .returningAll()
        .executeTakeFirst()) ?? null
    )
  },

  /** The user's own lists, in order (the data export; an organisation's lists are the organisation's). */
  async allOf(db: Executor, userId: string): Promise<WatchlistRow[]> {
    return db.selectFrom('watchlists').selectAll().where('user_id', '=', userId).where('organization_id', 'is', null).orderBy('position').execute()
  },

  /** Every list the user made, their organisations' included (the user row's foreign key would take them all the same). */
  async deleteAllOf(db: Executor, userId: string): Promise<void> {
    await db.deleteFrom('watchlists').where('user_id', '=', userId).execute()
  },

  async delete(db: Executor, owner: WatchlistOwner, id: string): Promise<boolean> {
    const result = await db.deleteFrom('watchlists').where('id', '=', id).where((eb) => ownedBy(eb, owner)).executeTakeFirst()
    return result.numDeletedRows > 0n
  },
}

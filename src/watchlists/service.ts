import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { watchlists, type WatchlistOwner, type WatchlistRow } from '../db/repositories.ts'
import type { Database } from '../db/schema.ts'
import { AppError, type ErrorDetail } from '../errors.ts'
import { cleanLabel, isUuid } from '../text.ts'
import { throwIfProblems } from '../auth/input.ts'
import type { CursorCodec } from '../cursor.ts'
import type { Principal } from '../auth/service.ts'
import { grants, unionOf, words } from '../authz/permissions.ts'
import { claimsStore } from '../authz/store.ts'
import { LISTS_MAX, NAME_MAX, ORGANIZATION_LISTS_MAX, SYMBOL_PATTERN, SYMBOLS_MAX } from './schemas.ts'

type Executor = Kysely<Database>

export interface WatchlistView {
  id: string
  name: string
  symbols: string[]
  created_at: string
  updated_at: string
  /** Only on an organisation's list. */
  organization_id?: string
}

/** Who asks: the token's subject, and its active organisation with the permissions it claims there. */
export type Caller = Pick<Principal, 'userId' | 'organization'>

function view(row: WatchlistRow): WatchlistView {
  const listed: WatchlistView = {
    id: row.id,
    name: row.name,
    symbols: JSON.parse(row.symbols) as string[],
    created_at: new Date(row.created_at).toISOString(),
    updated_at: new Date(row.updated_at).toISOString(),
  }
  if (row.organization_id !== null) listed.organization_id = row.organization_id
  return listed
}

/** Upper-cased, trimmed, or null when it is not a symbol. */
function normaliseSymbol(raw: string): string | null {
  const symbol = raw.trim().toUpperCase()
  return SYMBOL_PATTERN.test(symbol) ? symbol : null
}

/** Validated, upper-cased, and with duplicates collapsed to their first occurrence. */
function cleanSymbols(raw: string[], field: string, details: ErrorDetail[]): string[] {
  const seen = new Set<string>()
  raw.forEach((item, index) => {
    const symbol = normaliseSymbol(item)
    if (symbol === null) details.push({ field: `${field}.${index}`, message: 'must be 1 to 15 of A-Z 0-9 . -' })
    else seen.add(symbol)
  })
  return [...seen]
}

function cleanName(raw: string, details: ErrorDetail[]): string {
  const name = cleanLabel(raw, NAME_MAX)
  if (name.problem) details.push({ field: 'name', message: name.problem })
  return name.value
}

/**
 * Watchlists of one owner: a user's own, whose owner is always the caller's token subject, never
 * the body; or an organisation's, which its members read with `watchlists:read` and change with
 * `watchlists:write` (docs/authorization.md). A list the caller may not see (another user's, or an
 * organisation's they are not in) is indistinguishable from a missing one (NOT_FOUND), on every
 * verb; a member without the permission is FORBIDDEN.
 *
 * The caller's own lists are tried first, with the statements they always had, so the bearer path
 * of a user's own lists costs no read more than before; an organisation's list costs a read of it
 * and, without the token's active organisation, of the caller's membership.
 */
/**
 * A member whose account goes hands the organisation's lists they made to `heir`, another member, so
 * that the organisation keeps them (each list row names its maker, and goes with the maker's
 * account). They move after the heir's own lists, which keeps every maker's positions distinct; in
 * the organisation's listing they come last. Runs in the deletion's transaction, with the
 * organisation's row locked.
 */
export async function handOverOrganizationLists(trx: Kysely<Database>, organizationId: string, from: string, heir: string): Promise<void> {
  const moving = await trx.selectFrom('watchlists').select('id').where('organization_id', '=', organizationId).where('user_id', '=', from).orderBy('position').execute()
  if (moving.length === 0) return
  const top = await trx.selectFrom('watchlists').select((eb) => eb.fn.max<number>('position').as('top')).where('user_id', '=', heir).executeTakeFirst()
  let position = Number(top?.top ?? 0)
  for (const { id } of moving) {
    position += 1
    await trx.updateTable('watchlists').set({ user_id: heir, position }).where('id', '=', id).execute()
  }
}

export class WatchlistService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly cursors: CursorCodec,
  ) {}

  private get kysely() {
    return this.db.kysely
  }

  private static assertId(id: string): void {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
  }

  /** Every list of the user, in order (the data export). */
  async allOf(userId: string): Promise<WatchlistView[]> {
    return (await watchlists.allOf(this.kysely, userId)).map(view)
  }

  async list(caller: Caller, query: { limit?: number; cursor?: string; organization_id?: string }) {
    const limit = query.limit ?? 20
    const organizationId = query.organization_id
    if (organizationId !== undefined) await this.require(this.kysely, caller, organizationId, 'watchlists:read')
    // A cursor is bound to the listing it came from: the user's own, or one organisation's for this user.
    const scope = organizationId === undefined ? caller.userId : `${caller.userId} ${organizationId}`
    let after = 0
    if (query.cursor !== undefined) {
      const position = this.cursors.open(scope, query.cursor)?.p
      if (!Number.isSafeInteger(position) || (position as number) < 0) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'cursor', message: 'is not a cursor this service issued' }] })
      after = position as number
    }
    // One extra row tells whether another page exists without a count query.
    const rows = organizationId === undefined
      ? await watchlists.readPage(this.db, caller.userId, after, limit + 1)
      : await watchlists.pageIn(this.kysely, organizationId, after, limit + 1)
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return {
      watchlists: page.map(view),
      next_cursor: rows.length > limit && last ? this.cursors.seal(scope, { p: last.position }) : null,
    }
  }

  async create(caller: Caller, input: { name: string; symbols?: string[]; organization_id?: string | null }): Promise<WatchlistView> {
    const userId = caller.userId
    const details: ErrorDetail[] = []
    const name = cleanName(input.name, details)
    const symbols = cleanSymbols(input.symbols ?? [], 'symbols', details)
    throwIfProblems(details)
    const organizationId = input.organization_id ?? null
    const now = this.clock.now()
    const row = await this.kysely.transaction().execute(async (trx) => {
      if (organizationId !== null) {
        // The membership as this transaction sees it; then the organisation's lock, which also
        // finds it gone if it was deleted meanwhile (its lists would go with it).
        await this.require(trx, caller, organizationId, 'watchlists:write')
        if (!(await watchlists.lockOrganization(trx, organizationId))) throw new AppError('NOT_FOUND')
      }
      // Serialises this user's creations, so two racing requests cannot both pass the limit.
      if (!(await watchlists.lockOwner(trx, userId))) throw new AppError('INVALID_TOKEN')
      const { count, maxPosition } = organizationId === null
        ? await watchlists.countAndMaxPosition(trx, userId)
        : await watchlists.countAndMaxPositionIn(trx, organizationId, userId)
      if (organizationId === null && count >= LISTS_MAX) {
        throw new AppError('LIMIT_EXCEEDED', { message: `A user can have at most ${LISTS_MAX} watchlists.` })
      }
      if (organizationId !== null && count >= ORGANIZATION_LISTS_MAX) {
        throw new AppError('LIMIT_EXCEEDED', { message: `An organisation can have at most ${ORGANIZATION_LISTS_MAX} watchlists.` })
      }
      const created: WatchlistRow = {
        id: randomUUID(),
        user_id: userId,
        organization_id: organizationId,
        position: maxPosition + 1,
        name,
        symbols: JSON.stringify(symbols),
        created_at: now,
        updated_at: now,
      }
      await watchlists.insert(trx, created)
      return created
    })
    return view(row)
  }

  async get(caller: Caller, id: string): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const row = await watchlists.findById(this.kysely, id)
    if (!row) throw new AppError('NOT_FOUND')
    if (row.organization_id === null) {
      if (row.user_id !== caller.userId) throw new AppError('NOT_FOUND')
    } else {
      await this.require(this.kysely, caller, row.organization_id, 'watchlists:read')
    }
    return view(row)
  }

  /** Writes only the members given, in one statement: concurrent PATCHes of different members both land. */
  async update(caller: Caller, id: string, input: { name?: string; symbols?: string[] }): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const details: ErrorDetail[] = []
    const changes: { name?: string; symbols?: string } = {}
    if (input.name !== undefined) changes.name = cleanName(input.name, details)
    if (input.symbols !== undefined) changes.symbols = JSON.stringify(cleanSymbols(input.symbols, 'symbols', details))
    throwIfProblems(details)
    const now = this.clock.now()
    const own = await watchlists.update(this.kysely, { user: caller.userId }, id, changes, now)
    if (own) return view(own)
    const owner = await this.sharedOwner(caller, id, 'watchlists:write')
    const row = await watchlists.update(this.kysely, owner, id, changes, now)
    if (!row) throw new AppError('NOT_FOUND')
    return view(row)
  }

  async remove(caller: Caller, id: string): Promise<void> {
    WatchlistService.assertId(id)
    if (await watchlists.delete(this.kysely, { user: caller.userId }, id)) return
    const owner = await this.sharedOwner(caller, id, 'watchlists:write')
    if (!(await watchlists.delete(this.kysely, owner, id))) throw new AppError('NOT_FOUND')
  }

  /** Read-modify-write under the list's row lock: racing additions neither vanish nor pass 200. */
  async addSymbol(caller: Caller, id: string, rawSymbol: string): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const symbol = normaliseSymbol(rawSymbol)
    if (symbol === null) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'symbol', message: 'must be 1 to 15 of A-Z 0-9 . -' }] })
    return this.changeSymbols(caller, id, (symbols) => {
      if (symbols.includes(symbol)) return null
      if (symbols.length >= SYMBOLS_MAX) {
        throw new AppError('LIMIT_EXCEEDED', { message: `A watchlist can hold at most ${SYMBOLS_MAX} symbols.` })
      }
      return [...symbols, symbol]
    })
  }

  async removeSymbol(caller: Caller, id: string, rawSymbol: string): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const symbol = normaliseSymbol(rawSymbol)
    if (symbol === null) throw new AppError('NOT_FOUND')
    return this.changeSymbols(caller, id, (symbols) => {
      if (!symbols.includes(symbol)) throw new AppError('NOT_FOUND', { message: 'The symbol is not in this watchlist.' })
      return symbols.filter((s) => s !== symbol)
    })
  }

  /** `change` returns the new list, or null for "nothing to do". The caller's own list first, as for update. */
  private async changeSymbols(caller: Caller, id: string, change: (symbols: string[]) => string[] | null): Promise<WatchlistView> {
    const own = await this.changeSymbolsOf({ user: caller.userId }, id, change)
    if (own) return view(own)
    const row = await this.changeSymbolsOf(await this.sharedOwner(caller, id, 'watchlists:write'), id, change)
    if (!row) throw new AppError('NOT_FOUND')
    return view(row)
  }

  private async changeSymbolsOf(owner: WatchlistOwner, id: string, change: (symbols: string[]) => string[] | null): Promise<WatchlistRow | null> {
    const now = this.clock.now()
    return this.kysely.transaction().execute(async (trx) => {
      const current = await watchlists.lockForUpdate(trx, owner, id, now)
      if (!current) return null
      const next = change(JSON.parse(current.symbols) as string[])
      if (next === null) return current
      return (await watchlists.update(trx, owner, id, { symbols: JSON.stringify(next) }, now))!
    })
  }

  /**
   * The owner of a list that is not the caller's own: its organisation, when the caller holds
   * `wanted` there. Read before any transaction (on SQLite the pool is the transaction's one connection).
   */
  private async sharedOwner(caller: Caller, id: string, wanted: string): Promise<WatchlistOwner> {
    const row = await watchlists.findById(this.kysely, id)
    if (!row || row.organization_id === null) throw new AppError('NOT_FOUND')
    await this.require(this.kysely, caller, row.organization_id, wanted)
    return { organization: row.organization_id }
  }

  /**
   * The caller holds `wanted` in the organisation: NOT_FOUND when they are not a member (the
   * organisation's existence is not theirs to learn), FORBIDDEN when their roles there lack it.
   */
  private async require(db: Executor, caller: Caller, organizationId: string, wanted: string): Promise<void> {
    if (!isUuid(organizationId)) throw new AppError('NOT_FOUND')
    const held = await permissionsIn(db, caller, organizationId)
    if (held === null) throw new AppError('NOT_FOUND')
    if (!grants(held, wanted, true)) throw new AppError('FORBIDDEN')
  }
}

/**
 * The caller's permissions in an organisation, or null when not a member. A token whose active
 * organisation it is says them (current: a change to the membership makes the token TOKEN_EXPIRED
 * within the revocation bound); otherwise (no active organisation, another one, or a provider
 * token, which never has one) they are read from the membership and the roles catalogue.
 */
async function permissionsIn(db: Executor, caller: Caller, organizationId: string): Promise<readonly string[] | null> {
  if (caller.organization?.id === organizationId) return caller.organization.permissions
  const stored = await claimsStore.membershipRoles(db, organizationId, caller.userId)
  if (stored === null) return null
  const roles = words(stored)
  const catalogue = await claimsStore.permissionsOf(db, roles)
  return unionOf(roles, (role) => (catalogue.has(role) ? words(catalogue.get(role)!) : undefined))
}

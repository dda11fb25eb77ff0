import { randomUUID } from 'node:crypto'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { watchlists, type WatchlistRow } from '../db/repositories.ts'
import { AppError, type ErrorDetail } from '../errors.ts'
import { cleanLabel, isUuid } from '../text.ts'
import { throwIfProblems } from '../auth/input.ts'
import type { CursorCodec } from '../cursor.ts'
import { LISTS_MAX, NAME_MAX, SYMBOL_PATTERN, SYMBOLS_MAX } from './schemas.ts'

export interface WatchlistView {
  id: string
  name: string
  symbols: string[]
  created_at: string
  updated_at: string
}

function view(row: WatchlistRow): WatchlistView {
  return {
    id: row.id,
    name: row.name,
    symbols: JSON.parse(row.symbols) as string[],
    created_at: new Date(row.created_at).toISOString(),
    updated_at: new Date(row.updated_at).toISOString(),
  }
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
 * Watchlists of one owner: the owner is always the caller's token subject, never the body. Another
 * user's list is indistinguishable from a missing one (NOT_FOUND), on every verb.
 */
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

  async list(userId: string, query: { limit?: number; cursor?: string }) {
    const limit = query.limit ?? 20
    let after = 0
    if (query.cursor !== undefined) {
      const position = this.cursors.open(userId, query.cursor)?.p
      if (!Number.isSafeInteger(position) || (position as number) < 0) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'cursor', message: 'is not a cursor this service issued' }] })
      after = position as number
    }
    // One extra row tells whether another page exists without a count query.
    const rows = await watchlists.readPage(this.db, userId, after, limit + 1)
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return {
      watchlists: page.map(view),
      next_cursor: rows.length > limit && last ? this.cursors.seal(userId, { p: last.position }) : null,
    }
  }

  async create(userId: string, input: { name: string; symbols?: string[] }): Promise<WatchlistView> {
    const details: ErrorDetail[] = []
    const name = cleanName(input.name, details)
    const symbols = cleanSymbols(input.symbols ?? [], 'symbols', details)
    throwIfProblems(details)
    const now = this.clock.now()
    const row = await this.kysely.transaction().execute(async (trx) => {
      // Serialises this user's creations, so two racing requests cannot both pass the limit.
      if (!(await watchlists.lockOwner(trx, userId))) throw new AppError('INVALID_TOKEN')
      const { count, maxPosition } = await watchlists.countAndMaxPosition(trx, userId)
      if (count >= LISTS_MAX) {
        throw new AppError('LIMIT_EXCEEDED', { message: `A user can have at most ${LISTS_MAX} watchlists.` })
      }
      const created: WatchlistRow = {
        id: randomUUID(),
        user_id: userId,
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

  async get(userId: string, id: string): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const row = await watchlists.find(this.kysely, userId, id)
    if (!row) throw new AppError('NOT_FOUND')
    return view(row)
  }

  /** Writes only the members given, in one statement: concurrent PATCHes of different members both land. */
  async update(userId: string, id: string, input: { name?: string; symbols?: string[] }): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const details: ErrorDetail[] = []
    const changes: { name?: string; symbols?: string } = {}
    if (input.name !== undefined) changes.name = cleanName(input.name, details)
    if (input.symbols !== undefined) changes.symbols = JSON.stringify(cleanSymbols(input.symbols, 'symbols', details))
    throwIfProblems(details)
    const row = await watchlists.update(this.kysely, userId, id, changes, this.clock.now())
    if (!row) throw new AppError('NOT_FOUND')
    return view(row)
  }

  async remove(userId: string, id: string): Promise<void> {
    WatchlistService.assertId(id)
    if (!(await watchlists.delete(this.kysely, userId, id))) throw new AppError('NOT_FOUND')
  }

  /** Read-modify-write under the list's row lock: racing additions neither vanish nor pass 200. */
  async addSymbol(userId: string, id: string, rawSymbol: string): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const symbol = normaliseSymbol(rawSymbol)
    if (symbol === null) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'symbol', message: 'must be 1 to 15 of A-Z 0-9 . -' }] })
    return this.changeSymbols(userId, id, (symbols) => {
      if (symbols.includes(symbol)) return null
      if (symbols.length >= SYMBOLS_MAX) {
        throw new AppError('LIMIT_EXCEEDED', { message: `A watchlist can hold at most ${SYMBOLS_MAX} symbols.` })
      }
      return [...symbols, symbol]
    })
  }

  async removeSymbol(userId: string, id: string, rawSymbol: string): Promise<WatchlistView> {
    WatchlistService.assertId(id)
    const symbol = normaliseSymbol(rawSymbol)
    if (symbol === null) throw new AppError('NOT_FOUND')
    return this.changeSymbols(userId, id, (symbols) => {
      if (!symbols.includes(symbol)) throw new AppError('NOT_FOUND', { message: 'The symbol is not in this watchlist.' })
      return symbols.filter((s) => s !== symbol)
    })
  }

  /** `change` returns the new list, or null for "nothing to do". */
  private async changeSymbols(userId: string, id: string, change: (symbols: string[]) => string[] | null): Promise<WatchlistView> {
    const now = this.clock.now()
    const row = await this.kysely.transaction().execute(async (trx) => {
      const current = await watchlists.lockForUpdate(trx, userId, id, now)
      if (!current) throw new AppError('NOT_FOUND')
      const next = change(JSON.parse(current.symbols) as string[])
      if (next === null) return current
      return (await watchlists.update(trx, userId, id, { symbols: JSON.stringify(next) }, now))!
    })
    return view(row)
  }
}

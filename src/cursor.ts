import { createHmac, timingSafeEqual } from 'node:crypto'
import { AppError } from './errors.ts'

/**
 * Opaque pagination cursors: where the last page ended, bound to a scope (the user a watchlist
 * cursor was issued to, the admin listing and its filters) and signed with a service secret, so a
 * cursor the service did not issue, or one issued for another scope, is refused instead of trusted.
 */
export class CursorCodec {
  constructor(private readonly secret: string) {}

  private mac(payload: string, scope: string): Buffer {
    return createHmac('sha256', this.secret).update(`${scope}\n${payload}`).digest().subarray(0, 16)
  }

  seal(scope: string, value: Record<string, unknown>): string {
    const payload = Buffer.from(JSON.stringify(value)).toString('base64url')
    return `${payload}.${this.mac(payload, scope).toString('base64url')}`
  }

  /** The sealed object, or null when the cursor is not one this service issued for this scope. */
  open(scope: string, cursor: string): Record<string, unknown> | null {
    const [payload, signature, ...rest] = cursor.split('.')
    if (!payload || !signature || rest.length > 0) return null
    const given = Buffer.from(signature, 'base64url')
    const expected = this.mac(payload, scope)
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null
    try {
      const value = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as unknown
      return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null
    } catch {
      return null
    }
  }
}

/** A keyset position: a time and an id to break ties. */
export interface TimeId {
  t: number
  id: string
}

export function timeIdOf(value: Record<string, unknown> | null): TimeId | null {
  if (!value || !Number.isSafeInteger(value.t) || typeof value.id !== 'string' || value.id.length > 64) return null
  return { t: value.t as number, id: value.id }
}

/**
 * One page of a keyset listing, as the admin API pages users and events: opens the cursor for
 * `scope` (a listing and its filter), fetches one row more than asked to know whether another page
 * exists, and seals the next cursor. Positions are (time, id) unless `openPosition` reads another
 * shape (the address order of a prefix search). A cursor not issued for this scope is
 * VALIDATION_ERROR.
 */
export async function keysetPage<Row, Position extends object = TimeId>(
  cursors: CursorCodec,
  scope: string,
  query: { limit?: number; cursor?: string },
  fetch: (after: Position | null, limit: number) => Promise<Row[]>,
  positionOf: (row: Row) => Position,
  openPosition: (value: Record<string, unknown> | null) => Position | null = timeIdOf as never,
): Promise<{ rows: Row[]; next_cursor: string | null }> {
  const limit = query.limit ?? 20
  let after: Position | null = null
  if (query.cursor !== undefined) {
    after = openPosition(cursors.open(scope, query.cursor))
    if (!after) throw new AppError('VALIDATION_ERROR', { details: [{ field: 'cursor', message: 'is not a cursor this service issued for this query' }] })
  }
  const rows = await fetch(after, limit + 1)
  const page = rows.slice(0, limit)
  const last = page[page.length - 1]
  return { rows: page, next_cursor: rows.length > limit && last ? cursors.seal(scope, { ...positionOf(last) } as Record<string, unknown>) : null }
}

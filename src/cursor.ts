import { createHmac, timingSafeEqual } from 'node:crypto'

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

/** A keyset position of (time, id), as the admin listings use. */
export function timeIdOf(value: Record<string, unknown> | null): { t: number; id: string } | null {
  if (!value || !Number.isSafeInteger(value.t) || typeof value.id !== 'string' || value.id.length > 64) return null
  return { t: value.t as number, id: value.id }
}

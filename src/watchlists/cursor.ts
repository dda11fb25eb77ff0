import { createHmac, timingSafeEqual } from 'node:crypto'

/**
 * Opaque pagination cursors: the last position seen, bound to the user it was issued to and
 * signed with a service secret, so a cursor the service did not issue (or another user's) is
 * refused instead of being trusted.
 */
export class CursorCodec {
  constructor(private readonly secret: string) {}

  private mac(payload: string, userId: string): Buffer {
    return createHmac('sha256', this.secret).update(`${userId}\n${payload}`).digest().subarray(0, 16)
  }

  encode(userId: string, position: number): string {
    const payload = Buffer.from(JSON.stringify({ p: position })).toString('base64url')
    return `${payload}.${this.mac(payload, userId).toString('base64url')}`
  }

  /** The position, or null when the cursor is not one this service issued to this user. */
  decode(userId: string, cursor: string): number | null {
    const [payload, signature, ...rest] = cursor.split('.')
    if (!payload || !signature || rest.length > 0) return null
    const given = Buffer.from(signature, 'base64url')
    const expected = this.mac(payload, userId)
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null
    try {
      const { p } = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { p?: unknown }
      return Number.isSafeInteger(p) && (p as number) >= 0 ? (p as number) : null
    } catch {
      return null
    }
  }
}

import { randomUUID } from 'node:crypto'

const CONTROL = /[\p{Cc}\u2028\u2029]/u

/**
 * A human-readable label (a name, a title): trimmed, 1..max code points, no control or line
 * separator characters. Returns the cleaned value and what is wrong with it, if anything.
 */
export function cleanLabel(raw: string, max: number): { value: string; problem: string | null } {
  const value = raw.trim()
  if (value.length === 0) return { value, problem: 'is required' }
  if ([...value].length > max) return { value, problem: `must be at most ${max} characters` }
  if (CONTROL.test(value)) return { value, problem: 'must not contain control characters' }
  return { value, problem: null }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** A canonical UUID; ids from paths and tokens are checked with this before reaching storage. */
export function isUuid(value: string): boolean {
  return UUID.test(value)
}

/**
 * A UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then random bits. Rows keyed by it
 * are inserted at the end of their primary-key index instead of at a random page, so a commit of
 * many audit rows writes a few pages, not one page a row. For append-only records whose time is
 * stored beside them anyway (it reveals nothing more); never for anything that must be unguessable.
 */
export function timeOrderedUuid(now: number = Date.now()): string {
  // A version 4 UUID's random bits (node caches their entropy), behind the time.
  const time = Math.trunc(now).toString(16).padStart(12, '0')
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`
}

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

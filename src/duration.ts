/**
 * A span of time as operators type it, in the CLI (`--expires 90d`, `--since 24h`) and the
 * console's forms alike: a whole number of minutes, hours or days (at most six digits), in ms;
 * null for anything else.
 */
const DURATION = /^(\d{1,6})([mhd])$/
const UNIT_MS = { m: 60_000, h: 3600_000, d: 86_400_000 } as const

export function durationMs(value: string): number | null {
  const match = DURATION.exec(value)
  return match ? Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS] : null
}

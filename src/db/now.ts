import { sql } from 'kysely'

/**
 * Milliseconds since the epoch by the database's clock, as an SQL expression. Used where several
 * instances must agree on time (the change feed), so no instance's own clock is trusted for it.
 */
export function databaseNowMs(engine: 'sqlite' | 'postgres') {
  return engine === 'postgres'
    ? sql<number>`(floor(extract(epoch from clock_timestamp()) * 1000))::bigint`
    : sql<number>`(cast((julianday('now') - 2440587.5) * 86400000 as integer))`
}

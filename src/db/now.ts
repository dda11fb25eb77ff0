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

/**
 * The same clock, fixed for the length of one statement, for comparisons in a WHERE clause: an
 * index can serve `at >= <this> - window`, where PostgreSQL's clock_timestamp() (volatile, read
 * anew for every row) ruled the index out and made the feed's poll and prune walk the table. A
 * statement takes microseconds, so the difference from the moving clock does not matter here.
 */
export function databaseStatementNowMs(engine: 'sqlite' | 'postgres') {
  return engine === 'postgres'
    ? sql<number>`(floor(extract(epoch from statement_timestamp()) * 1000))::bigint`
    : databaseNowMs(engine)
}

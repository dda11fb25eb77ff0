import { CompiledQuery, sql, type Compilable, type Kysely } from 'kysely'
import type { Db } from './index.ts'
import type { Database } from './schema.ts'
import { setBounded } from '../bounded-map.ts'

type Slot<Args> = { arg: keyof Args } | { value: unknown }
interface Plan<Args> {
  sql: string
  slots: Slot<Args>[]
}

export interface HotQueryOptions<Args> {
  /**
   * Values written into the SQL text instead of bound, one plan per distinct value; safe integers
   * only. For LIMIT: SQLite re-prepares a statement whose LIMIT is a bound parameter every time a
   * new value is bound (about 10 us a query here), while a literal LIMIT is prepared once.
   */
  literal?: (keyof Args)[]
}

/** A bound on the plans one query keeps per dialect (one per distinct literal value). */
const PLANS_MAX = 128

export interface HotQuery<Args, Row> {
  /** On this executor: the pool, or a transaction. */
  (db: Kysely<Database>, args: Args): Promise<Row[]>
  /**
   * Outside any transaction, over committed data only: on SQLite at once, on its reader connection
   * (Db.readCommitted); elsewhere as above on the pool. For reads on the request path.
   */
  committed(db: Db, args: Args): Row[] | Promise<Row[]>
}

/**
 * A query on the request path, built and compiled to SQL once per database and afterwards
 * only given new values: no query building or compiling per request (with statement reuse, the
 * database then only binds and runs it). `build` names each value with `arg('name')`; the
 * compiled query's parameters are matched back to those names, and any other value the builder
 * put in stays as it was.
 */
export function hotQuery<Args extends Record<string, unknown>, Row>(
  build: (db: Kysely<Database>, arg: <K extends keyof Args>(name: K) => Args[K]) => Compilable<Row>,
  options: HotQueryOptions<Args> = {},
): HotQuery<Args, Row> {
  const literal = new Set(options.literal ?? [])
  // Keyed by the dialect's adapter, which a transaction shares with the handle it came from: the
  // SQL depends on the dialect only, so a plan made outside a transaction serves inside one.
  const plans = new WeakMap<object, Map<string, Plan<Args>>>()

  const literalValue = (args: Args, name: keyof Args): number => {
    const value = args[name]
    if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new TypeError(`hotQuery: ${String(name)} must be a safe integer`)
    return value
  }
  const plan = (db: Kysely<Database>, args: Args): Plan<Args> => {
    const markers = new Map<string, keyof Args>()
    const arg = <K extends keyof Args>(name: K): Args[K] => {
      if (literal.has(name)) return sql.lit(literalValue(args, name)) as unknown as Args[K]
      const marker = `\u0000arg:${String(name)}`
      markers.set(marker, name)
      return marker as Args[K]
    }
    const compiled = build(db, arg).compile()
    const slots = compiled.parameters.map((value): Slot<Args> => {
      const name = typeof value === 'string' ? markers.get(value) : undefined
      return name === undefined ? { value } : { arg: name }
    })
    return { sql: compiled.sql, slots }
  }

  const bound = (db: Kysely<Database>, args: Args): CompiledQuery => {
    const dialect = db.getExecutor().adapter
    let byLiterals = plans.get(dialect)
    if (!byLiterals) {
      byLiterals = new Map()
      plans.set(dialect, byLiterals)
    }
    const key = literal.size === 0 ? '' : [...literal].map((name) => literalValue(args, name)).join(',')
    let compiled = byLiterals.get(key)
    if (!compiled) {
      compiled = plan(db, args)
      setBounded(byLiterals, key, compiled, PLANS_MAX)
    }
    const parameters = compiled.slots.map((slot) => ('arg' in slot ? args[slot.arg] : slot.value))
    return CompiledQuery.raw(compiled.sql, parameters)
  }

  const run = async (db: Kysely<Database>, args: Args): Promise<Row[]> => (await db.executeQuery<Row>(bound(db, args))).rows
  return Object.assign(run, {
    committed(db: Db, args: Args): Row[] | Promise<Row[]> {
      if (!db.readCommitted) return run(db.kysely, args)
      const query = bound(db.kysely, args)
      return db.readCommitted(query.sql, query.parameters) as Row[]
    },
  })
}

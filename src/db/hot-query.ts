import { CompiledQuery, type Compilable, type Kysely } from 'kysely'
import type { Database } from './schema.ts'

type Slot<Args> = { arg: keyof Args } | { value: unknown }

/**
 * A query on the request path, built and compiled to SQL once per database handle and afterwards
 * only given new values: no query building or compiling per request (with statement reuse, the
 * database then only binds and runs it). `build` names each value with `arg('name')`; the
 * compiled query's parameters are matched back to those names, and any other value the builder
 * put in stays as it was.
 */
export function hotQuery<Args extends Record<string, unknown>, Row>(
  build: (db: Kysely<Database>, arg: <K extends keyof Args>(name: K) => Args[K]) => Compilable<Row>,
): (db: Kysely<Database>, args: Args) => Promise<Row[]> {
  const plans = new WeakMap<Kysely<Database>, { sql: string; slots: Slot<Args>[] }>()
  const plan = (db: Kysely<Database>) => {
    const markers = new Map<string, keyof Args>()
    const arg = <K extends keyof Args>(name: K): Args[K] => {
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
  return async (db, args) => {
    let compiled = plans.get(db)
    if (!compiled) {
      compiled = plan(db)
      plans.set(db, compiled)
    }
    const parameters = compiled.slots.map((slot) => ('arg' in slot ? args[slot.arg] : slot.value))
    return (await db.executeQuery<Row>(CompiledQuery.raw(compiled.sql, parameters))).rows
  }
}

import { sql, type Kysely } from 'kysely'

/**
 * Moving in (docs/migrating.md): the accounts whose password is still an imported hash (not
 * Portcullis's argon2id, not `!` for none or `!legacy` for lazy migration), found at once by this partial index however many accounts
 * there are. While any is left, every password check also spends the check of one such hash
 * (src/imports/timing.ts), so a login's time does not tell an imported account from another or
 * from an address without one. The predicate is IMPORTED_HASH in src/db/repositories.ts, word for
 * word (both engines use a partial index only for a query that repeats its condition).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index users_imported_hash_idx on users (id) where password_hash not like '$argon2id$%' and password_hash not like '!%'`.execute(db)
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index users_imported_hash_idx`.execute(db)
}

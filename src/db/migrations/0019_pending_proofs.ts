import { sql, type Kysely } from 'kysely'

/**
 * Pending proofs are judged at their point of use against the account's credential epoch and, when
 * a session asked for them, that session (src/auth/pending-proofs.ts). The tables that lacked one
 * gain it. Rows already waiting take the account's epoch of now, so a link mailed before the upgrade
 * still works; webauthn_challenges' session is the `binding` of the purposes a session asked for.
 * A change of address also gains the hash of the link in the notice to the old address that
 * cancels it (null for a change asked for before this migration: its notice had no such link).
 */
const EPOCH_ADDED = ['one_time_tokens', 'webauthn_challenges', 'mfa_factors', 'oidc_flows', 'email_changes'] as const
const SESSION_ADDED = ['webauthn_challenges', 'mfa_factors'] as const

export async function up(db: Kysely<any>): Promise<void> {
  for (const table of EPOCH_ADDED) {
    await db.schema.alterTable(table).addColumn('credential_epoch', 'integer', (c) => c.notNull().defaultTo(0)).execute()
    await sql`update ${sql.table(table)} set credential_epoch = coalesce((select users.credential_epoch from users where users.id = ${sql.ref(`${table}.user_id`)}), 0) where ${sql.ref(`${table}.user_id`)} is not null`.execute(db)
  }
  for (const table of SESSION_ADDED) await db.schema.alterTable(table).addColumn('session_id', 'text').execute()
  await sql`update webauthn_challenges set session_id = binding where purpose in ('register', 'step_up')`.execute(db)
  await db.schema.alterTable('email_changes').addColumn('cancel_hash', 'text').execute()
  await db.schema.createIndex('email_changes_cancel_idx').on('email_changes').column('cancel_hash').execute()
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('email_changes_cancel_idx').execute()
  await db.schema.alterTable('email_changes').dropColumn('cancel_hash').execute()
  for (const table of SESSION_ADDED) await db.schema.alterTable(table).dropColumn('session_id').execute()
  for (const table of EPOCH_ADDED) await db.schema.alterTable(table).dropColumn('credential_epoch').execute()
}

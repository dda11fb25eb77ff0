import { sql, type Kysely } from 'kysely'

/**
 * Indexes for a database of millions of users: every admin filter and every retention delete is an
 * index range, never a walk of a table that grows with users (test/integration/query-plans.test.ts
 * keeps it so). The partial indexes hold only the rows their filter selects, and their conditions
 * use literals, which the admin queries repeat, so both engines can prove a query implies them.
 */
export function scale(engine: 'sqlite' | 'postgres') {
  return {
    async up(db: Kysely<any>): Promise<void> {
      // Admin user listings by state, oldest first.
      await db.schema.createIndex('users_disabled_created_idx').on('users').columns(['created_at', 'id']).where(sql.ref('status'), '=', sql.lit('disabled')).execute()
      await db.schema
        .createIndex('users_unverified_created_idx')
        .on('users')
        .columns(['created_at', 'id'])
        .where(sql.ref('status'), '=', sql.lit('active'))
        .where(sql.ref('email_verified_at'), 'is', null)
        .execute()
      await db.schema
        .createIndex('users_active_created_idx')
        .on('users')
        .columns(['created_at', 'id'])
        .where(sql.ref('status'), '=', sql.lit('active'))
        .where(sql.ref('email_verified_at'), 'is not', null)
        .execute()
      if (engine === 'postgres') {
        // The address prefix search is a byte-wise range; under a database collation other than C
        // the unique index orders addresses differently, so the range gets a C-ordered index.
        await sql`create index users_email_bytes_idx on users (email collate "C")`.execute(db)
      }

      // Audit events by type, newest first; by user with the id as the tie-breaker of the keyset.
      await db.schema.createIndex('audit_events_type_at_id_idx').on('audit_events').columns(['type', 'at', 'id']).execute()
      await db.schema.createIndex('audit_events_user_at_id_idx').on('audit_events').columns(['user_id', 'at', 'id']).execute()
      await db.schema.dropIndex('audit_events_user_at_idx').execute()

      // Retention: expired sessions and one-time tokens, revoked sessions, closed mail.
      await db.schema.createIndex('sessions_expires_at_idx').on('sessions').column('expires_at').execute()
      await db.schema.createIndex('sessions_revoked_at_idx').on('sessions').column('revoked_at').where('revoked_at', 'is not', null).execute()
      await db.schema.createIndex('one_time_tokens_expires_at_idx').on('one_time_tokens').column('expires_at').execute()
      await db.schema.createIndex('mail_outbox_failed_at_idx').on('mail_outbox').column('failed_at').where('failed_at', 'is not', null).execute()
      // Export and deletion find a user's mail.
      await db.schema.createIndex('mail_outbox_user_id_idx').on('mail_outbox').column('user_id').execute()
    },
    async down(db: Kysely<any>): Promise<void> {
      for (const name of ['mail_outbox_user_id_idx', 'mail_outbox_failed_at_idx', 'one_time_tokens_expires_at_idx', 'sessions_revoked_at_idx', 'sessions_expires_at_idx', 'audit_events_type_at_id_idx', 'users_active_created_idx', 'users_unverified_created_idx', 'users_disabled_created_idx']) {
        await db.schema.dropIndex(name).execute()
      }
      await db.schema.createIndex('audit_events_user_at_idx').on('audit_events').columns(['user_id', 'at']).execute()
      await db.schema.dropIndex('audit_events_user_at_id_idx').execute()
      if (engine === 'postgres') await sql`drop index users_email_bytes_idx`.execute(db)
    },
  }
}

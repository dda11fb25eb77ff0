import { sql, type Kysely } from 'kysely'

/**
 * A release before this one put the e-mailed sign-in's 6-digit code in the mail's subject (`Your
 * <app> sign-in code: 123456`) and stored subjects in the clear, so a copy of the database could
 * sign someone in (docs/SECURITY.md, the third review). Subjects are now sealed when queued, and
 * waiting mail is sealed at start (src/mail/queue.ts, sealWaiting); the records of mail already
 * sent keep their subject, and the start cannot seal them without reading the whole table. So the
 * code is cut from those subjects here, once: what is left (`Your <app> sign-in code`) is exactly
 * today's subject. No key is needed, and nothing else in a record was ever a secret.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db
    .updateTable('mail_outbox')
    .set({ subject: sql`substr(subject, 1, length(subject) - 8)` })
    .where('kind', '=', 'sign_in_code')
    .where('subject', 'not like', 'enc:v1:%')
    .where('subject', 'like', '%: ______')
    .execute()
}

/** The codes are gone for good, and a subject without one is right for the earlier release too. */
export async function down(): Promise<void> {}

import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'
import { IMPORT_BATCH } from './service.ts'

/**
 * POST /admin/users/import (docs/migrating.md). A line is checked by the service, not here, so one
 * bad line is reported by its place and reason while the others go on; this schema documents it.
 */
export const ImportLine = Type.Object({
  email: Type.String({ description: 'Normalised as at registration; an address that exists is skipped (email_exists), never overwritten' }),
  email_verified: Type.Optional(Type.Boolean()),
  full_name: Type.Optional(Type.String({ description: 'The address\'s local part when absent' })),
  user_id: Type.Optional(Type.String({ format: 'uuid', description: 'Kept as the account\'s id' })),
  created_at: Type.Optional(Type.Union([Type.String({ format: 'date-time' }), Type.Integer({ description: 'milliseconds since 1970' })])),
  disabled: Type.Optional(Type.Boolean({ description: 'Imported disabled (reason suspended)' })),
  password_hash: Type.Optional(Type.Union([
    Type.String({ description: 'bcrypt ($2a$, $2b$, $2y$, cost at most 14), argon2id or argon2i PHC, scrypt PHC (N at most 2^17), PBKDF2 (Django pbkdf2_sha256$, PHC $pbkdf2-sha256$/$pbkdf2-sha512$, at most 1,000,000 iterations)' }),
    Type.Object({ algorithm: Type.Literal('firebase-scrypt'), hash: Type.String(), salt: Type.String() }, { description: 'Firebase\'s modified scrypt, checked with FIREBASE_* (the project\'s parameters)' }),
  ])),
  password: Type.Optional(Type.Literal('legacy', { description: 'Lazy migration: the first sign-in asks LEGACY_VERIFY_URL' })),
  roles: Type.Optional(Type.Array(Type.String(), { description: 'Roles of the catalogue' })),
  app_metadata: Type.Optional(Type.Object({}, { additionalProperties: true })),
  totp_secret: Type.Optional(Type.String({ description: 'Base32; becomes a confirmed TOTP factor (sealed)' })),
  identities: Type.Optional(Type.Array(Type.Object({ provider: Type.String({ description: 'A configured provider (OIDC_PROVIDERS)' }), subject: Type.String() }))),
}, { additionalProperties: false })

export const ImportBody = Body({
  users: Type.Array(Type.Unknown(), {
    minItems: 1,
    maxItems: IMPORT_BATCH,
    description: `At most ${IMPORT_BATCH} lines, each as ImportLine says; a line that is not is skipped with its reason, the others go on`,
  }),
  dry_run: Type.Optional(Type.Boolean({ description: 'Check every line (and what exists) and write nothing' })),
  events: Type.Optional(Type.Boolean({ description: 'Write a user.created webhook event for each account (off by default)' })),
})

export const ImportResult = Envelope(Type.Object({
  imported: Type.Integer({ description: 'Accounts made (with dry_run: that would be made)' }),
  skipped: Type.Array(Type.Object({
    index: Type.Integer({ description: 'The line\'s place in users, from 0' }),
    email: Type.String(),
    reason: Type.String({ description: 'email_exists (already here: not a refusal), user_id_exists, identity_exists, invalid, weak_hash, hash_too_costly, unknown_role, unknown_provider' }),
  })),
}))

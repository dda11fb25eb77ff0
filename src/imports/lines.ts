import { ROLE_NAME_PATTERN } from '../authz/permissions.ts'
import { emailProblem, normaliseEmail, normaliseFullName } from '../auth/input.ts'
import { NO_PASSWORD } from '../auth/passwords.ts'
import { isUuid } from '../text.ts'
import { acceptImportedHash, LEGACY_PASSWORD, type FirebaseParams, type HashRefusal } from './formats.ts'

/**
 * One line of an import (docs/migrating.md, "The line format"): what a careful caller sends, checked
 * field by field. Nothing here touches the database; the service decides what already exists.
 */

/** Why a line was not imported. `email_exists` is the only one that is not a refusal (the CLI still exits 0). */
export type SkipReason =
  | HashRefusal
  | 'email_exists'
  | 'user_id_exists'
  | 'duplicate_in_import'
  | 'unknown_role'
  | 'unknown_provider'
  | 'identity_exists'

/** A line refused, with what to tell the operator (never the line's hash or secret). */
export interface LineRefusal {
  reason: SkipReason
  message: string
}

/** A line that passed every check of its own. */
export interface ImportedUser {
  id: string
  email: string
  fullName: string
  passwordHash: string
  verifiedAt: number | null
  createdAt: number
  disabled: boolean
  roles: string[]
  appMetadata: string | null
  /** Normalised base32 (upper case, no padding or spaces). */
  totpSecret: string | null
  identities: { provider: string; subject: string }[]
}

const FIELDS = new Set(['email', 'email_verified', 'full_name', 'user_id', 'created_at', 'disabled', 'password_hash', 'password', 'roles', 'app_metadata', 'totp_secret', 'identities'])
const ROLE_NAME = ROLE_NAME_PATTERN
const MAX_ROLES = 20
const MAX_IDENTITIES = 10
const MAX_METADATA_BYTES = 2048
/** 80 bits: the shortest secret the common authenticator apps make (RFC 4226 asks for 128, most issue 160). */
const MIN_TOTP_CHARS = 16

export interface LineRules {
  firebase: FirebaseParams | null
  /** The configured identity providers' names. */
  providers: ReadonlySet<string>
  now: number
}

function invalid(message: string): LineRefusal {
  return { reason: 'invalid', message }
}

/** A time as an ISO 8601 string or milliseconds since 1970; null when it is neither or in the future. */
function time(value: unknown, now: number): number | null {
  const ms = typeof value === 'number' ? value : typeof value === 'string' && /^\d{4}-\d{2}-\d{2}/.test(value) ? Date.parse(value) : NaN
  return Number.isSafeInteger(Math.trunc(ms)) && ms > 0 && ms <= now ? Math.trunc(ms) : null
}

/** The address as a line gives it, normalised, for the report; '' when there is none. */
export function reportedEmail(line: unknown): string {
  const email = (line as { email?: unknown } | null)?.email
  return typeof email === 'string' ? normaliseEmail(email).slice(0, 254) : ''
}

export function checkLine(line: unknown, rules: LineRules): ImportedUser | LineRefusal {
  if (!line || typeof line !== 'object' || Array.isArray(line)) return invalid('a line must be a JSON object')
  const input = line as Record<string, unknown>
  const unknownField = Object.keys(input).find((key) => !FIELDS.has(key))
  if (unknownField !== undefined) return invalid(`unknown field ${JSON.stringify(unknownField.slice(0, 40))}`)
  if (typeof input.email !== 'string') return invalid('email is required')
  const email = normaliseEmail(input.email)
  const emailIssue = emailProblem(email)
  if (emailIssue) return invalid(`email ${emailIssue}`)

  let fullName = email.slice(0, email.indexOf('@'))
  if (input.full_name !== undefined && input.full_name !== null && input.full_name !== '') {
    if (typeof input.full_name !== 'string') return invalid('full_name must be a string')
    const name = normaliseFullName(input.full_name)
    if (name.problem) return invalid(`full_name ${name.problem}`)
    if (name.value) fullName = name.value
  }

  let id: string = crypto.randomUUID()
  if (input.user_id !== undefined) {
    if (typeof input.user_id !== 'string' || !isUuid(input.user_id.toLowerCase())) return invalid('user_id must be a UUID')
    id = input.user_id.toLowerCase()
  }
  for (const flag of ['email_verified', 'disabled'] as const) {
    if (input[flag] !== undefined && typeof input[flag] !== 'boolean') return invalid(`${flag} must be true or false`)
  }
  let createdAt = rules.now
  if (input.created_at !== undefined) {
    const at = time(input.created_at, rules.now)
    if (at === null) return invalid('created_at must be an ISO 8601 time or milliseconds since 1970, not in the future')
    createdAt = at
  }

  let passwordHash = NO_PASSWORD
  if (input.password !== undefined) {
    if (input.password !== 'legacy') return invalid('password may only be "legacy" (lazy migration); a hash goes in password_hash')
    if (input.password_hash !== undefined) return invalid('a line has password_hash or "password": "legacy", not both')
    passwordHash = LEGACY_PASSWORD
  } else if (input.password_hash !== undefined && input.password_hash !== null) {
    const accepted = acceptImportedHash(input.password_hash, rules.firebase)
    if ('refused' in accepted) return { reason: accepted.refused, message: accepted.message }
    passwordHash = accepted.stored
  }

  let roles: string[] = []
  if (input.roles !== undefined) {
    if (!Array.isArray(input.roles) || input.roles.length > MAX_ROLES || !input.roles.every((role) => typeof role === 'string' && ROLE_NAME.test(role))) {
      return invalid(`roles must be a list of at most ${MAX_ROLES} role names`)
    }
    roles = [...new Set(input.roles as string[])].sort()
  }
  let appMetadata: string | null = null
  if (input.app_metadata !== undefined && input.app_metadata !== null) {
    if (typeof input.app_metadata !== 'object' || Array.isArray(input.app_metadata)) return invalid('app_metadata must be a JSON object')
    appMetadata = JSON.stringify(input.app_metadata)
    if (Buffer.byteLength(appMetadata) > MAX_METADATA_BYTES) return invalid(`app_metadata must be at most ${MAX_METADATA_BYTES} bytes serialised`)
  }

  let totpSecret: string | null = null
  if (input.totp_secret !== undefined && input.totp_secret !== null) {
    const secret = typeof input.totp_secret === 'string' ? input.totp_secret.replace(/[\s=]/g, '').toUpperCase() : ''
    if (!/^[A-Z2-7]+$/.test(secret) || secret.length < MIN_TOTP_CHARS || secret.length > 128) return invalid(`totp_secret must be base32, ${MIN_TOTP_CHARS} to 128 characters`)
    totpSecret = secret
  }

  const identities: { provider: string; subject: string }[] = []
  if (input.identities !== undefined) {
    if (!Array.isArray(input.identities) || input.identities.length > MAX_IDENTITIES) return invalid(`identities must be a list of at most ${MAX_IDENTITIES}`)
    for (const identity of input.identities as unknown[]) {
      const { provider, subject } = (identity ?? {}) as { provider?: unknown; subject?: unknown }
      if (typeof provider !== 'string' || typeof subject !== 'string' || subject.length === 0 || subject.length > 255) return invalid('each identity needs provider and subject (at most 255 characters)')
      if (!rules.providers.has(provider)) return { reason: 'unknown_provider', message: `identity provider ${JSON.stringify(provider.slice(0, 40))} is not configured (OIDC_PROVIDERS)` }
      if (identities.some((seen) => seen.provider === provider)) return invalid(`two identities of provider ${provider}`)
      identities.push({ provider, subject })
    }
  }

  return {
    id, email, fullName, passwordHash, createdAt, roles, appMetadata, totpSecret, identities,
    verifiedAt: input.email_verified === true ? createdAt : null,
    disabled: input.disabled === true,
  }
}

import { AppError, type ErrorDetail } from '../errors.ts'
import { cleanLabel } from '../text.ts'

export const EMAIL_MAX = 254
export const FULL_NAME_MAX = 100

// A plain addr-spec: no display name, no quotes or comments, one @, a dotted domain of sane labels.
const LOCAL_PART = /^[^\s@"(),:;<>[\\\]\p{Cc}]{1,64}$/u
const DOMAIN_LABEL = /^(?!-)[\p{L}\p{N}-]{1,63}(?<!-)$/u

/** Trimmed, NFC, lower-cased as a whole: the form uniqueness is enforced on. */
export function normaliseEmail(raw: string): string {
  return raw.trim().normalize('NFC').toLowerCase()
}

export function emailProblem(email: string): string | null {
  if (email.length === 0) return 'is required'
  if ([...email].length > EMAIL_MAX) return `must be at most ${EMAIL_MAX} characters`
  const at = email.lastIndexOf('@')
  if (at <= 0 || email.indexOf('@') !== at) return 'must be an e-mail address with exactly one @'
  const labels = email.slice(at + 1).split('.')
  if (!LOCAL_PART.test(email.slice(0, at))) return 'must be a plain e-mail address (no spaces, quotes or display name)'
  if (labels.length < 2 || !labels.every((label) => DOMAIN_LABEL.test(label))) return 'must have a dotted domain'
  return null
}

export function normaliseFullName(raw: string): { value: string; problem: string | null } {
  return cleanLabel(raw, FULL_NAME_MAX)
}

export function throwIfProblems(details: ErrorDetail[]): void {
  if (details.length > 0) throw new AppError('VALIDATION_ERROR', { details })
}

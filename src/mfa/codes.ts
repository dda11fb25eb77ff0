import { createHmac, randomBytes, randomInt } from 'node:crypto'

/** RFC 4648's base32 alphabet: no 0/O or 1/I to confuse. */
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'
export const RECOVERY_CODE_COUNT = 10

/**
 * A recovery code: 10 base32 characters (50 bits), shown as `xxxxx-xxxxx`. Case, spaces and the dash
 * are ignored on input (normaliseRecoveryCode).
 */
export function newRecoveryCode(): string {
  const chars = Array.from({ length: 10 }, () => ALPHABET[randomInt(ALPHABET.length)]!).join('').toLowerCase()
  return `${chars.slice(0, 5)}-${chars.slice(5)}`
}

/** The canonical form of a typed code, or null when it cannot be one. */
export function normaliseRecoveryCode(input: string): string | null {
  const code = input.replace(/[\s-]/g, '').toUpperCase()
  return /^[A-Z2-7]{10}$/.test(code) ? code : null
}

/** An mfa_token: 256 random bits. */
export function newMfaToken(): string {
  return randomBytes(32).toString('base64url')
}

/**
 * Keyed hashes of the secrets this module stores (recovery codes, mfa_tokens, WebAuthn challenges) under a service
 * secret sealed in the database: a copy of the database alone cannot test guesses against them,
 * which for 50-bit recovery codes a plain hash would allow.
 */
export class SecretHasher {
  constructor(private readonly key: Buffer) {}

  hash(purpose: 'recovery_code' | 'mfa_token' | 'webauthn_challenge', value: string): string {
    return createHmac('sha256', this.key).update(`${purpose}\n${value}`).digest('base64url')
  }
}

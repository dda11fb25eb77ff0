import type * as OTPAuth from 'otpauth'
import { load } from '../optional.ts'

/** RFC 6238 as docs/mfa.md fixes it: HMAC-SHA1, 6 digits, 30-second steps, a 160-bit secret. */
const PERIOD = 30
const DIGITS = 6
const SECRET_BYTES = 20
/** A code of the current step or one step either side is accepted. */
const WINDOW = 1

// Loaded on first use: most processes never enrol or verify a factor.
const otpauth = () => load<typeof OTPAuth>('otpauth')

function totpOf(secretBase32: string, issuer: string, account: string): OTPAuth.TOTP {
  const lib = otpauth()
  return new lib.TOTP({ issuer, label: account, algorithm: 'SHA1', digits: DIGITS, period: PERIOD, secret: lib.Secret.fromBase32(secretBase32) })
}

/** A fresh secret, base32 (RFC 4648, no padding), and the otpauth:// URI an authenticator app scans. */
export function newTotpSecret(issuer: string, account: string): { secret: string; uri: string } {
  const secret = new (otpauth().Secret)({ size: SECRET_BYTES }).base32
  return { secret, uri: totpOf(secret, issuer, account).toString() }
}

/**
 * The step a code belongs to, if it is a code of the current step or one either side at `now`, or
 * null. Whether that step may still be used (the replay guard) is the caller's, in the database.
 */
export function totpStep(secretBase32: string, code: string, now: number): number | null {
  if (!/^\d{6}$/.test(code)) return null
  const delta = totpOf(secretBase32, 'x', 'x').validate({ token: code, timestamp: now, window: WINDOW })
  return delta === null ? null : Math.floor(now / 1000 / PERIOD) + delta
}

/** The QR code of the URI, as an SVG document. */
export async function qrSvg(uri: string): Promise<string> {
  const qrcode = load<typeof import('qrcode')>('qrcode')
  return qrcode.toString(uri, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 })
}

/**
 * The one error type of the service and the catalogue of its codes.
 * Codes are part of the published interface: never rename one once released.
 */
export const ErrorCodes = {
  INVALID_CREDENTIALS: { status: 401, message: 'The e-mail address or password is incorrect.' },
  TOKEN_EXPIRED: { status: 401, message: 'The access token has expired; refresh it and try again.' },
  EMAIL_NOT_VERIFIED: { status: 403, message: 'The e-mail address must be verified first.' },
  ACCOUNT_DISABLED: { status: 403, message: 'The account is disabled.' },
  EMAIL_EXISTS: { status: 409, message: 'An account with this e-mail address already exists.' },
  VALIDATION_ERROR: { status: 400, message: 'The request is not valid.' },
  AUTH_REQUIRED: { status: 401, message: 'A bearer access token is required.' },
  INVALID_TOKEN: { status: 401, message: 'The access token is not valid.' },
  INVALID_REFRESH_TOKEN: { status: 401, message: 'The refresh token is not valid.' },
  INVALID_VERIFICATION_TOKEN: { status: 400, message: 'The verification token is unknown, used or expired.' },
  INVALID_RESET_TOKEN: { status: 400, message: 'The password reset token is unknown, used or expired.' },
  NOT_FOUND: { status: 404, message: 'Not found.' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'This method is not allowed on this path.' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'The request body is too large.' },
  HEADERS_TOO_LARGE: { status: 431, message: 'The request line and headers are too large.' },
  REQUEST_TIMEOUT: { status: 408, message: 'The request was not received in time.' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'The request body must be application/json.' },
  LIMIT_EXCEEDED: { status: 409, message: 'A limit has been reached.' },
  FORBIDDEN: { status: 403, message: 'Your roles do not allow this.' },
  LAST_OWNER: { status: 409, message: 'The organisation needs another owner first.' },
  HTTPS_REQUIRED: { status: 403, message: 'This service only answers over HTTPS.' },
  INVALID_API_KEY: { status: 401, message: 'The API key is not valid.' },
  INSUFFICIENT_SCOPE: { status: 403, message: 'The API key lacks the scope this route needs.' },
  ORIGIN_NOT_ALLOWED: { status: 403, message: 'This origin may not use the browser session cookie.' },
  MFA_REQUIRED: { status: 403, message: 'A second factor is required.' },
  INVALID_MFA_CODE: { status: 401, message: 'The code is wrong, already used or expired.' },
  INVALID_MFA_TOKEN: { status: 401, message: 'The mfa_token is unknown, used or expired; log in again.' },
  LAST_SIGN_IN_METHOD: { status: 409, message: 'This is the only way left to sign in to the account; add another before removing it.' },
  RATE_LIMITED: { status: 429, message: 'Too many requests; try again later.' },
  INTERNAL_ERROR: { status: 500, message: 'An internal error occurred.' },
  SERVICE_UNAVAILABLE: { status: 503, message: 'The service is temporarily unavailable; try again later.' },
  LEGACY_UNAVAILABLE: { status: 503, message: 'The system this account is moving from did not answer; try again later.' },
} as const

export type ErrorCode = keyof typeof ErrorCodes

export interface ErrorDetail {
  field: string
  message: string
}

/** What an MFA_REQUIRED answer carries in `error.mfa` (README.md, "Two-factor authentication"). */
export type MfaChallenge =
  | { mfa_token: string; expires_in: number; methods: string[] }
  | { step_up: true; methods: string[] }

/**
 * An answer the service gives on purpose (a wrong password, a refusal under load), not a fault, so
 * it carries no stack trace: the error handler never writes one to a client or the log, and
 * capturing it was the largest single cost of a 503 in a login flood. Unexpected errors keep theirs
 * as `cause`.
 */
export class AppError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly details: ErrorDetail[] | undefined
  /** Extra response headers the error must carry (WWW-Authenticate, Retry-After, Allow). */
  readonly headers: Record<string, string>
  /** MFA_REQUIRED only: the challenge, answered as `error.mfa`. */
  readonly mfa: MfaChallenge | undefined

  constructor(
    code: ErrorCode,
    options: { message?: string; details?: ErrorDetail[]; cause?: unknown; headers?: Record<string, string>; mfa?: MfaChallenge } = {},
  ) {
    const stackLimit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    super(options.message ?? ErrorCodes[code].message, { cause: options.cause })
    Error.stackTraceLimit = stackLimit
    this.name = 'AppError'
    this.code = code
    this.status = ErrorCodes[code].status
    this.details = options.details
    this.headers = options.headers ?? {}
    this.mfa = options.mfa
  }
}

/**
 * An error's message with its causes: fetch reports only "fetch failed", and what went wrong (the
 * name did not resolve, the connection was refused, the certificate was not trusted) is its cause.
 */
export function causeChain(error: unknown): string {
  const parts: string[] = []
  for (let current: unknown = error; current instanceof Error && parts.length < 5; current = current.cause) {
    const code = (current as { code?: unknown }).code
    parts.push(typeof code === 'string' && !current.message.includes(code) ? `${current.message} (${code})` : current.message)
  }
  return parts.length > 0 ? parts.join(': ') : String(error)
}

/** The slice of pino the services use; Fastify's logger satisfies it, tests may pass a silent one. */
export interface Logger {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

/**
 * Paths pino blanks out in every log line: credentials in headers and any password or token that
 * could ride along in a logged object.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'res.headers["set-cookie"]',
  '*.password',
  '*.current_password',
  '*.new_password',
  '*.token',
  '*.access_token',
  '*.refresh_token',
  '*.private_jwk',
  '*.password_hash',
]

/**
 * pino's serializer for `err`, replacing its standard one, which writes the stack: here every
 * error in the log is its type, code and message, never a stack trace (the project's rule), and
 * that holds for Fastify's own lines as much as for ours.
 */
export function serializeError(error: unknown): unknown {
  if (typeof error !== 'object' || error === null) return error
  const { type, name, code, message } = error as { type?: unknown; name?: unknown; code?: unknown; message?: unknown }
  return { type: type ?? name ?? error.constructor?.name, code, message }
}

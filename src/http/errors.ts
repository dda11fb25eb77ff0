import { randomUUID } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import FindMyWay, { type HTTPMethod } from 'find-my-way'
import { isDatabaseUnavailable } from '../db/index.ts'
import { AppError, type ErrorCode } from '../errors.ts'
import { ErrorEnvelope } from './schemas.ts'
import { pathOf } from './security.ts'
import { validationDetails } from './validation.ts'

const REALM = 'Bearer realm="portcullis"'
const TOKEN_CODES = new Set<ErrorCode>(['INVALID_TOKEN', 'TOKEN_EXPIRED', 'INVALID_REFRESH_TOKEN', 'INVALID_API_KEY'])

const notJson = () =>
  new AppError('VALIDATION_ERROR', { message: 'The request body is not valid JSON.', details: [{ field: 'body', message: 'is not valid JSON' }] })

/** Fastify's own errors, by code, in the service's vocabulary. */
function fromFastify(error: FastifyError): AppError | null {
  if (error.validation) {
    return new AppError('VALIDATION_ERROR', { details: validationDetails(error.validation as never, error.validationContext) })
  }
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('PAYLOAD_TOO_LARGE')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_TYPE':
      return new AppError('UNSUPPORTED_MEDIA_TYPE')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return notJson()
    case 'FST_ERR_BAD_URL':
      return new AppError('VALIDATION_ERROR', { message: 'The request URL is malformed.', details: [{ field: 'url', message: 'is not a valid percent-encoded path' }] })
    case 'FST_ERR_MAX_PARAM_LENGTH':
      // A path parameter longer than any id we issue names nothing: the same 404 as any unknown id.
      return new AppError('NOT_FOUND')
  }
  // secure-json-parse's refusals (malformed JSON, __proto__ keys).
  if (error instanceof SyntaxError) return notJson()
  if (error.statusCode === 400) return new AppError('VALIDATION_ERROR')
  if (error.statusCode === 404) return new AppError('NOT_FOUND')
  if (error.statusCode === 413) return new AppError('PAYLOAD_TOO_LARGE')
  if (error.statusCode === 415) return new AppError('UNSUPPORTED_MEDIA_TYPE')
  // Any other refusal of the request by the framework is the client's, never an internal error.
  if (typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500) return new AppError('VALIDATION_ERROR')
  return null
}

export function toAppError(error: unknown): AppError {
  if (error instanceof AppError) return error
  if (isDatabaseUnavailable(error)) return new AppError('SERVICE_UNAVAILABLE', { cause: error, headers: { 'retry-after': '5' } })
  return fromFastify(error as FastifyError) ?? new AppError('INTERNAL_ERROR', { cause: error })
}

export function sendError(reply: FastifyReply, appError: AppError): FastifyReply {
  const error: { code: ErrorCode; message: string; details?: unknown; mfa?: unknown } = { code: appError.code, message: appError.message }
  if (appError.details) error.details = appError.details
  if (appError.mfa) {
    error.mfa = appError.mfa
    // It may carry an mfa_token: never cached.
    reply.header('cache-control', 'no-store')
  }
  reply.code(appError.status)
  if (appError.status === 401) {
    // RFC 7235 on every 401; RFC 6750's error attribute when the token itself is the problem.
    reply.header('www-authenticate', TOKEN_CODES.has(appError.code) ? `${REALM}, error="invalid_token"` : REALM)
  }
  for (const [name, value] of Object.entries(appError.headers)) reply.header(name, value)
  return reply.type('application/json; charset=utf-8').send({ success: false, error })
}

/**
 * 5xx internals (the cause's type, code and message) go to the log with the request id, never to
 * the client.
 * A 503 is not an internal error: a refusal the service chose (overload, shutdown) is only in the
 * request's own log line, since a line with a stack for every refused request would make a flood
 * costlier to refuse; the database being away is one warning line without a stack.
 */
export function logServerError(request: FastifyRequest, appError: AppError, error: unknown): void {
  if (appError.status < 500) return
  if (appError.code === 'SERVICE_UNAVAILABLE') {
    const cause = appError.cause as Error | undefined
    if (cause) request.log.warn({ err: { message: cause.message, code: (cause as FastifyError).code } }, 'database unavailable')
    return
  }
  // The cause's type, code and message with the request id; never its stack (the project's rule:
  // no stack trace reaches a client or the log).
  const cause = (appError.cause ?? error) as Error
  request.log.error({ err: { type: cause?.name, message: cause?.message, code: (cause as FastifyError)?.code } }, appError.code)
}

/**
 * One handler turns anything thrown into the envelope. 5xx internals (the cause's type, code and
 * message; never a stack) go to the log with the request id and never to the client.
 */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error, request: FastifyRequest, reply) => {
    // A body that stopped arriving (the client hung up, or was cut at REQUEST_TIMEOUT_SECONDS) fails
    // with its stream's ECONNRESET: the client's doing, not the database being away, and there is
    // no one left to read the answer.
    const appError = request.raw.readableAborted ? new AppError('VALIDATION_ERROR', { message: 'The request body did not fully arrive.' }) : toAppError(error)
    logServerError(request, appError, error)
    return sendError(reply, appError)
  })

  // Every documented route answers errors in the one envelope; saying so here, once, puts it in
  // the OpenAPI document for each operation (and errors are serialised against the same schema).
  app.addHook('onRoute', (route) => {
    const schema = route.schema as { tags?: unknown; response?: Record<string, unknown> } | undefined
    if (!schema?.tags) return
    schema.response = { ...schema.response, '4xx': ErrorEnvelope, '5xx': ErrorEnvelope }
  })

  // Every route is also recorded here, so an unknown method on a known path can answer 405
  // with the methods it does allow, and only a truly unknown path answers 404.
  const known = FindMyWay()
  const methods = new Set<HTTPMethod>()
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat() as HTTPMethod[]) {
      methods.add(method)
      known.on(method, route.url, () => {})
    }
  })

  app.setNotFoundHandler((request, reply) => {
    const path = pathOf(request)
    const allowed = [...methods].filter((method) => known.find(method, path) !== null)
    if (allowed.length > 0) {
      return sendError(reply, new AppError('METHOD_NOT_ALLOWED', { headers: { allow: allowed.sort().join(', ') } }))
    }
    return sendError(reply, new AppError('NOT_FOUND'))
  })
}

/** What Node's HTTP parser refuses before there is a request: in the service's envelope too. */
function clientErrorOf(error: NodeJS.ErrnoException): AppError {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new AppError('HEADERS_TOO_LARGE')
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new AppError('REQUEST_TIMEOUT')
    default:
      return new AppError('VALIDATION_ERROR', { message: 'The request is not valid HTTP.', details: [{ field: 'request', message: 'is not a valid HTTP/1.1 request' }] })
  }
}

/**
 * Fastify's clientErrorHandler: a request line or headers Node cannot parse (an unknown method,
 * headers over 16 KiB), or a request that has not fully arrived within REQUEST_TIMEOUT_SECONDS,
 * never reach a handler that could answer, so the answer is written to the socket here, in the
 * envelope with the usual headers, and the connection is closed. Node's own fallback is a bare
 * 408 or 400 without a body; this one is the envelope.
 */
export function answerClientError(error: NodeJS.ErrnoException, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  // As Node does: an answer already under way on this connection (a handler that replied before
  // the body had all arrived) is not spliced into; the connection is only closed.
  const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage
  if (socket.writable && !answering?.headersSent) {
    const appError = clientErrorOf(error)
    const body = JSON.stringify({ success: false, error: { code: appError.code, message: appError.message, ...(appError.details ? { details: appError.details } : {}) } })
    socket.write([
      `HTTP/1.1 ${appError.status} ${STATUS_CODES[appError.status]}`,
      'content-type: application/json; charset=utf-8',
      `content-length: ${Buffer.byteLength(body)}`,
      `x-request-id: ${randomUUID()}`,
      'cache-control: no-store',
      'x-content-type-options: nosniff',
      "content-security-policy: default-src 'none'; frame-ancestors 'none'",
      'connection: close',
      '',
      body,
    ].join('\r\n'))
  }
  socket.destroy()
}

import type { FastifyRequest } from 'fastify'
import type { RequestContext } from '../audit/events.ts'

/** Auth bodies are small; a large one is refused before any parsing or hashing (16 KiB). */
export const AUTH_BODY_LIMIT = 16 * 1024

/** Where a request came from, as the audit trail records it. */
export function requestContext(request: FastifyRequest): RequestContext {
  const agent = request.headers['user-agent']
  return { ip: request.ip, userAgent: typeof agent === 'string' ? agent : null, requestId: request.id }
}

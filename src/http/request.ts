import type { FastifyRequest } from 'fastify'
import type { RequestContext } from '../audit/events.ts'

/** Auth bodies are small; a large one is refused before any parsing or hashing (16 KiB). */
export const AUTH_BODY_LIMIT = 16 * 1024

/** Where a request came from, as the audit trail records it. */
export function requestContext(request: FastifyRequest): RequestContext {
  const agent = request.headers['user-agent']
  return { ip: request.ip, userAgent: typeof agent === 'string' ? agent : null, requestId: request.id }
}

/** Every value the Cookie header carries under `name`, in the order sent (a repeated name is the caller's to judge). */
export function cookieValues(request: FastifyRequest, name: string): string[] {
  const header = request.headers.cookie
  if (typeof header !== 'string') return []
  const values: string[] = []
  for (const pair of header.split(';')) {
    const separator = pair.indexOf('=')
    if (separator !== -1 && pair.slice(0, separator).trim() === name) values.push(pair.slice(separator + 1).trim())
  }
  return values
}

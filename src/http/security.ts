import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AppError } from '../errors.ts'

export interface TransportOptions {
  production: boolean
  /** TLS terminated by this process; otherwise (in production) a trusted proxy terminates it. */
  nativeTls: boolean
  corsOrigins: string[]
}

// Probes from a load balancer inside the network often use plain HTTP; they carry no secrets.
const PLAIN_HTTP_ALLOWED = new Set(['/healthz', '/readyz'])

/**
 * Helmet-style headers on every answer, HSTS and HTTPS enforcement in production, and CORS only
 * for the origins CORS_ORIGINS lists (none by default, so browsers on other sites get nothing).
 */
export function installTransportSecurity(app: FastifyInstance, options: TransportOptions): void {
  const origins = new Set(options.corsOrigins)

  app.addHook('onRequest', async (request: FastifyRequest, reply) => {
    reply.header('x-content-type-options', 'nosniff')
    reply.header('x-frame-options', 'DENY')
    reply.header('referrer-policy', 'no-referrer')
    // The API answers JSON only: nothing it sends should ever run, load or be framed in a page.
    // The one HTML page, the interactive reference under /docs, sets its own (self-only) policy.
    const path = request.url.split('?')[0] ?? ''
    if (!path.startsWith('/docs')) reply.header('content-security-policy', "default-src 'none'; frame-ancestors 'none'")
    reply.header('cross-origin-opener-policy', 'same-origin')
    if (options.production) {
      reply.header('strict-transport-security', 'max-age=31536000; includeSubDomains')
      // Behind a TLS-terminating proxy, request.protocol comes from X-Forwarded-Proto, which
      // Fastify only believes from the TRUST_PROXY addresses; anything else is plain HTTP.
      if (!options.nativeTls && request.protocol !== 'https' && !PLAIN_HTTP_ALLOWED.has(path)) {
        throw new AppError('HTTPS_REQUIRED')
      }
    }
    const origin = request.headers.origin
    if (typeof origin === 'string' && origins.has(origin)) {
      reply.header('access-control-allow-origin', origin)
      reply.header('access-control-expose-headers', 'x-request-id, retry-after, ratelimit-limit, ratelimit-remaining, ratelimit-reset, www-authenticate')
    }
    if (origins.size > 0) reply.header('vary', 'Origin')
  })

  if (origins.size > 0) {
    // Preflight. Bearer tokens travel in a header, never a cookie, so credentials are not allowed.
    app.options('*', async (request, reply) => {
      const origin = request.headers.origin
      if (typeof origin === 'string' && origins.has(origin)) {
        reply.header('access-control-allow-methods', 'GET, POST, PATCH, DELETE')
        reply.header('access-control-allow-headers', 'authorization, content-type, x-request-id')
        reply.header('access-control-max-age', '600')
      }
      return reply.code(204).send()
    })
  }
}

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../errors.ts'

export interface TransportOptions {
  production: boolean
  /** TLS terminated by this process; otherwise (in production) a trusted proxy terminates it. */
  nativeTls: boolean
  corsOrigins: string[]
  /** The cookie-mode routes: the only ones whose CORS answers allow credentials. */
  credentialPaths: string[]
}

// Probes from a load balancer inside the network often use plain HTTP; they carry no secrets.
const PLAIN_HTTP_ALLOWED = new Set(['/healthz', '/readyz'])

/** The path of a request, without its query string. */
export function pathOf(request: FastifyRequest): string {
  const url = request.url
  const query = url.indexOf('?')
  return query === -1 ? url : url.slice(0, query)
}

/**
 * The headers every answer carries, whether it comes from a route, a hook or Fastify's own
 * router-level failures: request id, no caching, helmet-style hardening, HSTS in production.
 */
export function setCommonHeaders(request: FastifyRequest, reply: FastifyReply, production: boolean): void {
  reply.header('x-request-id', request.id)
  // Answers carry tokens or personal data; no cache may keep them. The JWKS route overrides this.
  reply.header('cache-control', 'no-store')
  reply.header('x-content-type-options', 'nosniff')
  reply.header('x-frame-options', 'DENY')
  reply.header('referrer-policy', 'no-referrer')
  reply.header('cross-origin-opener-policy', 'same-origin')
  // The API answers JSON only: nothing it sends should ever run, load or be framed in a page.
  // The HTML of /docs and of the mailed-link pages replaces this with a policy of its own.
  reply.header('content-security-policy', "default-src 'none'; frame-ancestors 'none'")
  if (production) reply.header('strict-transport-security', 'max-age=31536000; includeSubDomains')
}

/**
 * HTTPS enforcement in production, and CORS only for the origins CORS_ORIGINS lists (none by
 * default, so browsers on other sites get nothing). The common headers are set by the caller.
 */
export function installTransportSecurity(app: FastifyInstance, options: TransportOptions): void {
  const origins = new Set(options.corsOrigins)
  const credentialPaths = new Set(options.credentialPaths)

  // Takes a callback: nothing here waits, and it runs on every request (see src/app.ts).
  app.addHook('onRequest', (request: FastifyRequest, reply, done) => {
    if (options.production) {
      // Behind a TLS-terminating proxy, request.protocol comes from X-Forwarded-Proto, which
      // Fastify only believes from the TRUST_PROXY addresses; anything else is plain HTTP.
      if (!options.nativeTls && request.protocol !== 'https' && !PLAIN_HTTP_ALLOWED.has(pathOf(request))) {
        throw new AppError('HTTPS_REQUIRED')
      }
    }
    const origin = request.headers.origin
    if (typeof origin === 'string' && origins.has(origin)) {
      reply.header('access-control-allow-origin', origin)
      reply.header('access-control-expose-headers', 'x-request-id, retry-after, ratelimit-limit, ratelimit-remaining, ratelimit-reset, www-authenticate')
      if (credentialPaths.has(pathOf(request))) reply.header('access-control-allow-credentials', 'true')
    }
    if (origins.size > 0) reply.header('vary', 'Origin')
    done()
  })

  if (origins.size > 0) {
    // Preflight. Bearer tokens travel in a header, so credentials (cookies) are allowed only on
    // the cookie-mode routes, where the refresh cookie is the point.
    app.options('*', async (request, reply) => {
      const origin = request.headers.origin
      if (typeof origin === 'string' && origins.has(origin)) {
        reply.header('access-control-allow-methods', 'GET, POST, PUT, PATCH, DELETE')
        reply.header('access-control-allow-headers', 'authorization, content-type, x-request-id, x-token-transport')
        reply.header('access-control-max-age', '600')
      }
      return reply.code(204).send()
    })
  }
}

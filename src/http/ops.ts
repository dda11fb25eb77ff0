import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { KeyStore } from '../auth/keys.ts'
import type { Db } from '../db/index.ts'
import type { Metrics } from './metrics.ts'
import { AppError } from '../errors.ts'
import { ok } from './schemas.ts'

/**
 * Whether this instance wants new traffic. On shutdown it leaves first (readiness fails, so a load
 * balancer stops sending) and closes its listener only later (see server.ts).
 */
export class Readiness {
  private left = false
  leave(): void {
    this.left = true
  }
  get leaving(): boolean {
    return this.left
  }
}

/** Who may read /metrics: a bearer of `token` when one is set, else anyone when `public`, else nobody. */
export interface MetricsAccess {
  token: string | null
  public: boolean
}

/**
 * The metrics tell an attacker about the deployment (traffic, failures, queue depths): with a
 * token, only its bearer reads them (compared in constant time); in production without one, nobody
 * (404, as if there were no such path).
 */
function assertMayReadMetrics(request: FastifyRequest, access: MetricsAccess): void {
  if (access.token === null) {
    if (!access.public) throw new AppError('NOT_FOUND')
    return
  }
  const header = request.headers.authorization
  if (!header || !/^bearer /i.test(header)) throw new AppError('AUTH_REQUIRED')
  const digest = (value: string) => createHash('sha256').update(value).digest()
  if (!timingSafeEqual(digest(header.slice(7).trim()), digest(access.token))) throw new AppError('INVALID_TOKEN')
}

/** Health, readiness, metrics and the public keys; outside the versioned base path. */
export async function opsRoutes(app: FastifyInstance, deps: { db: Db; keys: KeyStore; metrics: Metrics; readiness: Readiness; metricsAccess: MetricsAccess }): Promise<void> {
  app.get('/healthz', { schema: { tags: ['operations'], operationId: 'health' } }, async () => ok({ status: 'ok' }))

  app.get('/readyz', { schema: { tags: ['operations'], operationId: 'ready' } }, async () => {
    if (deps.readiness.leaving) throw new AppError('SERVICE_UNAVAILABLE', { message: 'This instance is shutting down.', headers: { 'retry-after': '5' } })
    try {
      await deps.db.ping()
    } catch (error) {
      throw new AppError('SERVICE_UNAVAILABLE', { cause: error, headers: { 'retry-after': '5' } })
    }
    return ok({ status: 'ready' })
  })

  // Aggregate counts only; still, serve it to the monitoring network, not the internet (see docs).
  app.get('/metrics', { schema: { tags: ['operations'], operationId: 'metrics', security: [{ metricsToken: [] }] } }, async (request, reply) => {
    assertMayReadMetrics(request, deps.metricsAccess)
    return reply.type(deps.metrics.contentType()).send(await deps.metrics.render())
  })

  app.get('/.well-known/jwks.json', { schema: { tags: ['operations'], operationId: 'jwks' } }, async (_request, reply) => {
    // A standard JWK Set, not the envelope: JWT libraries of other services read it as is.
    return reply.header('cache-control', 'public, max-age=300').send(deps.keys.jwks())
  })
}

import '@fastify/swagger'
import type { FastifyInstance } from 'fastify'
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

/** Health, readiness and the public keys; outside the versioned base path. */
export async function opsRoutes(app: FastifyInstance, deps: { db: Db; keys: KeyStore; metrics: Metrics; readiness: Readiness }): Promise<void> {
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
  app.get('/metrics', { schema: { tags: ['operations'], operationId: 'metrics' } }, async (_request, reply) =>
    reply.type(deps.metrics.contentType()).send(await deps.metrics.render()),
  )

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())

  app.get('/.well-known/jwks.json', { schema: { tags: ['operations'], operationId: 'jwks' } }, async (_request, reply) => {
    // A standard JWK Set, not the envelope: JWT libraries of other services read it as is.
    return reply.header('cache-control', 'public, max-age=300').send(deps.keys.jwks())
  })
}

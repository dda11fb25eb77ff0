import '@fastify/swagger'
import type { FastifyInstance } from 'fastify'
import type { KeyStore } from '../auth/keys.ts'
import type { Db } from '../db/index.ts'
import { AppError } from '../errors.ts'
import { ok } from './schemas.ts'

/** Health, readiness and the public keys; outside the versioned base path. */
export async function opsRoutes(app: FastifyInstance, deps: { db: Db; keys: KeyStore }): Promise<void> {
  app.get('/healthz', { schema: { tags: ['operations'], operationId: 'health' } }, async () => ok({ status: 'ok' }))

  app.get('/readyz', { schema: { tags: ['operations'], operationId: 'ready' } }, async () => {
    try {
      await deps.db.ping()
    } catch (error) {
      throw new AppError('SERVICE_UNAVAILABLE', { cause: error, headers: { 'retry-after': '5' } })
    }
    return ok({ status: 'ready' })
  })

  app.get('/.well-known/jwks.json', { schema: { tags: ['operations'], operationId: 'jwks' } }, async (_request, reply) => {
    // A standard JWK Set, not the envelope: JWT libraries of other services read it as is.
    return reply.header('cache-control', 'public, max-age=300').send(deps.keys.jwks())
  })
}

import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { principalOf } from '../http/bearer.ts'
import { requireScope } from '../provider/resource.ts'
import { ok } from '../http/schemas.ts'
import { AddSymbolBody, CreateBody, Deleted, IdParams, ListQuery, One, Page, SymbolParams, UpdateBody } from './schemas.ts'
import type { WatchlistService } from './service.ts'

const security = [{ bearer: [] }]

/**
 * Registered inside a bearer-auth scope that also takes the OpenID provider's access tokens for
 * this API (src/provider/resource.ts): reads need `watchlists:read`, writes `watchlists:write`
 * (Portcullis's own tokens carry every scope).
 */
export async function watchlistRoutes(fastify: FastifyInstance, service: WatchlistService, metadataUrl: string): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const tags = ['watchlists']
  const read = requireScope('watchlists:read', metadataUrl)
  const write = requireScope('watchlists:write', metadataUrl)

  app.get('/watchlists', {
    onRequest: read,
    schema: {
      tags, security, operationId: 'listWatchlists', querystring: ListQuery,
      response: { 200: Page },
    },
  }, async (request) => ok(await service.list(principalOf(request), request.query)))

  app.post('/watchlists', {
    onRequest: write,
    schema: { tags, security, operationId: 'createWatchlist', body: CreateBody, response: { 201: One } },
  }, async (request, reply) => {
    const watchlist = await service.create(principalOf(request), request.body)
    return reply.code(201).send(ok({ watchlist }))
  })

  app.get('/watchlists/:id', {
    onRequest: read,
    schema: { tags, security, operationId: 'getWatchlist', params: IdParams, response: { 200: One } },
  }, async (request) => ok({ watchlist: await service.get(principalOf(request), request.params.id) }))

  app.patch('/watchlists/:id', {
    onRequest: write,
    schema: { tags, security, operationId: 'updateWatchlist', params: IdParams, body: UpdateBody, response: { 200: One } },
  }, async (request) => ok({ watchlist: await service.update(principalOf(request), request.params.id, request.body) }))

  app.delete('/watchlists/:id', {
    onRequest: write,
    schema: {
      tags, security, operationId: 'deleteWatchlist', params: IdParams,
      response: { 200: Deleted },
    },
  }, async (request) => {
    await service.remove(principalOf(request), request.params.id)
    return ok({ id: request.params.id, deleted: true as const })
  })

  app.post('/watchlists/:id/symbols', {
    onRequest: write,
    schema: { tags, security, operationId: 'addWatchlistSymbol', params: IdParams, body: AddSymbolBody, response: { 200: One } },
  }, async (request) => ok({ watchlist: await service.addSymbol(principalOf(request), request.params.id, request.body.symbol) }))

  app.delete('/watchlists/:id/symbols/:symbol', {
    onRequest: write,
    schema: { tags, security, operationId: 'removeWatchlistSymbol', params: SymbolParams, response: { 200: One } },
  }, async (request) => ok({ watchlist: await service.removeSymbol(principalOf(request), request.params.id, request.params.symbol) }))
}

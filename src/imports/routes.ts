import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance } from 'fastify'
import type { ApiKeyService } from '../admin/api-keys.ts'
import { actedBy, protectWithApiKeys, requireScope } from '../admin/routes.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import { ImportBody, ImportResult } from './schemas.ts'
import type { ImportService } from './service.ts'

/** A thousand lines with hashes, identities and metadata: larger than the API's usual 64 KiB. */
const IMPORT_BODY_LIMIT = 2 * 1024 * 1024

/** Moving in through the admin API (docs/migrating.md); the CLI's `users import` takes whole files. */
export async function importAdminRoutes(fastify: FastifyInstance, options: { imports: ImportService; apiKeys: ApiKeyService; limits: Limits }): Promise<void> {
  const { imports, apiKeys, limits } = options
  protectWithApiKeys(fastify, apiKeys, limits)
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

  app.post('/admin/users/import', {
    onRequest: requireScope('users:write'),
    bodyLimit: IMPORT_BODY_LIMIT,
    schema: {
      tags: ['admin'], security: [{ apiKey: ['users:write'] }], operationId: 'adminImportUsers',
      description: 'Imports up to 1000 accounts in one transaction, with their password hashes (kept until each first sign-in rehashes them), TOTP secrets, provider identities, roles and app_metadata. Existing addresses are skipped, never overwritten; each line that is not imported is listed with its index and reason; the rest go on. Idempotent.',
      body: ImportBody, response: { 200: ImportResult },
    },
  }, async (request) => {
    const report = await imports.importBatch(request.body.users, { dryRun: request.body.dry_run ?? false, events: request.body.events ?? false, context: actedBy(request) })
    // The reasons' explanations are the CLI's; the API answers with the documented codes.
    return ok({ imported: report.imported, skipped: report.skipped.map(({ index, email, reason }) => ({ index, email, reason })) })
  })
}

import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'

/**
 * The package's version, which the document carries: read from the nearest package.json up from
 * this file, which is the project's both for the sources (src/http/) and the build (dist/).
 */
function packageVersion(): string {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json')
    if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
    if (path.dirname(dir) === dir) throw new Error('package.json not found above the server')
  }
}

/** The interactive reference runs Swagger UI's own scripts and styles, from this origin only. */
const DOCS_CSP = [
  "default-src 'self'", "connect-src 'self'", "img-src 'self' data:", "font-src 'self' data:", "style-src 'self'",
  "script-src 'self'", "script-src-attr 'none'", "object-src 'none'", "base-uri 'self'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ')

/**
 * /openapi.json and /docs. Registered before the routes so it sees every schema: the document is
 * generated from the same schemas that validate requests and serialise answers. When the docs are
 * off (production, unless DOCS=on) neither exists: both paths answer 404 like any unknown path.
 */
export async function registerApiDocs(app: FastifyInstance, publicUrl: string, enabled: boolean): Promise<void> {
  if (!enabled) return
  await app.register(swagger, {
    hideUntagged: true,
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Portcullis', version: packageVersion(), description: 'Authentication service: register, verify, log in, refresh, bearer auth; sessions; watchlists; account export and deletion; the admin API for operators.' },
      // Relative to wherever the document is served (PUBLIC_URL's path, if it has one), so /docs
      // can "Try it out" from any host name that reaches it without becoming a cross-origin call.
      servers: [{ url: new URL(publicUrl).pathname, description: 'this server' }],
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: "A user's access token" },
          apiKey: {
            type: 'http', scheme: 'bearer', bearerFormat: 'pcl_ API key',
            description: 'An operator\'s API key (`portcullis api-keys create`); each admin route names the scope it needs: users:read, users:write, audit:read, clients:read, clients:write',
          },
          metricsToken: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN, when the deployment sets one' },
        },
      },
    },
  })
  // The base layout leaves out Swagger UI's "explore any URL" bar (whose input carries an inline
  // style the policy refuses); no validator badge, so nothing is fetched from elsewhere.
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: DOCS_CSP, validatorUrl: false, uiConfig: { layout: 'BaseLayout' } })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
}

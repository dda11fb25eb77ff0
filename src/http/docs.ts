import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'

const API_VERSION = '1.0.0'

/** The interactive reference runs Swagger UI's own scripts and styles, from this origin only. */
const DOCS_CSP = [
  "default-src 'self'", "connect-src 'self'", "img-src 'self' data:", "font-src 'self' data:", "style-src 'self'",
  "script-src 'self'", "script-src-attr 'none'", "object-src 'none'", "base-uri 'self'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ')

/**
 * /openapi.json and /docs. Registered before the routes so it sees every schema: the document is
 * generated from the same schemas that validate requests and serialise answers.
 */
export async function registerApiDocs(app: FastifyInstance, publicUrl: string): Promise<void> {
  await app.register(swagger, {
    hideUntagged: true,
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Portcullis', version: API_VERSION, description: 'Authentication service: register, verify, log in, refresh, bearer auth; sessions; watchlists; account export and deletion; the admin API for operators.' },
      // Relative to wherever the document is served (PUBLIC_URL's path, if it has one), so /docs
      // can "Try it out" from any host name that reaches it without becoming a cross-origin call.
      servers: [{ url: new URL(publicUrl).pathname, description: 'this server' }],
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: "A user's access token" },
          apiKey: {
            type: 'http', scheme: 'bearer', bearerFormat: 'pcl_ API key',
            description: 'An operator\'s API key (`portcullis api-keys create`); each admin route names the scope it needs: users:read, users:write, audit:read',
          },
        },
      },
    },
  })
  // The base layout leaves out Swagger UI's "explore any URL" bar (whose input carries an inline
  // style the policy refuses); no validator badge, so nothing is fetched from elsewhere.
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: DOCS_CSP, validatorUrl: false, uiConfig: { layout: 'BaseLayout' } })
}

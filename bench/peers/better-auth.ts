// The peer of bench/provider.ts: Better Auth 1.7.5 with its `jwt` and `oauthProvider` plugins on
// SQLite (better-sqlite3, in WAL mode with synchronous=FULL, as Portcullis runs it), as a process
// of its own, started by bench/lib/server.ts's startServer like the service. It runs on plain node
// (Node 24 strips the types itself): no loader beside it, as none runs beside dist/server.js. It
// registers one confidential client (client_secret_basic, PKCE, consent skipped: the plugin's
// trusted first-party client) and writes it to $DATA_DIR/client.json; the bench signs its users up
// over HTTP.
//
// It also serves the bearer read of `npm run bench` (issue 46): GET /api/v1/watchlists checks the
// jwt plugin's token statelessly, as the plugin's documentation has a resource server do it (jose's
// jwtVerify against the server's JWKS, fetched once and kept by jose), and answers an empty list.
// No database read: the check alone, which can only flatter the peer beside Portcullis's read.
//
// Environment: PORT, DATA_DIR (startServer's), BETTER_AUTH_SECRET (the bench makes a random one per
// run; there is no default), BENCH_REDIRECT_URI (the client's), BENCH_ID_TOKEN_ALG (the jwt plugin's signing key: EdDSA, the plugin's
// default, or RS256).
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { oauthProvider } from '@better-auth/oauth-provider'
import Database from 'better-sqlite3'
import { betterAuth, type BetterAuthOptions } from 'better-auth'
import { getMigrations } from 'better-auth/db/migration'
import { toNodeHandler } from 'better-auth/node'
import { jwt } from 'better-auth/plugins'
import { createRemoteJWKSet, jwtVerify } from 'jose'

/** The registered client, as $DATA_DIR/client.json holds it. */
export interface PeerClient {
  client_id: string
  client_secret: string
}

function required(name: string): string {
  const value = process.env[name]
  if (!value) throw new Error(`bench/peers/better-auth.ts: ${name} is required`)
  return value
}

async function main(): Promise<void> {
  const port = Number(required('PORT'))
  const dataDir = required('DATA_DIR')
  const alg = (process.env.BENCH_ID_TOKEN_ALG ?? 'EdDSA') as 'EdDSA' | 'RS256'
  const sqlite = new Database(path.join(dataDir, 'better-auth.sqlite'))
  sqlite.pragma('journal_mode = WAL')
  sqlite.pragma('synchronous = FULL')
  sqlite.pragma('busy_timeout = 5000')

  const options = {
    baseURL: `http://localhost:${port}`,
    secret: required('BETTER_AUTH_SECRET'),
    database: sqlite,
    emailAndPassword: { enabled: true },
    // Off as Portcullis's limits are raised in the bench: the load comes from one address.
    rateLimit: { enabled: false },
    telemetry: { enabled: false },
    logger: { level: 'error' },
    plugins: [
      jwt({ jwks: { keyPairConfig: alg === 'RS256' ? { alg: 'RS256', modulusLength: 2048 } : { alg: 'EdDSA', crv: 'Ed25519' } } }),
      oauthProvider({ loginPage: '/sign-in', consentPage: '/consent' }),
    ],
  } satisfies BetterAuthOptions
  // The tables first: an instance made before them reports a schema mismatch.
  await (await getMigrations(options)).runMigrations()
  const auth = betterAuth(options)

  // The plugin registers a client on behalf of a signed-in user (its owner).
  const owner = await auth.api.signUpEmail({ body: { email: 'owner@example.com', password: randomBytes(24).toString('base64url'), name: 'Owner' }, returnHeaders: true })
  const cookie = owner.headers.getSetCookie().map((line) => line.split(';')[0]).join('; ')
  const client = (await auth.api.adminCreateOAuthClient({
    headers: new Headers({ cookie }),
    body: {
      client_name: 'Bench',
      redirect_uris: [required('BENCH_REDIRECT_URI')],
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      scope: 'openid profile email offline_access',
      skip_consent: true,
    },
  })) as PeerClient
  writeFileSync(path.join(dataDir, 'client.json'), JSON.stringify({ client_id: client.client_id, client_secret: client.client_secret } satisfies PeerClient))

  const handler = toNodeHandler(auth)
  const origin = `http://localhost:${port}`
  const keys = createRemoteJWKSet(new URL(`http://127.0.0.1:${port}/api/auth/jwks`))
  const read = async (authorization: string | undefined): Promise<number> => {
    const token = /^Bearer (.+)$/.exec(authorization ?? '')?.[1]
    if (!token) return 401
    try {
      await jwtVerify(token, keys, { issuer: origin, audience: origin })
      return 200
    } catch {
      return 401
    }
  }
  const server = createServer((request, response) => {
    if (request.url === '/healthz') {
      response.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
      return
    }
    if (request.url === '/api/v1/watchlists' && request.method === 'GET') {
      void read(request.headers.authorization).then((status) => {
        const body = status === 200 ? { data: { watchlists: [], next_cursor: null } } : { error: { code: 'UNAUTHORIZED', message: 'Not signed in.' } }
        response.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body))
      })
      return
    }
    void handler(request, response)
  })
  // Fastify's default, which Portcullis keeps: the loader's connections stay open between runs.
  server.keepAliveTimeout = 72_000
  server.listen(port, '127.0.0.1')
  process.once('SIGTERM', () => server.close(() => sqlite.close()))
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()

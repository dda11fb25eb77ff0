// The library's own floor for bench/provider.ts (issue 45): panva's oidc-provider, the version
// Portcullis runs, with the settings that shape a token request as Portcullis sets them (rotating
// refresh tokens, a refresh token only with offline_access, PKCE, client_secret_basic, an EdDSA or
// RS256 ID token, opaque access tokens, the same lifetimes) and with nothing of Portcullis's: the
// storage in a Map (MapAdapter below), an account that is only its `sub`, no session link, no claims seam.
// What a token request costs here is what the library costs by itself; what Portcullis costs on
// top of it is its storage, its checks and its sealing. Not a product and not for anything else:
// the Map forgets everything at exit.
//
// The codes are made in-process through the library's own models (POST /bench/mint, a count in
// the body), not through its pages: the sign-in is not what is measured, the token endpoint is.
// Environment: PORT and DATA_DIR (startServer's; the client is written to $DATA_DIR/client.json),
// BENCH_REDIRECT_URI, BENCH_ID_TOKEN_ALG (EdDSA or RS256).
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { createServer, type IncomingMessage } from 'node:http'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import Provider from 'oidc-provider'

function required(name: string): string {
  const value = process.env[name]
  if (!value) throw new Error(`bench/peers/oidc-provider-alone.ts: ${name} is required`)
  return value
}

type Payload = Record<string, unknown>

/**
 * Storage in plain Maps, without expiry: the library's own in-memory adapter is a cache of 1,000
 * entries, fewer than the codes a measured batch holds. One instance per model, as the library
 * makes them; the grant index is shared.
 */
const rows = new Map<string, Payload>()
const byGrant = new Map<string, string[]>()
class MapAdapter {
  // A plain field: Node strips types but does not rewrite parameter properties.
  private readonly model: string
  constructor(model: string) {
    this.model = model
  }
  private key(id: string): string {
    return `${this.model}:${id}`
  }
  async upsert(id: string, payload: Payload): Promise<void> {
    rows.set(this.key(id), payload)
    if (typeof payload.grantId === 'string') {
      const keys = byGrant.get(payload.grantId) ?? []
      keys.push(this.key(id))
      byGrant.set(payload.grantId, keys)
    }
  }
  async find(id: string): Promise<Payload | undefined> {
    return rows.get(this.key(id))
  }
  async findByUid(uid: string): Promise<Payload | undefined> {
    for (const [key, payload] of rows) if (key.startsWith(`${this.model}:`) && payload.uid === uid) return payload
    return undefined
  }
  async findByUserCode(): Promise<undefined> {
    return undefined
  }
  async consume(id: string): Promise<void> {
    const payload = rows.get(this.key(id))
    if (payload) payload.consumed = Math.floor(Date.now() / 1000)
  }
  async destroy(id: string): Promise<void> {
    rows.delete(this.key(id))
  }
  async revokeByGrantId(grantId: string): Promise<void> {
    for (const key of byGrant.get(grantId) ?? []) rows.delete(key)
    byGrant.delete(grantId)
  }
}

async function bodyOf(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

async function main(): Promise<void> {
  const port = Number(required('PORT'))
  const dataDir = required('DATA_DIR')
  const redirectUri = required('BENCH_REDIRECT_URI')
  const alg = (process.env.BENCH_ID_TOKEN_ALG ?? 'EdDSA') as 'EdDSA' | 'RS256'
  const signing = alg === 'EdDSA' ? generateKeyPairSync('ed25519') : generateKeyPairSync('rsa', { modulusLength: 2048 })
  const jwk = { ...signing.privateKey.export({ format: 'jwk' }), kid: 'bench', alg, use: 'sig' }
  const client = { client_id: 'bench', client_secret: randomBytes(32).toString('base64url') }
  const issuer = `http://localhost:${port}`

  const provider = new Provider(issuer, {
    adapter: MapAdapter,
    jwks: { keys: [jwk as never] },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    clients: [{
      ...client,
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: alg,
    }],
    findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub }) }),
    claims: { openid: ['sub'] },
    scopes: ['openid', 'offline_access'],
    responseTypes: ['code'],
    enabledJWA: { idTokenSigningAlgValues: ['RS256', 'EdDSA'] },
    pkce: { required: () => true },
    clockTolerance: 30,
    rotateRefreshToken: true,
    issueRefreshToken: async (_ctx: unknown, c: { grantTypeAllowed(type: string): boolean }, code: { scopes: Set<string> }) => c.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access'),
    ttl: { AccessToken: 900, AuthorizationCode: 60, IdToken: 3600, Grant: 30 * 24 * 3600, RefreshToken: 30 * 24 * 3600, Session: 7 * 24 * 3600, Interaction: 3600 },
    features: { devInteractions: { enabled: false }, revocation: { enabled: true }, introspection: { enabled: true } },
  })
  const library = provider.callback()
  const registered = await provider.Client.find(client.client_id)
  if (!registered) throw new Error('bench/peers/oidc-provider-alone.ts: the client did not load')

  /** An authorization code as the library's authorization endpoint would have issued it after a sign-in and consent. */
  const mint = async (challenge: string): Promise<string> => {
    const accountId = randomBytes(16).toString('hex')
    const grant = new provider.Grant({ accountId, clientId: client.client_id })
    grant.addOIDCScope('openid offline_access')
    const grantId = await grant.save()
    const code = new provider.AuthorizationCode({
      accountId,
      client: registered,
      grantId,
      redirectUri,
      scope: 'openid offline_access',
      codeChallenge: challenge,
      codeChallengeMethod: 'S256',
      authTime: Math.floor(Date.now() / 1000),
      acr: '0',
    } as never)
    return code.save()
  }

  writeFileSync(path.join(dataDir, 'client.json'), JSON.stringify(client))
  const server = createServer((request, response) => {
    if (request.url === '/healthz') {
      response.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
      return
    }
    if (request.url === '/bench/mint' && request.method === 'POST') {
      void bodyOf(request).then(async (body) => {
        const challenges = JSON.parse(body) as string[]
        const codes = await Promise.all(challenges.map(mint))
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(codes))
      }).catch((error: unknown) => {
        response.writeHead(500, { 'content-type': 'text/plain' }).end(String(error))
      })
      return
    }
    library(request, response)
  })
  // Fastify's default, which Portcullis keeps: the loader's connections stay open between runs.
  server.keepAliveTimeout = 72_000
  server.listen(port, '127.0.0.1')
  process.once('SIGTERM', () => server.close())
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()

// An MCP server protected by Portcullis (examples/mcp/README.md): the official MCP TypeScript SDK's
// McpServer on its Streamable HTTP transport, behind the resource server's side of the client
// package. Every request to the MCP endpoint carries an access token Portcullis issued for this
// server (aud = its URL); without one the answer is 401 with the RFC 9728 metadata's address, from
// which an MCP client finds Portcullis, registers (a client ID metadata document, or dynamic
// registration) and has a person sign in.
//
// `npm run example:mcp` runs it (examples/mcp/main.ts); test/examples/mcp.test.ts drives it with
// the SDK's own client.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import * as z from 'zod'
// An application imports these from '@portcullis/client'; the example uses the package's source,
// so it runs without a build.
import {
  AccessTokenError, bearerToken, challengeResponse, protectedResourceMetadata, resourceMetadataUrl, verifyAccessToken, type AccessTokenClaims,
} from '../../packages/client/src/index.ts'

/** The scopes of this server, as operators register them with the resource (README.md). */
export const SCOPES = {
  'tools:read': 'Use the read-only tools: who you are, your notes',
  'tools:write': 'Add notes',
} as const
type Scope = keyof typeof SCOPES

/** What any request to the MCP endpoint needs (connecting, listing the tools). */
const BASE_SCOPES: readonly Scope[] = ['tools:read']
/** What calling each tool needs besides the base scope. */
const TOOL_SCOPES: Record<string, readonly Scope[]> = {
  whoami: [],
  list_notes: [],
  add_note: ['tools:write'],
}

/** Larger bodies are refused before they are parsed; an MCP request is a few KB. */
const MAX_BODY_BYTES = 256 * 1024
const MAX_NOTES_PER_USER = 100

export interface McpServerOptions {
  /** The port to listen on; 0 for any free one. */
  port: number
  /** The address to listen on (default 127.0.0.1). */
  host?: string
  /** Portcullis's issuer, exactly as its discovery says (by default PUBLIC_URL's origin). */
  issuer: string
  /**
   * This server's MCP endpoint, exactly as operators registered it as a resource: the `aud` of its
   * tokens, and the `resource` of its metadata (default `http://localhost:{port}/mcp`).
   */
  resource?: string
  /** A line for each request refused or failed (the reason, never the token); default silent. */
  log?: (line: string) => void
}

export interface RunningMcpServer {
  /** The MCP endpoint's URL, which is also the resource identifier. */
  resource: string
  /** Where the RFC 9728 metadata is (RFC 9728 section 3.1's path insertion). */
  metadataUrl: string
  close(): Promise<void>
}

/** Reads the request's body, up to the bound; null when it is larger. */
async function readBody(request: IncomingMessage): Promise<string | null> {
  const chunks: Buffer[] = []
  let total = 0
  for await (const chunk of request as AsyncIterable<Buffer>) {
    total += chunk.length
    if (total > MAX_BODY_BYTES) return null
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}

/**
 * The scopes a POST needs: the base scope, and each called tool's own (a JSON-RPC batch needs them
 * all). Judged here, before the MCP server sees the request, so a missing scope is answered as
 * RFC 6750 and the MCP authorization specification say, 403 insufficient_scope naming the scopes,
 * and an MCP client can ask the person for them (the SDK's client does, by itself).
 */
function scopesFor(body: unknown): Scope[] {
  const needed = new Set<Scope>(BASE_SCOPES)
  for (const message of Array.isArray(body) ? body : [body]) {
    if (!message || typeof message !== 'object') continue
    const { method, params } = message as { method?: unknown; params?: { name?: unknown } }
    if (method !== 'tools/call' || typeof params?.name !== 'string') continue
    for (const scope of TOOL_SCOPES[params.name] ?? []) needed.add(scope)
  }
  return [...needed]
}

const text = (value: unknown): CallToolResult => ({ content: [{ type: 'text', text: JSON.stringify(value) }] })

/** The MCP server for one request (the stateless mode): its tools act for the token's person. */
function mcpServer(notes: Map<string, string[]>): McpServer {
  const server = new McpServer({ name: 'portcullis-notes', version: '1.0.0' })
  const claimsOf = (authInfo: AuthInfo | undefined) => authInfo?.extra?.claims as AccessTokenClaims

  server.registerTool('whoami', {
    description: 'Who the access token acts for: the person (sub), the app (client_id) and the scopes they approved. Needs tools:read.',
    annotations: { readOnlyHint: true },
  }, ({ authInfo }) => {
    const claims = claimsOf(authInfo)
    return text({ sub: claims.sub, client_id: claims.client_id, scope: claims.scope })
  })

  server.registerTool('list_notes', {
    description: 'Your notes, oldest first. Needs tools:read.',
    annotations: { readOnlyHint: true },
  }, ({ authInfo }) => text({ notes: notes.get(claimsOf(authInfo).sub) ?? [] }))

  server.registerTool('add_note', {
    description: 'Adds a note of yours. Needs tools:write.',
    inputSchema: { text: z.string().min(1).max(500) },
  }, ({ text: note }, { authInfo }) => {
    // The HTTP layer has refused a token without the scope already (403); this keeps the tool safe
    // should it ever be reached another way.
    if (!authInfo?.scopes.includes('tools:write')) return { isError: true, content: [{ type: 'text', text: 'This tool needs the scope tools:write' }] }
    const sub = claimsOf(authInfo).sub
    const mine = notes.get(sub) ?? []
    if (mine.length >= MAX_NOTES_PER_USER) return { isError: true, content: [{ type: 'text', text: `At most ${MAX_NOTES_PER_USER} notes each` }] }
    mine.push(note)
    notes.set(sub, mine)
    return text({ added: note, count: mine.length })
  })
  return server
}

/**
 * Starts the MCP server. Answers:
 * - `GET {metadataUrl}`: the RFC 9728 document (resource = the MCP endpoint, authorization server =
 *   Portcullis, scopes_supported = SCOPES);
 * - the MCP endpoint: 401 `WWW-Authenticate: Bearer resource_metadata="...", scope="tools:read"`
 *   without a token (or with a refused one), 403 insufficient_scope for a call whose tool needs a
 *   scope the token lacks, else the MCP answer (POST; GET and DELETE are 405: no sessions here);
 * - anything else: 404.
 */
export async function startMcpServer(options: McpServerOptions): Promise<RunningMcpServer> {
  const host = options.host ?? '127.0.0.1'
  const notes = new Map<string, string[]>()
  const log = options.log ?? (() => {})
  // Known once listening (port 0); the handler runs only after that.
  let resource = ''
  let metadataUrl = ''
  let metadata = ''

  const handle = async (request: IncomingMessage, response: ServerResponse) => {
    const path = new URL(request.url ?? '/', 'http://x').pathname
    if (path === new URL(metadataUrl).pathname) {
      if (request.method !== 'GET') return void response.writeHead(405, { allow: 'GET' }).end()
      return void response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'public, max-age=300' }).end(metadata)
    }
    if (path !== new URL(resource).pathname) return void response.writeHead(404).end()

    let body: unknown
    if (request.method === 'POST') {
      const raw = await readBody(request)
      if (raw === null) return void response.writeHead(413, { connection: 'close' }).end()
      try {
        body = JSON.parse(raw)
      } catch {
        return void response.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }))
      }
    }

    let claims: AccessTokenClaims
    try {
      claims = await verifyAccessToken(bearerToken(request.headers.authorization), { issuer: options.issuer, audience: resource, scopes: scopesFor(body) })
    } catch (error) {
      // Without a token, or with a refused one, the challenge names the scope to ask for first;
      // for a missing scope, the scopes this request needs (challengeResponse's default).
      const scoped = error instanceof AccessTokenError && error.error === 'insufficient_scope'
      const { status, headers, body: answer } = challengeResponse(error, { resourceMetadata: metadataUrl, ...(scoped ? {} : { scope: BASE_SCOPES }) })
      if (error instanceof AccessTokenError && error.reason !== 'missing') log(`${request.method} ${path}: ${status} ${error.reason}`)
      else if (!(error instanceof AccessTokenError)) log(`${request.method} ${path}: ${status} (the keys of ${options.issuer} could not be had)`)
      return void response.writeHead(status, headers).end(answer)
    }
    if (request.method !== 'POST') return void response.writeHead(405, { allow: 'POST' }).end()

    // Stateless: a server and a transport for this request alone, so one person's calls never
    // share a session (and its identity) with another's.
    const server = mcpServer(notes)
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    response.on('close', () => {
      void transport.close()
      void server.close()
    })
    const auth: AuthInfo = {
      token: bearerToken(request.headers.authorization)!,
      clientId: claims.client_id,
      scopes: claims.scope,
      expiresAt: claims.exp,
      resource: new URL(resource),
      extra: { claims },
    }
    await server.connect(transport)
    await transport.handleRequest(Object.assign(request, { auth }), response, body)
  }

  const http: Server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      log(`${request.method} ${request.url}: 500 ${error instanceof Error ? error.message : String(error)}`)
      if (!response.headersSent) response.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'server_error' }))
      else response.end()
    })
  })
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject)
    http.listen(options.port, host, () => resolve())
  })
  const port = (http.address() as AddressInfo).port
  resource = options.resource ?? `http://localhost:${port}/mcp`
  metadataUrl = resourceMetadataUrl(resource)
  metadata = JSON.stringify(protectedResourceMetadata({
    resource,
    authorizationServers: [options.issuer],
    scopesSupported: Object.keys(SCOPES),
    resourceName: 'Notes (Portcullis MCP example)',
  }))
  return {
    resource,
    metadataUrl,
    close: async () => {
      http.closeAllConnections()
      await new Promise((resolve) => http.close(resolve))
    },
  }
}

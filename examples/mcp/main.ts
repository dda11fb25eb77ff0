// `npm run example:mcp`: the MCP server of examples/mcp/server.ts on http://localhost:3001/mcp
// (MCP_PORT), accepting the tokens of the Portcullis at PORTCULLIS_URL (default
// http://localhost:3000, what `npm start` serves). Ctrl-C stops it. examples/mcp/README.md says
// how to try it.
import { SCOPES, startMcpServer } from './server.ts'

const issuer = (process.env.PORTCULLIS_URL ?? 'http://localhost:3000').replace(/\/+$/, '')
const port = Number(process.env.MCP_PORT ?? 3001)
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error(`MCP_PORT must be a port number, not ${JSON.stringify(process.env.MCP_PORT)}`)
  process.exit(2)
}

const server = await startMcpServer({ port, issuer, log: (line) => console.log(line) })
const scopes = Object.entries(SCOPES).map(([name, description]) => `--scope '${name}=${description}'`).join(' ')
console.log(`MCP server on ${server.resource}, protected by the Portcullis at ${issuer}
Its protected resource metadata: ${server.metadataUrl}

Register it with Portcullis as a resource once (in the Portcullis checkout, with its DATA_DIR or DATABASE_URL):
  npm run cli -- resources add ${server.resource} --name 'Notes (MCP example)' ${scopes}
and let MCP clients without a client ID metadata document register themselves: start Portcullis with OP_REGISTRATION=open.
Then point an MCP client at ${server.resource}.`)

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void server.close().then(() => process.exit(0))
  })
}

// Load benchmark: GET /auth/me throughput (EdDSA verify + the in-memory session gate + the user
// row) and POST /auth/login (full OWASP argon2id cost), over a real socket on loopback. The
// server runs in its own process (bench/server.ts), so autocannon does not share its event loop.
//   npx tsx bench/auth.ts            (SQLite in a temp dir)
//   DATABASE_URL=postgres://... npx tsx bench/auth.ts
import autocannon from 'autocannon'
import { startServer } from './server.ts'

const engine = process.env.DATABASE_URL ? 'postgres' : 'sqlite'
const server = await startServer({ RATE_LIMIT_LOGIN_PER_IP: '100000000', ...(process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}) })
const base = `${server.base}/api/v1`
const email = `bench-${Date.now()}@example.com`
const password = 'a benchmark passphrase'
const json = { 'content-type': 'application/json' }
await fetch(`${base}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password, full_name: 'Bench' }) })
const login = await (await fetch(`${base}/auth/login`, { method: 'POST', headers: json, body: JSON.stringify({ email, password }) })).json()
const token = login.data.access_token as string

async function run(title: string, options: autocannon.Options) {
  const result = await autocannon({ duration: 10, ...options })
  console.log(JSON.stringify({
    bench: title,
    engine,
    connections: options.connections,
    requests_per_s: Math.round(result.requests.average),
    latency_ms_p50: result.latency.p50,
    latency_ms_p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
  }))
}

await run('GET /auth/me', { url: `${base}/auth/me`, connections: 32, headers: { authorization: `Bearer ${token}` } })
await run('POST /auth/login', { url: `${base}/auth/login`, connections: 8, method: 'POST', headers: json, body: JSON.stringify({ email, password }) })
await server.stop()

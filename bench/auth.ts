// Load benchmark: GET /auth/me throughput (EdDSA verify + session/account read per request) and
// POST /auth/login latency (full OWASP argon2id cost), over a real socket on loopback.
//   npx tsx bench/auth.ts            (SQLite in a temp dir)
//   DATABASE_URL=postgres://... npx tsx bench/auth.ts
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'
import { buildApp } from '../src/app.ts'
import { loadConfig } from '../src/config.ts'

const dataDir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-'))
const config = loadConfig({ DATA_DIR: dataDir, DATABASE_URL: process.env.DATABASE_URL, LOG_LEVEL: 'silent', REQUIRE_EMAIL_VERIFICATION: 'false' })
const app = await buildApp(config)
await app.listen({ port: 0, host: '127.0.0.1' })
const address = app.server.address() as { port: number }
const base = `http://127.0.0.1:${address.port}${config.basePath}`

const email = `bench-${Date.now()}@example.com`
const password = 'a benchmark passphrase'
const json = { 'content-type': 'application/json' }
await fetch(`${base}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password, full_name: 'Bench' }) })
const login = await (await fetch(`${base}/auth/login`, { method: 'POST', headers: json, body: JSON.stringify({ email, password }) })).json()
const token = login.data.access_token as string

async function run(title: string, options: autocannon.Options) {
  const result = await autocannon({ duration: 10, ...options })
  const line = {
    bench: title,
    engine: config.databaseUrl ? 'postgres' : 'sqlite',
    connections: options.connections,
    requests_per_s: Math.round(result.requests.average),
    latency_ms_p50: result.latency.p50,
    latency_ms_p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
  }
  console.log(JSON.stringify(line))
}

await run('GET /auth/me', { url: `${base}/auth/me`, connections: 32, headers: { authorization: `Bearer ${token}` } })
await run('POST /auth/login', { url: `${base}/auth/login`, connections: 8, method: 'POST', headers: json, body: JSON.stringify({ email, password }) })

await app.close()
rmSync(dataDir, { recursive: true, force: true })

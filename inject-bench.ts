import { mkdtempSync } from 'node:fs'
import { buildApp } from './src/app.ts'
import { loadConfig } from './src/config.ts'
const dir = mkdtempSync('/tmp/inj/d-')
const app = await buildApp(loadConfig({ ...process.env, DATA_DIR: dir, LOG_LEVEL: 'warn', REQUIRE_EMAIL_VERIFICATION: 'false', KEY_ENCRYPTION_KEY: 'MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=' }))
const json = { 'content-type': 'application/json' }
const email = 'i@example.com', password = 'a benchmark passphrase'
await app.inject({ method: 'POST', url: '/api/v1/auth/register', headers: json, payload: { email, password, full_name: 'I' } })
const tokens = (await app.inject({ method: 'POST', url: '/api/v1/auth/login', headers: json, payload: { email, password } })).json().data
const bearer = { authorization: `Bearer ${tokens.access_token}` }
await app.inject({ method: 'POST', url: '/api/v1/watchlists', headers: { ...json, ...bearer }, payload: { name: 'I', symbols: ['AAPL'] } })
const cases: Record<string, () => Promise<unknown>> = {
  watchlists: () => app.inject({ method: 'GET', url: '/api/v1/watchlists', headers: bearer }),
  me: () => app.inject({ method: 'GET', url: '/api/v1/auth/me', headers: bearer }),
  healthz: () => app.inject({ method: 'GET', url: '/healthz' }),
}
const N = Number(process.env.N ?? 20000)
for (let round = 0; round < 3; round++) {
  const out: string[] = []
  for (const [name, fn] of Object.entries(cases)) {
    for (let i = 0; i < 2000; i++) await fn()
    const t = process.hrtime.bigint()
    for (let i = 0; i < N; i++) await fn()
    out.push(`${name} ${(Number(process.hrtime.bigint() - t) / N / 1000).toFixed(1)}us`)
  }
  console.log(out.join('  '))
}
await app.close()

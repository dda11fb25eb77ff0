// Login timing: does a login reveal whether an address has an account? Median latency of
//   unknown address / known address with a wrong password / known address with the right one,
// 200 samples each, interleaved (so drift hits all three alike), full argon2id cost, real socket.
// Each sample uses its own account or address, so the per-account throttle never interferes.
//   npx tsx bench/login-timing.ts [samples]
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { buildApp } from '../src/app.ts'
import { loadConfig } from '../src/config.ts'

const samples = Number(process.argv[2] ?? 200)
const dataDir = mkdtempSync(path.join(tmpdir(), 'portcullis-timing-'))
const config = loadConfig({
  DATA_DIR: dataDir,
  DATABASE_URL: process.env.DATABASE_URL,
  LOG_LEVEL: 'silent',
  REQUIRE_EMAIL_VERIFICATION: 'false',
  RATE_LIMIT_LOGIN_PER_IP: '1000000',
  RATE_LIMIT_REGISTER_PER_IP: '1000000',
})
const app = await buildApp(config)
await app.listen({ port: 0, host: '127.0.0.1' })
const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}${config.basePath}`
const password = 'timing benchmark passphrase'
const post = (p: string, body: unknown) => fetch(base + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

const accounts: string[] = []
for (let i = 0; i < samples; i++) {
  const email = `timing-${i}-${Date.now()}@example.com`
  const response = await post('/auth/register', { email, password, full_name: 'Timing' })
  if (response.status !== 201) throw new Error(`register failed: ${response.status}`)
  accounts.push(email)
}

async function timed(body: unknown, expected: number): Promise<number> {
  const start = performance.now()
  const response = await post('/auth/login', body)
  await response.arrayBuffer()
  const elapsed = performance.now() - start
  if (response.status !== expected) throw new Error(`expected ${expected}, got ${response.status}`)
  return elapsed
}

const times = { unknown: [] as number[], wrong: [] as number[], right: [] as number[] }
for (let i = 0; i < 5; i++) await timed({ email: `warmup-${i}@example.com`, password }, 401)
for (let i = 0; i < samples; i++) {
  times.unknown.push(await timed({ email: `nobody-${i}-${Date.now()}@example.com`, password }, 401))
  times.wrong.push(await timed({ email: accounts[i], password: `${password}!` }, 401))
  times.right.push(await timed({ email: accounts[i], password }, 200))
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  return (sorted[Math.floor((sorted.length - 1) / 2)]! + sorted[Math.ceil((sorted.length - 1) / 2)]!) / 2
}
const p90 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.9)]!
const row = (name: keyof typeof times) => ({ case: name, samples: times[name].length, median_ms: +median(times[name]).toFixed(2), p90_ms: +p90(times[name]).toFixed(2) })
const rows = [row('unknown'), row('wrong'), row('right')]
console.log(JSON.stringify({ engine: config.databaseUrl ? 'postgres' : 'sqlite', rows, unknown_over_wrong: +(rows[0]!.median_ms / rows[1]!.median_ms).toFixed(3) }))

await app.close()
rmSync(dataDir, { recursive: true, force: true })

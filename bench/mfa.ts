// npx tsx bench/mfa.ts: the second factor's cost, on SQLite and on PostgreSQL (DATABASE_URL, or a
// throwaway cluster), against the built service (npm run build) in a process of its own.
// - MFA login (password, then POST /auth/mfa/verify) next to a password login, sequentially, so
//   each figure is one sign-in's latency; both are bound by the one argon2id hash of the password.
// - POST /auth/mfa/verify alone next to a bearer read (GET /auth/me), at the same concurrency: the
//   issue's target is a verify p50 within 5 ms of a bearer read's (no argon2 in the second step).
// TOTP codes are computed here with node:crypto (RFC 6238), not with the service's library.
import { createHmac } from 'node:crypto'
import { spawnSync } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { startServer } from './server.ts'

const USERS = Number(process.env.BENCH_MFA_USERS ?? 200)
const CONCURRENCY = 8
const json = { 'content-type': 'application/json' }
const password = 'a benchmark passphrase'

function base32Decode(text: string): Buffer {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'
  let bits = ''
  for (const char of text) bits += alphabet.indexOf(char).toString(2).padStart(5, '0')
  return Buffer.from(bits.match(/.{8}/g)!.map((byte) => parseInt(byte, 2)))
}

function totp(secret: string, at = Date.now()): string {
  const counter = Buffer.alloc(8)
  counter.writeBigUInt64BE(BigInt(Math.floor(at / 1000 / 30)))
  const mac = createHmac('sha1', base32Decode(secret)).update(counter).digest()
  const offset = mac[mac.length - 1]! & 0xf
  return String((mac.readUInt32BE(offset) & 0x7fffffff) % 1_000_000).padStart(6, '0')
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
const summary = (values: number[]) => `p50 ${percentile(values, 50).toFixed(2)} ms, p99 ${percentile(values, 99).toFixed(2)} ms (n=${values.length})`

/** Runs `jobs` with at most `concurrency` in flight; each job's latency in ms. */
async function timed(jobs: (() => Promise<void>)[], concurrency: number): Promise<number[]> {
  const latencies: number[] = []
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < jobs.length) {
      const job = jobs[next++]!
      const start = performance.now()
      await job()
      latencies.push(performance.now() - start)
    }
  }))
  return latencies
}

async function post(url: string, body: unknown, token?: string): Promise<{ status: number; data: any; error: any }> {
  const response = await fetch(url, { method: 'POST', headers: { ...json, ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) })
  const parsed = (await response.json()) as { data?: unknown; error?: unknown }
  return { status: response.status, data: parsed.data, error: parsed.error }
}

async function engineRun(engine: string, env: Record<string, string>) {
  const server = await startServer({ ...env, RATE_LIMIT_LOGIN_PER_IP: '1000000000', RATE_LIMIT_REGISTER_PER_IP: '1000000000' })
  const api = `${server.base}/api/v1`
  try {
    const users: { email: string; secret: string; access: string }[] = []
    for (let i = 0; i < USERS; i++) {
      const email = `mfa-bench-${engine}-${Date.now()}-${i}@example.com`
      await post(`${api}/auth/register`, { email, password, full_name: 'Bench' })
      const access = (await post(`${api}/auth/login`, { email, password })).data.access_token as string
      const enrolment = (await post(`${api}/auth/mfa/totp`, {}, access)).data
      const confirmed = await post(`${api}/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: totp(enrolment.secret, Date.now() - 30_000) }, access)
      if (confirmed.status !== 200) throw new Error(`confirm: ${JSON.stringify(confirmed.error)}`)
      users.push({ email, secret: enrolment.secret, access })
    }
    const plain = `mfa-bench-plain-${engine}-${Date.now()}@example.com`
    await post(`${api}/auth/register`, { email: plain, password, full_name: 'Bench' })

    // Password logins against MFA logins (password, then verify), one at a time.
    const passwordLogins = await timed(Array.from({ length: 50 }, () => async () => {
      if ((await post(`${api}/auth/login`, { email: plain, password })).status !== 200) throw new Error('login')
    }), 1)
    const mfaLogins = await timed(users.slice(0, 50).map((user) => async () => {
      const challenge = await post(`${api}/auth/login`, { email: user.email, password })
      const done = await post(`${api}/auth/mfa/verify`, { mfa_token: challenge.error.mfa.mfa_token, method: 'totp', code: totp(user.secret) })
      if (done.status !== 200) throw new Error(`verify: ${JSON.stringify(done.error)}`)
    }), 1)

    // Verify alone: mfa_tokens made first (their argon2 is not counted), then every verify at
    // CONCURRENCY in flight, against bearer reads at the same concurrency. Each user's factor takes
    // one code per 30-second step, so the users not used above verify with the next step's code.
    const pending: { token: string; code: string }[] = []
    for (const user of users.slice(50)) {
      const challenge = await post(`${api}/auth/login`, { email: user.email, password })
      pending.push({ token: challenge.error.mfa.mfa_token, code: totp(user.secret) })
    }
    const reads = (concurrency: number) => timed(Array.from({ length: 2000 }, (_, i) => async () => {
      const response = await fetch(`${api}/auth/me`, { headers: { authorization: `Bearer ${users[i % users.length]!.access}` } })
      await response.arrayBuffer()
    }), concurrency)
    const verifies = (batch: typeof pending, concurrency: number) => timed(batch.map(({ token, code }) => async () => {
      const done = await post(`${api}/auth/mfa/verify`, { mfa_token: token, method: 'totp', code })
      if (done.status !== 200) throw new Error(`verify: ${JSON.stringify(done.error)}`)
    }), concurrency)
    const half = Math.floor(pending.length / 2)
    return {
      engine, passwordLogins, mfaLogins,
      reads1: await reads(1), verifies1: await verifies(pending.slice(0, half), 1),
      reads: await reads(CONCURRENCY), verifies: await verifies(pending.slice(half), CONCURRENCY),
    }
  } finally {
    await server.stop()
  }
}

let cluster: string | undefined
let databaseUrl = process.env.DATABASE_URL
if (!databaseUrl) {
  cluster = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-mfa-pg-'))
  const started = spawnSync('scripts/pg-throwaway.sh', ['start', cluster, '55497'], { encoding: 'utf8' })
  if (started.status !== 0) throw new Error(`could not start PostgreSQL: ${started.stderr}`)
  databaseUrl = started.stdout.trim()
}
try {
  console.log(`bench/mfa.ts: ${USERS} users with an authenticator app; loader in this process (fetch); the server as npm start runs it`)
  for (const row of [await engineRun('sqlite', {}), await engineRun('postgres', { DATABASE_URL: databaseUrl! })]) {
    console.log(`${row.engine}: password login, one at a time: ${summary(row.passwordLogins)}`)
    console.log(`${row.engine}: MFA login (password + verify), one at a time: ${summary(row.mfaLogins)}`)
    for (const [label, reads, verifies] of [['one at a time', row.reads1, row.verifies1], [`${CONCURRENCY} in flight`, row.reads, row.verifies]] as const) {
      console.log(`${row.engine}: GET /auth/me, ${label}: ${summary(reads)}`)
      console.log(`${row.engine}: POST /auth/mfa/verify, ${label}: ${summary(verifies)}; p50 minus the read's: ${(percentile(verifies, 50) - percentile(reads, 50)).toFixed(2)} ms (target <= 5)`)
    }
  }
} finally {
  if (cluster) spawnSync('scripts/pg-throwaway.sh', ['stop', cluster])
}

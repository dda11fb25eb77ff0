// Sign-ins of more than one request, as a load from a process of its own (npm run bench):
//  - mfa: POST /auth/login (argon2id), then POST /auth/mfa/verify with a TOTP code;
//  - passkey: POST /auth/passkeys/login/options, then POST /auth/passkeys/login with an assertion
//    signed by a software authenticator (test/helpers/webauthn.ts), no password at all.
// `workers` sign-ins run at once, each worker with users of its own, set up here before the clock
// starts (registration, enrolment); after each sign-in one GET /auth/me with the new token, so the
// second step can be set beside a bearer read made at the same moment and concurrency.
// TOTP codes are computed with node:crypto (RFC 6238), not with the service's library; each user's
// factor takes a 30-second step once, so a worker picks a user whose next step is still open.
//   echo '{"flow":"mfa","api":"http://127.0.0.1:3000/api/v1","origin":"http://localhost:3000","workers":8,"seconds":10}' | node --import tsx bench/lib/flows.ts
import { createHmac } from 'node:crypto'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { inChild } from './load.ts'
import { SoftAuthenticator, type CreationOptionsJSON, type RequestOptionsJSON } from '../../test/helpers/webauthn.ts'

export interface FlowSpec {
  flow: 'mfa' | 'passkey'
  /** The service's /api/v1 URL. */
  api: string
  /** The page origin the passkey ceremonies claim (the service's PUBLIC_URL origin). */
  origin: string
  workers: number
  seconds: number
  warmupSeconds?: number
  /** The server's dev outbox (DATA_DIR/outbox): the flows' users verify their address from it. */
  outbox: string
}

export interface FlowResult {
  /** Completed sign-ins a second. */
  rps: number
  /** A whole sign-in (both requests), ms. */
  p50: number
  p99: number
  /** The second request alone (verify, or the passkey login itself), ms. */
  secondP50: number
  /** GET /auth/me right after, with the new token, ms. */
  readP50: number
  ok: number
  failed: number
}

const json = { 'content-type': 'application/json' }
const PASSWORD = 'a benchmark passphrase'
/**
 * Users per worker in the MFA flow. Each factor takes a step once, and a code is good for the step
 * before, now and after: three sign-ins per user per 30 seconds. A worker signs in some 25 times a
 * second (argon2id-bound), so 13 s of warm-up and measurement need about 110 users; with fewer the
 * flow would measure the wait for the next step, not the service (the first run of this bench did).
 */
const MFA_USERS_PER_WORKER = 120

function base32Decode(text: string): Buffer {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'
  let bits = ''
  for (const char of text) bits += alphabet.indexOf(char).toString(2).padStart(5, '0')
  return Buffer.from(bits.match(/.{8}/g)!.map((byte) => parseInt(byte, 2)))
}

function totpAt(secret: string, step: number): string {
  const counter = Buffer.alloc(8)
  counter.writeBigUInt64BE(BigInt(step))
  const mac = createHmac('sha1', base32Decode(secret)).update(counter).digest()
  const offset = mac[mac.length - 1]! & 0xf
  return String((mac.readUInt32BE(offset) & 0x7fffffff) % 1_000_000).padStart(6, '0')
}

const stepNow = () => Math.floor(Date.now() / 30_000)

async function post(url: string, body: unknown, token?: string): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { method: 'POST', headers: { ...json, ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: response.status, body: await response.json() }
}

/**
 * Adding a factor needs a verified address (docs/mfa.md), and the bench's server does not require
 * verification to sign in, so registration mails nothing: resend-verification does, into the
 * server's outbox, where the token stands on a line of its own.
 */
async function verifyAddress(api: string, email: string, outbox: string): Promise<void> {
  await post(`${api}/auth/resend-verification`, { email })
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline) {
    // The folder appears with the server's first mail.
    const names = existsSync(outbox) ? readdirSync(outbox).filter((name) => name.endsWith('.eml')) : []
    for (const name of names) {
      const text = readFileSync(path.join(outbox, name), 'utf8')
      const token = text.includes(`To: ${email}`) ? /^([A-Za-z0-9_-]{43})\r?$/m.exec(text)?.[1] : undefined
      if (!token) continue
      const verified = await post(`${api}/auth/verify-email`, { token })
      if (verified.status !== 200) throw new Error(`bench/lib/flows.ts: verify-email failed: ${JSON.stringify(verified.body)}`)
      return
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`bench/lib/flows.ts: no verification mail for ${email} in ${outbox}`)
}

async function signedInUser(api: string, tag: string, outbox: string): Promise<{ email: string; access: string }> {
  const email = `flow-${tag}-${process.pid}-${Math.random().toString(36).slice(2, 10)}@example.com`
  await post(`${api}/auth/register`, { email, password: PASSWORD, full_name: 'Bench' })
  await verifyAddress(api, email, outbox)
  const login = await post(`${api}/auth/login`, { email, password: PASSWORD })
  if (login.status !== 200) throw new Error(`bench/lib/flows.ts: login failed: ${JSON.stringify(login.body)}`)
  return { email, access: login.body.data.access_token }
}

/** One worker's sign-in: resolves with the whole sign-in's time, the second request's, and the new access token. */
type SignIn = () => Promise<{ totalMs: number; secondMs: number; access: string }>

async function mfaWorker(api: string, outbox: string): Promise<SignIn> {
  const users: { email: string; secret: string; last: number }[] = []
  for (let i = 0; i < MFA_USERS_PER_WORKER; i++) {
    const { email, access } = await signedInUser(api, 'mfa', outbox)
    const enrolment = (await post(`${api}/auth/mfa/totp`, {}, access)).body.data
    // The current step: should a step boundary pass before the server checks it, it is still one step off, which is accepted.
    const step = stepNow()
    const confirmed = await post(`${api}/auth/mfa/totp/${enrolment.factor_id}/confirm`, { code: totpAt(enrolment.secret, step) }, access)
    if (confirmed.status !== 200) throw new Error(`bench/lib/flows.ts: confirm failed: ${JSON.stringify(confirmed.body)}`)
    users.push({ email, secret: enrolment.secret, last: step })
  }
  return async () => {
    // The user whose next open step is earliest; if every one has used the step after now, wait for the next.
    for (;;) {
      const now = stepNow()
      const user = users.find((u) => Math.max(u.last + 1, now - 1) <= now + 1)
      if (user) {
        const step = Math.max(user.last + 1, now - 1)
        user.last = step
        const started = performance.now()
        const challenge = await post(`${api}/auth/login`, { email: user.email, password: PASSWORD })
        const began = performance.now()
        const verified = await post(`${api}/auth/mfa/verify`, { mfa_token: challenge.body.error?.mfa?.mfa_token, method: 'totp', code: totpAt(user.secret, step) })
        const done = performance.now()
        if (verified.status !== 200) throw new Error(`verify: ${verified.status} ${JSON.stringify(verified.body.error)}`)
        return { totalMs: done - started, secondMs: done - began, access: verified.body.data.access_token }
      }
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
  }
}

async function passkeyWorker(api: string, origin: string, outbox: string): Promise<SignIn> {
  // One user and one authenticator per worker: a worker signs in one at a time, so the counter only climbs.
  const { access } = await signedInUser(api, 'passkey', outbox)
  const device = new SoftAuthenticator()
  const options = (await post(`${api}/auth/passkeys/register/options`, undefined, access)).body.data.options as CreationOptionsJSON
  const registered = await post(`${api}/auth/passkeys/register`, { credential: device.register(options, { origin }) }, access)
  if (registered.status !== 201) throw new Error(`bench/lib/flows.ts: passkey registration failed: ${JSON.stringify(registered.body)}`)
  return async () => {
    const startedAt = performance.now()
    const started = (await post(`${api}/auth/passkeys/login/options`, undefined)).body.data as { challenge_id: string; options: RequestOptionsJSON }
    const credential = device.authenticate(started.options, { origin })
    const began = performance.now()
    const login = await post(`${api}/auth/passkeys/login`, { challenge_id: started.challenge_id, credential })
    const done = performance.now()
    if (login.status !== 200) throw new Error(`passkey login: ${login.status} ${JSON.stringify(login.body.error)}`)
    return { totalMs: done - startedAt, secondMs: done - began, access: login.body.data.access_token }
  }
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN

export async function runFlow(spec: FlowSpec): Promise<FlowResult> {
  const workers: SignIn[] = await Promise.all(Array.from({ length: spec.workers }, () => (spec.flow === 'mfa' ? mfaWorker(spec.api, spec.outbox) : passkeyWorker(spec.api, spec.origin, spec.outbox))))
  const whole: number[] = []
  const second: number[] = []
  const reads: number[] = []
  let failed = 0
  const loop = async (signIn: SignIn, until: number, counted: boolean) => {
    while (performance.now() < until) {
      try {
        const { totalMs: total, secondMs, access } = await signIn()
        const readBegan = performance.now()
        const read = await fetch(`${spec.api}/auth/me`, { headers: { authorization: `Bearer ${access}` } })
        await read.arrayBuffer()
        if (counted) {
          whole.push(total)
          second.push(secondMs)
          reads.push(performance.now() - readBegan)
        }
      } catch (error) {
        if (counted) failed++
        process.stderr.write(`bench/lib/flows.ts: ${(error as Error).message}\n`)
      }
    }
  }
  if (spec.warmupSeconds) await Promise.all(workers.map((w) => loop(w, performance.now() + spec.warmupSeconds! * 1000, false)))
  const began = performance.now()
  await Promise.all(workers.map((w) => loop(w, began + spec.seconds * 1000, true)))
  const elapsed = (performance.now() - began) / 1000
  for (const list of [whole, second, reads]) list.sort((a, b) => a - b)
  return {
    rps: Math.round((whole.length / elapsed) * 10) / 10,
    p50: percentile(whole, 50),
    p99: percentile(whole, 99),
    secondP50: percentile(second, 50),
    readP50: percentile(reads, 50),
    ok: whole.length,
    failed,
  }
}

/** The flow from a process of its own (this file). */
export function flowInChild(spec: FlowSpec, cpus?: string): Promise<FlowResult & { loaderProcessCpuMs: number }> {
  return inChild<FlowResult & { loaderProcessCpuMs: number }>(import.meta.url, spec, cpus).result
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  let input = ''
  for await (const chunk of process.stdin) input += chunk
  const result = await runFlow(JSON.parse(input) as FlowSpec)
  const cpu = process.cpuUsage()
  process.stdout.write(JSON.stringify({ ...result, loaderProcessCpuMs: (cpu.user + cpu.system) / 1000 }))
}

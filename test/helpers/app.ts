import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { buildApp, type AppOverrides } from '../../src/app.ts'
import { createArgon2Hasher } from '../../src/auth/passwords.ts'
import type { Clock } from '../../src/clock.ts'
import { loadConfig, type Config } from '../../src/config.ts'
import { createStorage, type EngineName, type TestStorage } from './db.ts'
import { MailCatcher, tokenFromMail } from './mail.ts'

/** Real argon2id at a cost fit for tests only; production uses the OWASP parameters. */
export const fastHasher = createArgon2Hasher({ memoryCost: 256, timeCost: 1, parallelism: 1 })

/** A clock tests move by hand: expiry is tested by advancing it, never by sleeping. */
export class TestClock implements Clock {
  constructor(public ms = Date.now()) {}
  now(): number {
    return this.ms
  }
  advance(seconds: number): void {
    this.ms += seconds * 1000
  }
}

export interface TestApp {
  app: FastifyInstance
  config: Config
  clock: TestClock
  mail: MailCatcher
  storage: TestStorage
  base: string
  post(path: string, body?: unknown, token?: string): Promise<LightMyRequestResponse>
  get(path: string, token?: string): Promise<LightMyRequestResponse>
  /** Any method; a body is sent as JSON. */
  call(method: 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT', path: string, token?: string, body?: unknown): Promise<LightMyRequestResponse>
  close(): Promise<void>
}

export interface TestAppOptions {
  env?: Record<string, string>
  overrides?: AppOverrides
  storage?: TestStorage
}

export async function startTestApp(engine: EngineName, options: TestAppOptions = {}): Promise<TestApp> {
  const storage = options.storage ?? (await createStorage(engine))
  const mail = await new MailCatcher().start()
  const config = loadConfig({
    NODE_ENV: 'test',
    DATA_DIR: storage.dataDir,
    DATABASE_URL: storage.databaseUrl,
    SMTP_URL: mail.url,
    LOG_LEVEL: 'silent',
    // Every test request comes from one inject address; the limits get tests of their own.
    RATE_LIMIT_LOGIN_PER_IP: '100000',
    RATE_LIMIT_REGISTER_PER_IP: '100000',
    RATE_LIMIT_MAIL_PER_IP: '100000',
    RATE_LIMIT_MAIL_PER_ADDRESS: '1000',
    ...options.env,
  })
  const clock = new TestClock()
  let app: FastifyInstance
  try {
    app = await buildApp(config, { clock, hasher: fastHasher, ...options.overrides })
  } catch (error) {
    // A start-up that fails (a test of a refused start) must not leave the mail catcher listening.
    await mail.close()
    if (!options.storage) await storage.drop()
    throw error
  }
  const base = config.basePath
  const auth = (token?: string) => (token ? { authorization: `Bearer ${token}` } : {})
  return {
    app,
    config,
    clock,
    mail,
    storage,
    base,
    post: (path, body, token) =>
      app.inject({ method: 'POST', url: base + path, headers: { 'content-type': 'application/json', ...auth(token) }, payload: body === undefined ? '' : JSON.stringify(body) }),
    get: (path, token) => app.inject({ method: 'GET', url: base + path, headers: auth(token) }),
    call: (method, path, token, body) =>
      app.inject({
        method,
        url: base + path,
        headers: { ...auth(token), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
      }),
    async close() {
      await app.close()
      await mail.close()
      if (!options.storage) await storage.drop()
    },
  }
}

export function uniqueEmail(prefix = 'user'): string {
  return `${prefix}-${randomBytes(4).toString('hex')}@example.com`
}

export const PASSWORD = 'correct horse battery staple'

/**
 * Registers, follows the mailed link's token, and logs in, as a user would. Where verification is
 * not required (REQUIRE_EMAIL_VERIFICATION=false) registration mails nothing, so the link is asked
 * for, as such a user would before adding a second factor.
 */
export async function registerVerifyLogin(t: TestApp, email = uniqueEmail()) {
  const registered = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Test User' })
  if (registered.statusCode !== 201) throw new Error(`register failed: ${registered.body}`)
  if (registered.json().data.verification_required === false && (await t.post('/auth/resend-verification', { email })).statusCode !== 202) throw new Error('resend-verification failed')
  const token = tokenFromMail(await t.mail.next(email))
  const verified = await t.post('/auth/verify-email', { token })
  if (verified.statusCode !== 200) throw new Error(`verify failed: ${verified.body}`)
  const login = await t.post('/auth/login', { email, password: PASSWORD })
  if (login.statusCode !== 200) throw new Error(`login failed: ${login.body}`)
  const data = login.json().data as { access_token: string; refresh_token: string }
  return { email, userId: registered.json().data.user_id as string, ...data }
}

/**
 * Polls `probe` until it returns true, for at most `withinMs`; returns how long it took. For
 * changes that reach an instance through the revocation feed rather than at once.
 */
export async function within(withinMs: number, probe: () => Promise<boolean>): Promise<number> {
  const start = performance.now()
  for (;;) {
    if (await probe()) return performance.now() - start
    if (performance.now() - start > withinMs) throw new Error(`not true within ${withinMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/**
 * A loopback port nothing listens on right now, for a server whose address must be known before it
 * listens (its PUBLIC_URL). Taken below the kernel's ephemeral range: a port the OS hands out for
 * listen(0) can be handed out again, before the test listens on it, as the local end of an
 * outgoing connection (a database pool's), which made the listen fail with EADDRINUSE.
 */
export async function freePort(): Promise<number> {
  const ephemeralLow = existsSync(EPHEMERAL_RANGE) ? Number(readFileSync(EPHEMERAL_RANGE, 'utf8').trim().split(/\s+/)[0]) : 0
  for (let attempt = 0; attempt < 100 && ephemeralLow > PORTS_FROM + 1000; attempt++) {
    const port = PORTS_FROM + Math.floor(Math.random() * (ephemeralLow - PORTS_FROM))
    if ((await listensOn(port)) === port) return port
  }
  // No range below the ephemeral one to take from: the OS's choice, as before.
  const port = await listensOn(0)
  if (port === 0) throw new Error('no loopback port could be opened')
  return port
}

const EPHEMERAL_RANGE = '/proc/sys/net/ipv4/ip_local_port_range'

/** Where freePort looks, up to the ephemeral range: above the well-known and most registered services' ports. */
const PORTS_FROM = 20_000

/** Whether a loopback listener can be opened on `port` (0: any); the port it got, or 0 when it could not. */
function listensOn(port: number): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer()
    probe.once('error', () => resolve(0))
    probe.listen(port, '127.0.0.1', () => {
      const got = (probe.address() as AddressInfo).port
      probe.close(() => resolve(got))
    })
  })
}

/** Two instances on one fresh database (each with its own in-memory state), and how to end them. */
export async function startPair(engine: EngineName): Promise<{ storage: TestStorage; a: TestApp; b: TestApp; close(): Promise<void> }> {
  const storage = await createStorage(engine)
  const a = await startTestApp(engine, { storage })
  // One mailbox for both: they share the mail outbox, so either instance's queue may deliver a
  // mail the other queued (a test waiting on A's mailbox would otherwise miss it now and then).
  const b = await startTestApp(engine, { storage, env: { SMTP_URL: a.mail.url } })
  b.mail = a.mail
  return {
    storage,
    a,
    b,
    async close() {
      await a.close()
      await b.close()
      await storage.drop()
    },
  }
}

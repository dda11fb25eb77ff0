import { existsSync, readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import path from 'node:path'
import Type, { type Static } from 'typebox'
import Value from 'typebox/value'
import { decodeKek } from './auth/key-encryption.ts'
import { PROVIDERS } from './captcha/providers.ts'
import type { CaptchaSettings } from './captcha/verifier.ts'

/**
 * Every environment variable the service reads, in one schema. The configuration type is derived
 * from it; nothing else reads process.env.
 */
const EnvSchema = Type.Object({
  NODE_ENV: Type.Union([Type.Literal('development'), Type.Literal('production'), Type.Literal('test')], {
    default: 'development',
  }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000 }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  BASE_PATH: Type.String({ pattern: '^(/[A-Za-z0-9._~-]+)+$', default: '/api/v1' }),
  DATA_DIR: Type.String({ minLength: 1, default: './data' }),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  // PostgreSQL only: how long a statement of the service may wait for a lock (0: no limit). Migrations and the CLI are not held to it.
  DATABASE_LOCK_TIMEOUT_MS: Type.Integer({ minimum: 0, maximum: 600_000, default: 10_000 }),
  SMTP_URL: Type.Optional(Type.String({ pattern: '^smtps?://' })),
  MAIL_FROM: Type.String({ minLength: 3, default: 'Portcullis <no-reply@localhost>' }),
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  REQUIRE_EMAIL_VERIFICATION: Type.Boolean({ default: true }),
  PUBLIC_URL: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$' })),
  TLS_CERT_FILE: Type.Optional(Type.String({ minLength: 1 })),
  TLS_KEY_FILE: Type.Optional(Type.String({ minLength: 1 })),
  TRUST_PROXY: Type.Optional(Type.String({ minLength: 1 })),
  CORS_ORIGINS: Type.Optional(Type.String({ minLength: 1 })),
  VERIFY_EMAIL_URL: Type.Optional(Type.String({ pattern: '\\{token\\}' })),
  RESET_PASSWORD_URL: Type.Optional(Type.String({ pattern: '\\{token\\}' })),
  APP_NAME: Type.String({ minLength: 1, maxLength: 60, pattern: '^[^\\u0000-\\u001f\\u007f]+$', default: 'Portcullis' }),
  APP_URL: Type.Optional(Type.String({ pattern: '^https?://[^/?#\\s]+(/[^\\s]*)?$' })),
  RATE_LIMIT_LOGIN_PER_IP: Type.Integer({ minimum: 1, default: 60 }),
  LOGIN_FREE_FAILURES: Type.Integer({ minimum: 1, maximum: 100, default: 10 }),
  LOGIN_MAX_DELAY_SECONDS: Type.Integer({ minimum: 1, maximum: 86_400, default: 900 }),
  RATE_LIMIT_REGISTER_PER_IP: Type.Integer({ minimum: 1, default: 20 }),
  RATE_LIMIT_CLIENT_REGISTRATION_PER_IP: Type.Integer({ minimum: 1, default: 10 }),
  RATE_LIMIT_MAIL_PER_IP: Type.Integer({ minimum: 1, default: 20 }),
  RATE_LIMIT_MAIL_PER_ADDRESS: Type.Integer({ minimum: 1, default: 5 }),
  RATE_LIMIT_API_KEY_FAILURES_PER_IP: Type.Integer({ minimum: 1, default: 10 }),
  HASH_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 64, default: 2 }),
  HASH_QUEUE: Type.Integer({ minimum: 0, maximum: 100_000, default: 512 }),
  HASH_WAIT_SECONDS: Type.Integer({ minimum: 1, maximum: 60, default: 5 }),
  MAIL_MAX_AGE_HOURS: Type.Integer({ minimum: 1, maximum: 720, default: 24 }),
  MAIL_LEASE_SECONDS: Type.Integer({ minimum: 1, maximum: 3600, default: 120 }),
  WEBAUTHN_RP_ID: Type.Optional(Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9.-]+$' })),
  WEBAUTHN_RP_NAME: Type.Optional(Type.String({ minLength: 1, maxLength: 60, pattern: '^[^\\u0000-\\u001f\\u007f]+$' })),
  WEBAUTHN_ORIGINS: Type.Optional(Type.String({ minLength: 1 })),
  OIDC_PROVIDERS: Type.Optional(Type.String({ minLength: 1, maxLength: 400 })),
  OIDC_REDIRECT_ORIGINS: Type.Optional(Type.String({ minLength: 1 })),
  EMAIL_SIGNUP: Type.Boolean({ default: false }),
  ORGANIZATIONS: Type.Union([Type.Literal('on'), Type.Literal('off'), Type.Literal('admin')], { default: 'on' }),
  CAPTCHA_PROVIDER: Type.Optional(Type.Union([Type.Literal('turnstile'), Type.Literal('hcaptcha')])),
  CAPTCHA_SECRET: Type.Optional(Type.String({ minLength: 1, maxLength: 512, pattern: '^[\\x21-\\x7e]+$' })),
  CAPTCHA_SITE_KEY: Type.Optional(Type.String({ minLength: 1, maxLength: 256, pattern: '^[A-Za-z0-9_-]+$' })),
  CAPTCHA_VERIFY_URL: Type.Optional(Type.String({ pattern: '^https?://[^/?#\\s]+(/[^\\s]*)?$' })),
  CAPTCHA_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, maximum: 30, default: 5 }),
  FIREBASE_HASH_KEY: Type.Optional(Type.String({ minLength: 4, maxLength: 512, pattern: '^[A-Za-z0-9+/]+={0,2}$' })),
  FIREBASE_SALT_SEPARATOR: Type.Optional(Type.String({ minLength: 2, maxLength: 64, pattern: '^[A-Za-z0-9+/]+={0,2}$' })),
  FIREBASE_ROUNDS: Type.Integer({ minimum: 1, maximum: 8, default: 8 }),
  FIREBASE_MEM_COST: Type.Integer({ minimum: 1, maximum: 14, default: 14 }),
  LEGACY_VERIFY_URL: Type.Optional(Type.String({ pattern: '^https?://[^/?#\\s]+(/[^\\s]*)?$' })),
  LEGACY_VERIFY_SECRET: Type.Optional(Type.String({ minLength: 16, maxLength: 512, pattern: '^[\\x21-\\x7e]+$' })),
  METRICS_TOKEN: Type.Optional(Type.String({ minLength: 16, maxLength: 512, pattern: '^[\\x21-\\x7e]+$' })),
  METRICS_PUBLIC: Type.Boolean({ default: false }),
  DOCS: Type.Optional(Type.Union([Type.Literal('on'), Type.Literal('off')])),
  OP_ISSUER: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+/?$' })),
  OP_ACCESS_TOKEN_TTL: Type.Integer({ minimum: 60, maximum: 86_400, default: 900 }),
  OP_REGISTRATION: Type.Union([Type.Literal('off'), Type.Literal('open'), Type.Literal('token')], { default: 'off' }),
  OP_CLIENT_METADATA: Type.Union([Type.Literal('on'), Type.Literal('off')], { default: 'on' }),
  CONSOLE: Type.Union([Type.Literal('on'), Type.Literal('off')], { default: 'on' }),
  OP_CLIENT_METADATA_HOSTS: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
  MFA_STEP_UP_SECONDS: Type.Integer({ minimum: 30, maximum: 86_400, default: 600 }),
  AUDIT_RETENTION_DAYS: Type.Integer({ minimum: 0, maximum: 36_500, default: 365 }),
  RETENTION_INTERVAL_SECONDS: Type.Integer({ minimum: 1, maximum: 86_400, default: 3600 }),
  KEY_ENCRYPTION_KEY: Type.Optional(Type.String({ minLength: 1 })),
  OLD_KEY_ENCRYPTION_KEY: Type.Optional(Type.String({ minLength: 1 })),
  SHUTDOWN_DRAIN_SECONDS: Type.Optional(Type.Integer({ minimum: 0, maximum: 60 })),
  REQUEST_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, maximum: 600, default: 30 }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info' },
  ),
})

type Env = Static<typeof EnvSchema>

/** A wrong value: start-up stops with this one line. */
export class ConfigError extends Error {
  constructor(variable: string, problem: string) {
    super(`Invalid configuration: ${variable} ${problem}`)
    this.name = 'ConfigError'
  }
}

const PROXY_KEYWORDS = new Set(['loopback', 'linklocal', 'uniquelocal'])

function parseTrustProxy(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined
  const entries = value.split(',').map((entry) => entry.trim()).filter(Boolean)
  for (const entry of entries) {
    if (PROXY_KEYWORDS.has(entry)) continue
    const [address, bits, ...rest] = entry.split('/')
    const family = isIP(address ?? '')
    const maxBits = family === 4 ? 32 : 128
    const bitsOk = bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= maxBits)
    if (family === 0 || !bitsOk || rest.length > 0) {
      throw new ConfigError('TRUST_PROXY', `has "${entry}", which is not an IP address, CIDR range or one of ${[...PROXY_KEYWORDS].join(', ')}`)
    }
  }
  if (entries.length === 0) throw new ConfigError('TRUST_PROXY', 'is empty')
  return entries
}

function describe(variable: string, schema: unknown): string {
  const s = schema as { anyOf?: { const?: unknown }[]; type?: string; pattern?: string; minimum?: number; maximum?: number }
  if (s.anyOf) return `must be one of ${s.anyOf.map((v) => v.const).join(', ')}`
  if (s.type === 'integer') return s.maximum === undefined ? `must be a whole number of at least ${s.minimum}` : `must be a whole number from ${s.minimum} to ${s.maximum}`
  if (s.type === 'boolean') return 'must be true or false'
  if (variable === 'METRICS_TOKEN') return 'must be 16 to 512 printable characters without spaces (openssl rand -hex 32)'
  if (variable === 'APP_NAME') return 'must be 1 to 60 characters without control characters'
  if (variable === 'CAPTCHA_SECRET') return 'must be the secret key from the provider\'s dashboard (printable characters, no spaces)'
  if (variable === 'CAPTCHA_SITE_KEY') return 'must be the site key from the provider\'s dashboard (letters, digits, - and _)'
  if (variable === 'LEGACY_VERIFY_SECRET') return 'must be 16 to 512 printable characters without spaces (openssl rand -hex 32)'
  if (variable === 'FIREBASE_HASH_KEY' || variable === 'FIREBASE_SALT_SEPARATOR') return 'must be base64, as the Firebase console shows it (Authentication, Users, Password hash parameters)'
  if (variable === 'OP_ISSUER') return 'must be an origin with no path (https://id.example.com): the provider serves its discovery documents at the issuer\'s root'
  if (variable.endsWith('_URL') && s.pattern) return `must be a URL matching ${s.pattern}`
  if (s.pattern) return `must match ${s.pattern}`
  return 'is not valid'
}

function parseEnv(source: Record<string, string | undefined>): Env {
  const raw: Record<string, unknown> = {}
  for (const key of Object.keys(EnvSchema.properties)) {
    const value = source[key]
    if (value === undefined || value === '') continue
    if (key === 'REQUIRE_EMAIL_VERIFICATION' || key === 'EMAIL_SIGNUP' || key === 'METRICS_PUBLIC') {
      // Only the two spellings; "yes", "0" or a typo must not silently mean either.
      raw[key] = value === 'true' ? true : value === 'false' ? false : value
    } else if ((EnvSchema.properties[key as keyof typeof EnvSchema.properties] as { type?: string }).type === 'integer') {
      raw[key] = /^\d+$/.test(value) ? Number(value) : value
    } else {
      raw[key] = value
    }
  }
  const withDefaults = Value.Default(EnvSchema, raw) as Record<string, unknown>
  for (const key of Object.keys(EnvSchema.properties) as (keyof Env)[]) {
    const propertySchema = EnvSchema.properties[key]
    if (withDefaults[key] === undefined) continue
    if (!Value.Check(propertySchema, withDefaults[key])) throw new ConfigError(key, describe(key, propertySchema))
  }
  return withDefaults as Env
}

function parseKek(variable: string, value: string | undefined): Buffer | undefined {
  if (value === undefined) return undefined
  const key = decodeKek(value)
  if (!key) throw new ConfigError(variable, 'must be base64 of exactly 32 bytes (openssl rand -base64 32)')
  return key
}

const ORIGIN = /^https?:\/\/[A-Za-z0-9.-]+(:\d{1,5})?$/

function parseOrigins(value: string | undefined, variable = 'CORS_ORIGINS'): string[] {
  if (value === undefined) return []
  const origins = value.split(',').map((origin) => origin.trim()).filter(Boolean)
  for (const origin of origins) {
    if (!ORIGIN.test(origin)) throw new ConfigError(variable, `has "${origin}", which is not an origin like https://app.example.com`)
  }
  return origins
}

/**
 * The passkey relying party (docs/mfa.md, Passkeys). A browser makes credentials only for an RP ID that
 * is the page's host or a parent domain of it: an origin given in WEBAUTHN_ORIGINS that cannot
 * fit is a start-up error, not a ceremony that fails later for every user. The default origins
 * (PUBLIC_URL's and CORS_ORIGINS) keep only those that fit, so a CORS origin on another domain
 * does not stop a service that never meant it for passkeys.
 */
function relyingParty(env: { WEBAUTHN_RP_ID?: string; WEBAUTHN_RP_NAME?: string; WEBAUTHN_ORIGINS?: string }, publicUrl: string, corsOrigins: string[], appName: string) {
  const id = (env.WEBAUTHN_RP_ID ?? new URL(publicUrl).hostname).toLowerCase()
  const fits = (origin: string) => {
    const host = new URL(origin).hostname.toLowerCase()
    return host === id || host.endsWith(`.${id}`)
  }
  let origins: string[]
  if (env.WEBAUTHN_ORIGINS) {
    origins = parseOrigins(env.WEBAUTHN_ORIGINS, 'WEBAUTHN_ORIGINS')
    const misfit = origins.find((origin) => !fits(origin))
    if (misfit) throw new ConfigError('WEBAUTHN_ORIGINS', `has ${misfit}, whose host is not ${id} (WEBAUTHN_RP_ID) or a subdomain of it`)
  } else {
    origins = [new URL(publicUrl).origin, ...corsOrigins].filter(fits)
    if (origins.length === 0) throw new ConfigError('WEBAUTHN_RP_ID', `(${id}) fits neither PUBLIC_URL nor CORS_ORIGINS: set WEBAUTHN_ORIGINS to the pages that use passkeys`)
  }
  // A page allowed to call the API that silently cannot use passkeys (an application on
  // 127.0.0.1 while the RP ID is localhost, say) is logged at start with the reason.
  const unlisted = corsOrigins
    .filter((origin) => !origins.includes(origin))
    .map((origin) => ({ origin, reason: fits(origin) ? 'it is not in WEBAUTHN_ORIGINS' : `its host is not ${id} (WEBAUTHN_RP_ID) or a subdomain of it` }))
  return { id, name: env.WEBAUTHN_RP_NAME?.trim() || appName, origins, unlisted }
}

/** One identity provider (docs/oidc.md), from OIDC_PROVIDERS and its OIDC_{NAME}_* variables. */
export interface OidcProviderConfig {
  /** As in OIDC_PROVIDERS and the URLs: lower-case letters, digits and dashes. */
  name: string
  label: string
  issuer: string
  clientId: string
  /** Unset for a public client. */
  clientSecret: string | undefined
  scopes: string
  /** OIDC_{NAME}_TRUST_EMAIL: the operator vouches for addresses this provider sends without email_verified. */
  trustEmail: boolean
}

const PROVIDER_NAME = /^[a-z][a-z0-9-]{0,31}$/

/**
 * The identity providers. Their variables are named after them (OIDC_GOOGLE_ISSUER for `google`),
 * so they are read here rather than declared in the schema above. An issuer must be https://,
 * except a loopback one outside production (a provider run beside the service in development).
 */
function oidcProviders(source: Record<string, string | undefined>, list: string | undefined, production: boolean): OidcProviderConfig[] {
  if (list === undefined) return []
  const names = list.split(',').map((name) => name.trim()).filter(Boolean)
  const providers: OidcProviderConfig[] = []
  for (const name of names) {
    if (!PROVIDER_NAME.test(name)) throw new ConfigError('OIDC_PROVIDERS', `has "${name}": a provider's name is lower-case letters, digits and dashes, starting with a letter`)
    if (providers.some((p) => p.name === name)) throw new ConfigError('OIDC_PROVIDERS', `names ${name} twice`)
    const prefix = `OIDC_${name.toUpperCase().replace(/-/g, '_')}_`
    const read = (key: string) => source[prefix + key]?.trim() || undefined
    const issuer = read('ISSUER')
    const clientId = read('CLIENT_ID')
    if (!issuer) throw new ConfigError(`${prefix}ISSUER`, `must be set for the provider ${name} (its issuer URL, e.g. https://accounts.google.com)`)
    if (!clientId) throw new ConfigError(`${prefix}CLIENT_ID`, `must be set for the provider ${name}`)
    let url: URL
    try {
      url = new URL(issuer)
    } catch {
      throw new ConfigError(`${prefix}ISSUER`, 'must be a URL')
    }
    const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback && !production)) {
      throw new ConfigError(`${prefix}ISSUER`, 'must be an https:// URL (http:// only for a loopback provider outside production)')
    }
    const trust = read('TRUST_EMAIL')
    if (trust !== undefined && trust !== 'true' && trust !== 'false') throw new ConfigError(`${prefix}TRUST_EMAIL`, 'must be true or false')
    const scopes = read('SCOPES') ?? 'openid email profile'
    if (!scopes.split(/\s+/).includes('openid')) throw new ConfigError(`${prefix}SCOPES`, 'must include openid')
    providers.push({ name, label: read('LABEL') ?? name.charAt(0).toUpperCase() + name.slice(1), issuer, clientId, clientSecret: read('CLIENT_SECRET'), scopes, trustEmail: trust === 'true' })
  }
  return providers
}

const LOOPBACK_HOSTS = ['localhost', '127.0.0.1', '[::1]']

/**
 * Bot protection (docs/SECURITY.md, "Bot protection"): on with CAPTCHA_PROVIDER, and then complete or
 * not at all. A secret or site key without a provider is refused rather than ignored, so nobody
 * believes the forms protected while they are not; the site key is required because the service's
 * own pages cannot render the widget without it, and their forms would refuse everyone.
 */
function captchaSettings(env: Env, production: boolean): CaptchaSettings | null {
  if (!env.CAPTCHA_PROVIDER) {
    for (const variable of ['CAPTCHA_SECRET', 'CAPTCHA_SITE_KEY', 'CAPTCHA_VERIFY_URL'] as const) {
      if (env[variable] !== undefined) throw new ConfigError('CAPTCHA_PROVIDER', `must be turnstile or hcaptcha when ${variable} is set (bot protection is off without it)`)
    }
    return null
  }
  const provider = env.CAPTCHA_PROVIDER
  if (!env.CAPTCHA_SECRET) throw new ConfigError('CAPTCHA_SECRET', `must be set when CAPTCHA_PROVIDER is (the secret key of your ${provider} widget)`)
  if (!env.CAPTCHA_SITE_KEY) throw new ConfigError('CAPTCHA_SITE_KEY', `must be set when CAPTCHA_PROVIDER is (the public site key of your ${provider} widget: the pages render the widget with it)`)
  const verifyUrl = env.CAPTCHA_VERIFY_URL ?? PROVIDERS[provider].siteverify
  // The secret travels in the request's body: only over TLS, except to a stand-in on this machine outside production.
  const url = new URL(verifyUrl)
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && LOOPBACK_HOSTS.includes(url.hostname) && !production)) {
    throw new ConfigError('CAPTCHA_VERIFY_URL', 'must be an https:// URL (http:// only to a loopback address outside production)')
  }
  return { provider, secret: env.CAPTCHA_SECRET, siteKey: env.CAPTCHA_SITE_KEY, verifyUrl, timeoutMs: env.CAPTCHA_TIMEOUT_SECONDS * 1000 }
}

/**
 * Moving in (docs/migrating.md): Firebase's project hash parameters (all of FIREBASE_HASH_KEY and
 * FIREBASE_SALT_SEPARATOR or none; rounds and memory cost default to Firebase's usual 8 and 14), and
 * the old system lazy migration asks (its URL and secret together; https only in production, where
 * its address is vetted like a webhook's).
 */
function importSettings(env: Env, production: boolean) {
  if ((env.FIREBASE_HASH_KEY === undefined) !== (env.FIREBASE_SALT_SEPARATOR === undefined)) {
    throw new ConfigError(env.FIREBASE_HASH_KEY === undefined ? 'FIREBASE_HASH_KEY' : 'FIREBASE_SALT_SEPARATOR', 'must be set with the other (both from the Firebase console, Authentication, Users, Password hash parameters)')
  }
  const firebase = env.FIREBASE_HASH_KEY && env.FIREBASE_SALT_SEPARATOR
    ? { signerKey: Buffer.from(env.FIREBASE_HASH_KEY, 'base64'), saltSeparator: Buffer.from(env.FIREBASE_SALT_SEPARATOR, 'base64'), rounds: env.FIREBASE_ROUNDS, memCost: env.FIREBASE_MEM_COST }
    : null
  if ((env.LEGACY_VERIFY_URL === undefined) !== (env.LEGACY_VERIFY_SECRET === undefined)) {
    throw new ConfigError(env.LEGACY_VERIFY_URL === undefined ? 'LEGACY_VERIFY_URL' : 'LEGACY_VERIFY_SECRET', 'must be set with the other (lazy migration needs both)')
  }
  let legacy: { url: string; secret: string } | null = null
  if (env.LEGACY_VERIFY_URL && env.LEGACY_VERIFY_SECRET) {
    // The password travels in the body: only over TLS in production.
    if (production && new URL(env.LEGACY_VERIFY_URL).protocol !== 'https:') throw new ConfigError('LEGACY_VERIFY_URL', 'must be an https:// URL in production')
    legacy = { url: env.LEGACY_VERIFY_URL, secret: env.LEGACY_VERIFY_SECRET }
  }
  return { firebase, legacy }
}

export function loadConfig(source: Record<string, string | undefined> = process.env) {
  const env = parseEnv(source)
  const production = env.NODE_ENV === 'production'
  const trustProxy = parseTrustProxy(env.TRUST_PROXY)

  if ((env.TLS_CERT_FILE === undefined) !== (env.TLS_KEY_FILE === undefined)) {
    throw new ConfigError(env.TLS_CERT_FILE ? 'TLS_KEY_FILE' : 'TLS_CERT_FILE', 'must be set together with the other TLS file')
  }
  let tls: { cert: Buffer; key: Buffer } | undefined
  if (env.TLS_CERT_FILE && env.TLS_KEY_FILE) {
    for (const variable of ['TLS_CERT_FILE', 'TLS_KEY_FILE'] as const) {
      if (!existsSync(env[variable]!)) throw new ConfigError(variable, `names a file that does not exist: ${env[variable]}`)
    }
    tls = { cert: readFileSync(env.TLS_CERT_FILE), key: readFileSync(env.TLS_KEY_FILE) }
  }

  const keyEncryptionKey = parseKek('KEY_ENCRYPTION_KEY', env.KEY_ENCRYPTION_KEY)
  const oldKeyEncryptionKey = parseKek('OLD_KEY_ENCRYPTION_KEY', env.OLD_KEY_ENCRYPTION_KEY)

  if (env.APP_NAME.trim() === '') throw new ConfigError('APP_NAME', describe('APP_NAME', EnvSchema.properties.APP_NAME))

  const publicUrl = (env.PUBLIC_URL ?? `${tls ? 'https' : 'http'}://localhost:${env.PORT}`).replace(/\/+$/, '')
  const corsOrigins = parseOrigins(env.CORS_ORIGINS)

  if (production) {
    // HTTPS is mandatory in production: either we terminate TLS or a trusted proxy does.
    if (!tls && !trustProxy) {
      throw new ConfigError('TLS_CERT_FILE', 'or TRUST_PROXY must be set in production (HTTPS is required)')
    }
    if (!env.SMTP_URL) throw new ConfigError('SMTP_URL', 'must be set in production (mail cannot go to the outbox)')
    if (!publicUrl.startsWith('https://')) throw new ConfigError('PUBLIC_URL', 'must be an https:// URL in production')
    // A database copy alone must not be enough to sign tokens: the key lives outside it.
    if (!keyEncryptionKey) throw new ConfigError('KEY_ENCRYPTION_KEY', 'must be set in production (base64 of 32 random bytes: openssl rand -base64 32)')
  }

  return {
    nodeEnv: env.NODE_ENV,
    production,
    port: env.PORT,
    host: env.HOST,
    basePath: env.BASE_PATH,
    dataDir: path.resolve(env.DATA_DIR),
    databaseUrl: env.DATABASE_URL,
    lockTimeoutMs: env.DATABASE_LOCK_TIMEOUT_MS,
    smtpUrl: env.SMTP_URL,
    mailFrom: env.MAIL_FROM,
    redisUrl: env.REDIS_URL,
    requireEmailVerification: env.REQUIRE_EMAIL_VERIFICATION,
    /**
     * Who may read /metrics and /docs (docs/operations.md): with `token`, only a caller bearing it;
     * otherwise anyone when `public` (true outside production, or METRICS_PUBLIC=true), nobody in
     * production. The docs are on unless DOCS=off, and off in production unless DOCS=on.
     */
    exposure: {
      metrics: { token: env.METRICS_TOKEN ?? null, public: env.METRICS_PUBLIC || !production },
      docs: env.DOCS === undefined ? !production : env.DOCS === 'on',
    },
    /** Bot protection on register, forgot-password, resend-verification and the e-mailed sign-in's start; null when off. */
    captcha: captchaSettings(env, production),
    /** CONSOLE: the operators' console at {PUBLIC_URL}/console (docs/console.md); off answers 404 there. */
    console: env.CONSOLE === 'on',
    /** FIREBASE_* and LEGACY_VERIFY_*: imported Firebase hashes, and lazy migration (docs/migrating.md). */
    imports: importSettings(env, production),
    /** EMAIL_SIGNUP: the first e-mailed sign-in of an unknown address makes a verified account without a password. */
    emailSignup: env.EMAIL_SIGNUP,
    /** ORGANIZATIONS: on (users create them), admin (only operators do, POST /admin/organizations), off (no organisation routes: 404). */
    organizations: env.ORGANIZATIONS,
    publicUrl,
    tls,
    trustProxy,
    corsOrigins,
    verifyEmailUrl: env.VERIFY_EMAIL_URL ?? `${publicUrl}/verify-email?token={token}`,
    resetPasswordUrl: env.RESET_PASSWORD_URL ?? `${publicUrl}/reset-password?token={token}`,
    /** Names the product on the pages and in mail. */
    appName: env.APP_NAME.trim(),
    /** Where the pages' success screens link back to, when set; never taken from a request. */
    appUrl: env.APP_URL,
    logLevel: env.LOG_LEVEL,
    /** Encrypts the private signing keys (and the API-key hashing secret); development generates one into DATA_DIR. */
    keyEncryptionKey,
    /** Only for `portcullis keys rewrap`: the key the stored values are encrypted under now. */
    oldKeyEncryptionKey,
    /** The durable mail queue: give up after this age; a claimed mail is one instance's for the lease. */
    mailQueue: { maxAgeMs: env.MAIL_MAX_AGE_HOURS * 3600_000, leaseMs: env.MAIL_LEASE_SECONDS * 1000 },
    /** How recent a second factor must be for the sensitive actions (README.md, "Recent"). */
    mfaStepUpMs: env.MFA_STEP_UP_SECONDS * 1000,
    /** The identity providers, and the origins a provider sign-in may send the browser back to. */
    oidc: {
      providers: oidcProviders(source, env.OIDC_PROVIDERS, production),
      redirectOrigins: env.OIDC_REDIRECT_ORIGINS
        ? parseOrigins(env.OIDC_REDIRECT_ORIGINS, 'OIDC_REDIRECT_ORIGINS')
        : [...new Set([...(env.APP_URL ? [new URL(env.APP_URL).origin] : []), new URL(publicUrl).origin, ...corsOrigins])],
    },
    /**
     * Portcullis as an OpenID provider (src/provider/): its issuer (an origin: the library serves
     * discovery at the issuer and RFC 8414's path only when it has no path) and the life of its
     * access tokens; dynamic registration (OP_REGISTRATION: off, open, or token for an initial access
     * token) and client ID metadata documents (OP_CLIENT_METADATA, with OP_CLIENT_METADATA_HOSTS the
     * hosts allowed to serve them; null: any).
     */
    provider: {
      issuer: (env.OP_ISSUER ?? new URL(publicUrl).origin).replace(/\/+$/, ''),
      accessTokenTtlSeconds: env.OP_ACCESS_TOKEN_TTL,
      registration: env.OP_REGISTRATION,
      clientMetadata: env.OP_CLIENT_METADATA === 'on',
      clientMetadataHosts: env.OP_CLIENT_METADATA_HOSTS === undefined ? null : env.OP_CLIENT_METADATA_HOSTS.split(',').map((host) => host.trim().toLowerCase()).filter(Boolean),
    },
    /** The passkey relying party: RP ID, its name, the origins ceremonies may come from. */
    webauthn: relyingParty(env, publicUrl, corsOrigins, env.APP_NAME.trim()),
    /** What is deleted, and how often: ended sessions, spent tokens, mail records, old audit events (src/retention.ts). */
    retention: { intervalMs: env.RETENTION_INTERVAL_SECONDS * 1000, auditDays: env.AUDIT_RETENTION_DAYS },
    /** After SIGTERM: how long /readyz says 503 while everything else is still served (5 s in production). */
    shutdownDrainMs: (env.SHUTDOWN_DRAIN_SECONDS ?? (production ? 5 : 1)) * 1000,
    /** A request whose headers and body have not all arrived by then is answered 408 and its connection closed (slow clients). */
    requestTimeoutMs: env.REQUEST_TIMEOUT_SECONDS * 1000,
    limits: {
      loginPerIpPerMinute: env.RATE_LIMIT_LOGIN_PER_IP,
      loginFreeFailures: env.LOGIN_FREE_FAILURES,
      loginMaxDelaySeconds: env.LOGIN_MAX_DELAY_SECONDS,
      registerPerIpPerHour: env.RATE_LIMIT_REGISTER_PER_IP,
      mailPerIpPerHour: env.RATE_LIMIT_MAIL_PER_IP,
      mailPerAddressPerHour: env.RATE_LIMIT_MAIL_PER_ADDRESS,
      apiKeyFailuresPerIpPerMinute: env.RATE_LIMIT_API_KEY_FAILURES_PER_IP,
      clientRegistrationsPerIpPerHour: env.RATE_LIMIT_CLIENT_REGISTRATION_PER_IP,
    },
    hashing: { concurrency: env.HASH_CONCURRENCY, queue: env.HASH_QUEUE, maxWaitMs: env.HASH_WAIT_SECONDS * 1000 },
    /** The `iss` of every token this service signs. */
    issuer: publicUrl,
    /** The `aud` of access tokens: the API they are meant for (RFC 9068). */
    audience: `${publicUrl}${env.BASE_PATH}`,
  }
}

export type Config = ReturnType<typeof loadConfig>

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { loadConfig } from '../../src/config.ts'

describe('config', () => {
  test('needs no variables in development and applies the documented defaults', () => {
    const config = loadConfig({})
    assert.equal(config.port, 3000)
    assert.equal(config.host, '127.0.0.1')
    assert.equal(config.basePath, '/api/v1')
    assert.equal(config.databaseUrl, undefined)
    assert.equal(config.requireEmailVerification, true)
    assert.equal(config.publicUrl, 'http://localhost:3000')
    assert.equal(config.verifyEmailUrl, 'http://localhost:3000/verify-email?token={token}')
    assert.equal(config.resetPasswordUrl, 'http://localhost:3000/reset-password?token={token}')
    assert.match(config.dataDir, /data$/)
    assert.equal(config.appName, 'Portcullis')
    assert.equal(config.appUrl, undefined)
    assert.equal(config.requestTimeoutMs, 30_000)
  })

  const wrong: [string, Record<string, string>, RegExp][] = [
    ['a port that is not a number', { PORT: 'http' }, /^Invalid configuration: PORT /],
    ['a port out of range', { PORT: '70000' }, /^Invalid configuration: PORT /],
    ['a boolean that is neither true nor false', { REQUIRE_EMAIL_VERIFICATION: 'yes' }, /REQUIRE_EMAIL_VERIFICATION must be true or false/],
    ['an unknown NODE_ENV', { NODE_ENV: 'staging' }, /NODE_ENV must be one of/],
    ['a METRICS_TOKEN too short to be a secret', { METRICS_TOKEN: 'short' }, /METRICS_TOKEN must be 16 to 512 printable characters/],
    ['a METRICS_PUBLIC that is neither true nor false', { METRICS_PUBLIC: 'yes' }, /METRICS_PUBLIC must be true or false/],
    ['a DOCS that is neither on nor off', { DOCS: 'true' }, /DOCS must be one of on, off/],
    ['a non-PostgreSQL DATABASE_URL', { DATABASE_URL: 'mysql://x' }, /DATABASE_URL/],
    ['a BASE_PATH without a leading slash', { BASE_PATH: 'v1' }, /BASE_PATH/],
    ['a link template without {token}', { VERIFY_EMAIL_URL: 'https://app.example/verify' }, /VERIFY_EMAIL_URL/],
    ['a TRUST_PROXY entry that is not an address', { TRUST_PROXY: '10.0.0.0/8,proxy.local' }, /TRUST_PROXY has "proxy.local"/],
    ['a CIDR with too many bits', { TRUST_PROXY: '10.0.0.0/33' }, /TRUST_PROXY/],
    ['only one of the TLS files', { TLS_CERT_FILE: '/etc/hostname' }, /TLS_KEY_FILE/],
    ['an APP_NAME with a line break', { APP_NAME: 'Acme\nInc' }, /APP_NAME must be 1 to 60 characters/],
    ['an APP_NAME of spaces', { APP_NAME: '   ' }, /APP_NAME must be 1 to 60 characters/],
    ['an APP_URL that is not a web address', { APP_URL: 'javascript:alert(1)' }, /APP_URL must be a URL/],
    ['a TLS file that does not exist', { TLS_CERT_FILE: '/nope.pem', TLS_KEY_FILE: '/nope.key' }, /TLS_CERT_FILE names a file that does not exist/],
    ['a request timeout of zero (it would never cut a slow client)', { REQUEST_TIMEOUT_SECONDS: '0' }, /REQUEST_TIMEOUT_SECONDS must be a whole number from 1 to 600/],
    ['a request timeout with a unit', { REQUEST_TIMEOUT_SECONDS: '30s' }, /REQUEST_TIMEOUT_SECONDS must be a whole number from 1 to 600/],
  ]
  for (const [name, env, message] of wrong) {
    test(`stops with one line naming the variable for ${name}`, () => {
      assert.throws(() => loadConfig(env), (error: Error) => {
        assert.match(error.message, message)
        assert.ok(!error.message.includes('\n'))
        return true
      })
    })
  }

  test('the passkey relying party: PUBLIC_URL by default, the CORS origins that fit, and a misfit named at start', () => {
    assert.deepEqual(loadConfig({}).webauthn, { id: 'localhost', name: 'Portcullis', origins: ['http://localhost:3000'], unlisted: [] })
    const shared = loadConfig({ PUBLIC_URL: 'https://auth.example.com', CORS_ORIGINS: 'https://app.example.com,https://partner.example.org', WEBAUTHN_RP_ID: 'example.com', APP_NAME: 'Acme' })
    assert.deepEqual(shared.webauthn, { id: 'example.com', name: 'Acme', origins: ['https://auth.example.com', 'https://app.example.com'], unlisted: [{ origin: 'https://partner.example.org', reason: 'its host is not example.com (WEBAUTHN_RP_ID) or a subdomain of it' }] })
    assert.deepEqual(loadConfig({ PUBLIC_URL: 'https://auth.example.com', WEBAUTHN_RP_NAME: 'Acme Sign-in' }).webauthn.name, 'Acme Sign-in')
    assert.throws(() => loadConfig({ PUBLIC_URL: 'https://auth.example.com', WEBAUTHN_RP_ID: 'example.com', WEBAUTHN_ORIGINS: 'https://app.example.com,https://evil.example.net' }), /WEBAUTHN_ORIGINS has https:\/\/evil\.example\.net/)
    assert.throws(() => loadConfig({ PUBLIC_URL: 'https://auth.example.com', WEBAUTHN_RP_ID: 'other.example' }), /WEBAUTHN_RP_ID/)
    assert.throws(() => loadConfig({ WEBAUTHN_ORIGINS: 'not an origin' }), /WEBAUTHN_ORIGINS/)
    // A page allowed to call the API that cannot use passkeys is named, with the reason, for the start-up log.
    assert.deepEqual(loadConfig({ CORS_ORIGINS: 'http://127.0.0.1:5173,http://localhost:5173' }).webauthn.unlisted, [
      { origin: 'http://127.0.0.1:5173', reason: 'its host is not localhost (WEBAUTHN_RP_ID) or a subdomain of it' },
    ])
    assert.deepEqual(loadConfig({ CORS_ORIGINS: 'http://localhost:5173', WEBAUTHN_ORIGINS: 'http://localhost:3000' }).webauthn.unlisted, [
      { origin: 'http://localhost:5173', reason: 'it is not in WEBAUTHN_ORIGINS' },
    ])
  })

  test('the OpenID provider: its issuer is PUBLIC_URL\'s origin by default, an issuer with a path is refused; dynamic registration is off unless open or token; metadata documents on unless off', () => {
    assert.equal(loadConfig({ PUBLIC_URL: 'https://auth.example.com/base' }).provider.issuer, 'https://auth.example.com')
    assert.equal(loadConfig({ OP_ISSUER: 'https://id.example.com/' }).provider.issuer, 'https://id.example.com')
    assert.throws(() => loadConfig({ OP_ISSUER: 'https://id.example.com/tenant' }), /OP_ISSUER must be an origin with no path/)
    assert.throws(() => loadConfig({ OP_REGISTRATION: 'initial-access-token' }), /OP_REGISTRATION must be one of off, open, token/)
    assert.equal(loadConfig({}).provider.registration, 'off')
    assert.equal(loadConfig({ OP_REGISTRATION: 'token' }).provider.registration, 'token')
    assert.equal(loadConfig({}).provider.clientMetadata, true)
    assert.equal(loadConfig({ OP_CLIENT_METADATA: 'off' }).provider.clientMetadata, false)
    assert.deepEqual(loadConfig({ OP_CLIENT_METADATA_HOSTS: 'Claude.ai, vscode.dev' }).provider.clientMetadataHosts, ['claude.ai', 'vscode.dev'])
    assert.equal(loadConfig({}).provider.accessTokenTtlSeconds, 900)
  })

  test('production refuses plain HTTP, missing SMTP and an http PUBLIC_URL', () => {
    assert.throws(() => loadConfig({ NODE_ENV: 'production', SMTP_URL: 'smtp://relay:25', PUBLIC_URL: 'https://auth.example' }), /TLS_CERT_FILE or TRUST_PROXY/)
    assert.throws(() => loadConfig({ NODE_ENV: 'production', TRUST_PROXY: '10.0.0.1', PUBLIC_URL: 'https://auth.example' }), /SMTP_URL must be set in production/)
    assert.throws(() => loadConfig({ NODE_ENV: 'production', TRUST_PROXY: '10.0.0.1', SMTP_URL: 'smtp://relay:25' }), /PUBLIC_URL must be an https/)
    const production = { NODE_ENV: 'production', TRUST_PROXY: '10.0.0.0/8, loopback', SMTP_URL: 'smtp://relay:25', PUBLIC_URL: 'https://auth.example/', BASE_PATH: '/v1' }
    assert.throws(() => loadConfig(production), /^Error: Invalid configuration: KEY_ENCRYPTION_KEY must be set in production|KEY_ENCRYPTION_KEY must be set in production/)
    assert.throws(() => loadConfig({ ...production, KEY_ENCRYPTION_KEY: Buffer.alloc(16).toString('base64') }), /KEY_ENCRYPTION_KEY must be base64 of exactly 32 bytes/)
    const ok = loadConfig({ ...production, KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString('base64') })
    assert.deepEqual(ok.trustProxy, ['10.0.0.0/8', 'loopback'])
    assert.equal(ok.audience, 'https://auth.example/v1')
  })

  test('moving in: Firebase\'s parameters and the legacy system come in pairs; the legacy system only over https in production', () => {
    assert.throws(() => loadConfig({ FIREBASE_HASH_KEY: 'abcd' }), /FIREBASE_SALT_SEPARATOR must be set with the other/)
    assert.throws(() => loadConfig({ LEGACY_VERIFY_URL: 'https://old.example/verify' }), /LEGACY_VERIFY_SECRET must be set with the other/)
    const firebase = loadConfig({ FIREBASE_HASH_KEY: 'abcd', FIREBASE_SALT_SEPARATOR: 'Bw==' }).imports.firebase!
    assert.deepEqual([firebase.saltSeparator, firebase.rounds, firebase.memCost], [Buffer.from([7]), 8, 14])
    assert.throws(() => loadConfig({ FIREBASE_HASH_KEY: 'abcd', FIREBASE_SALT_SEPARATOR: 'Bw==', FIREBASE_MEM_COST: '15' }), /FIREBASE_MEM_COST must be a whole number from 1 to 14/)
    const production = { NODE_ENV: 'production', TRUST_PROXY: 'loopback', SMTP_URL: 'smtp://relay:25', PUBLIC_URL: 'https://auth.example/', KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString('base64'), LEGACY_VERIFY_SECRET: 's'.repeat(20) }
    assert.throws(() => loadConfig({ ...production, LEGACY_VERIFY_URL: 'http://old.example/verify' }), /LEGACY_VERIFY_URL must be an https:\/\/ URL in production/)
    assert.equal(loadConfig({ ...production, LEGACY_VERIFY_URL: 'https://old.example/verify' }).imports.legacy?.url, 'https://old.example/verify')
    assert.equal(loadConfig({ LEGACY_VERIFY_URL: 'http://127.0.0.1:9/verify', LEGACY_VERIFY_SECRET: 's'.repeat(20) }).imports.legacy?.url, 'http://127.0.0.1:9/verify')
  })
})

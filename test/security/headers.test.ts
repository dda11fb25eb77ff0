import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import { registerVerifyLogin, startTestApp } from '../helpers/app.ts'

const PRODUCTION = { NODE_ENV: 'production', TRUST_PROXY: '127.0.0.1', PUBLIC_URL: 'https://auth.example.com', KEY_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64') }

describe('security: headers and transport', () => {
  test('every answer carries nosniff, frame DENY, no referrer, a deny-all CSP and no-store; no HSTS in development', async () => {
    const t = await startTestApp('sqlite')
    try {
      const user = await registerVerifyLogin(t)
      for (const response of [await t.get('/auth/me', user.access_token), await t.get('/nowhere'), await t.get('/auth/me'), await t.post('/auth/login', { email: user.email, password: 'wrong password!' })]) {
        assert.equal(response.headers['x-content-type-options'], 'nosniff')
        assert.equal(response.headers['x-frame-options'], 'DENY')
        assert.equal(response.headers['referrer-policy'], 'no-referrer')
        assert.match(String(response.headers['content-security-policy']), /default-src 'none'/)
        assert.equal(response.headers['cache-control'], 'no-store')
        assert.equal(response.headers['strict-transport-security'], undefined)
      }
    } finally {
      await t.close()
    }
  })

  test('production keeps /metrics and the API reference to itself: 404 unless METRICS_TOKEN, METRICS_PUBLIC or DOCS say otherwise; a token is needed and checked', async () => {
    const get = (t: Awaited<ReturnType<typeof startTestApp>>, url: string, authorization?: string) =>
      t.app.inject({ method: 'GET', url, headers: { 'x-forwarded-proto': 'https', ...(authorization ? { authorization } : {}) } })
    const closed = await startTestApp('sqlite', { env: PRODUCTION })
    try {
      for (const url of ['/metrics', '/docs', '/docs/', '/openapi.json']) {
        const answer = await get(closed, url)
        assert.equal(answer.statusCode, 404, url)
        assert.equal(answer.json().error.code, 'NOT_FOUND', url)
      }
      assert.equal((await get(closed, '/healthz')).statusCode, 200, 'health stays open')
    } finally {
      await closed.close()
    }
    const token = 'a-metrics-token-of-32-characters'
    const guarded = await startTestApp('sqlite', { env: { ...PRODUCTION, METRICS_TOKEN: token, METRICS_PUBLIC: 'true', DOCS: 'on' } })
    try {
      const missing = await get(guarded, '/metrics')
      assert.equal(missing.statusCode, 401)
      assert.equal(missing.json().error.code, 'AUTH_REQUIRED', 'the token wins over METRICS_PUBLIC')
      assert.match(String(missing.headers['www-authenticate']), /^Bearer/)
      const wrong = await get(guarded, '/metrics', `Bearer ${token.slice(0, -1)}x`)
      assert.equal(wrong.statusCode, 401)
      assert.equal(wrong.json().error.code, 'INVALID_TOKEN')
      const right = await get(guarded, '/metrics', `Bearer ${token}`)
      assert.equal(right.statusCode, 200)
      assert.match(right.body, /^# HELP /m)
      const doc = await get(guarded, '/openapi.json')
      assert.equal(doc.statusCode, 200, 'DOCS=on')
      assert.equal(doc.json().info.version, JSON.parse(readFileSync('package.json', 'utf8')).version, "the document's version is the package's")
    } finally {
      await guarded.close()
    }
    const open = await startTestApp('sqlite', { env: { ...PRODUCTION, METRICS_PUBLIC: 'true' } })
    try {
      assert.equal((await get(open, '/metrics')).statusCode, 200)
    } finally {
      await open.close()
    }
  })

  test('a malformed URL is a VALIDATION_ERROR about the URL, with the same headers as every other answer', async () => {
    const t = await startTestApp('sqlite')
    try {
      const response = await t.app.inject({ method: 'GET', url: `${t.base}/watchlists/%ZZ` })
      assert.equal(response.statusCode, 400)
      assert.equal(response.json().error.code, 'VALIDATION_ERROR')
      assert.deepEqual(response.json().error.details, [{ field: 'url', message: 'is not a valid percent-encoded path' }])
      assert.equal(response.headers['x-content-type-options'], 'nosniff')
      assert.equal(response.headers['x-frame-options'], 'DENY')
      assert.equal(response.headers['cache-control'], 'no-store')
      assert.ok(response.headers['x-request-id'])
    } finally {
      await t.close()
    }
  })

  test('production behind a trusted proxy: HSTS, and anything that did not arrive over https is HTTPS_REQUIRED', async () => {
    const t = await startTestApp('sqlite', { env: PRODUCTION })
    try {
      const viaProxy = (proto: string | undefined, remoteAddress = '127.0.0.1') =>
        t.app.inject({ method: 'GET', url: `${t.base}/auth/me`, remoteAddress, headers: proto ? { 'x-forwarded-proto': proto } : {} })
      const secure = await viaProxy('https')
      assert.equal(secure.json().error.code, 'AUTH_REQUIRED')
      assert.match(String(secure.headers['strict-transport-security']), /max-age=31536000/)
      for (const response of [await viaProxy(undefined), await viaProxy('http'), await viaProxy('https', '192.0.2.7')]) {
        assert.equal(response.statusCode, 403)
        assert.equal(response.json().error.code, 'HTTPS_REQUIRED')
      }
      const probe = await t.app.inject({ method: 'GET', url: '/healthz' })
      assert.equal(probe.statusCode, 200)
    } finally {
      await t.close()
    }
  })

  test('CORS is off by default: no allow-origin header, and OPTIONS is not a route', async () => {
    const t = await startTestApp('sqlite')
    try {
      const response = await t.app.inject({ method: 'GET', url: '/healthz', headers: { origin: 'https://evil.example' } })
      assert.equal(response.headers['access-control-allow-origin'], undefined)
      const preflight = await t.app.inject({ method: 'OPTIONS', url: `${t.base}/auth/login`, headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } })
      assert.equal(preflight.statusCode, 405)
      assert.equal(preflight.headers['access-control-allow-origin'], undefined)
    } finally {
      await t.close()
    }
  })

  test('CORS_ORIGINS allows exactly the listed origins, without credentials', async () => {
    const t = await startTestApp('sqlite', { env: { CORS_ORIGINS: 'https://app.example.com, http://localhost:5173' } })
    try {
      const allowed = await t.app.inject({ method: 'GET', url: '/healthz', headers: { origin: 'https://app.example.com' } })
      assert.equal(allowed.headers['access-control-allow-origin'], 'https://app.example.com')
      assert.equal(allowed.headers['access-control-allow-credentials'], undefined)
      assert.match(String(allowed.headers.vary), /Origin/)
      const other = await t.app.inject({ method: 'GET', url: '/healthz', headers: { origin: 'https://app.example.com.evil.example' } })
      assert.equal(other.headers['access-control-allow-origin'], undefined)
      const preflight = await t.app.inject({ method: 'OPTIONS', url: `${t.base}/auth/login`, headers: { origin: 'http://localhost:5173', 'access-control-request-method': 'POST' } })
      assert.equal(preflight.statusCode, 204)
      assert.equal(preflight.headers['access-control-allow-origin'], 'http://localhost:5173')
      assert.match(String(preflight.headers['access-control-allow-headers']), /authorization/)
    } finally {
      await t.close()
    }
  })
})

describe('security: native TLS', () => {
  test('with TLS_CERT_FILE and TLS_KEY_FILE the service speaks HTTPS and sends HSTS in production', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs')
    const { tmpdir } = await import('node:os')
    const path = await import('node:path')
    const { execFileSync } = await import('node:child_process')
    const https = await import('node:https')
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-tls-'))
    const cert = path.join(dir, 'cert.pem')
    const key = path.join(dir, 'key.pem')
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ed25519', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', key, '-out', cert], { stdio: 'ignore' })
    const t = await startTestApp('sqlite', { env: { NODE_ENV: 'production', TLS_CERT_FILE: cert, TLS_KEY_FILE: key, PUBLIC_URL: 'https://localhost', KEY_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64') } })
    try {
      await t.app.listen({ port: 0, host: '127.0.0.1' })
      const port = (t.app.server.address() as { port: number }).port
      const answer = await new Promise<{ status: number; hsts: string | undefined; body: string }>((resolve, reject) => {
        https
          .get({ host: '127.0.0.1', port, path: `${t.base}/auth/me`, rejectUnauthorized: false }, (response) => {
            let body = ''
            response.on('data', (chunk) => (body += chunk))
            response.on('end', () => resolve({ status: response.statusCode ?? 0, hsts: response.headers['strict-transport-security'] as string | undefined, body }))
          })
          .on('error', reject)
      })
      assert.equal(answer.status, 401)
      assert.equal(JSON.parse(answer.body).error.code, 'AUTH_REQUIRED')
      assert.match(String(answer.hsts), /max-age=31536000/)
    } finally {
      await t.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

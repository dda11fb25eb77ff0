import assert from 'node:assert/strict'
import { connect, type AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { registerVerifyLogin, startTestApp, type TestApp } from '../helpers/app.ts'

/**
 * Failures that happen before a route runs (in the router, or in Node's HTTP parser) answer with
 * the envelope and a 4xx, never a 500 and never another shape. They do not touch the database,
 * so one engine is enough.
 */
describe('router-level failures', () => {
  let t: TestApp
  let token: string
  let port: number
  before(async () => {
    t = await startTestApp('sqlite')
    token = (await registerVerifyLogin(t)).access_token
    await t.app.listen({ port: 0, host: '127.0.0.1' })
    port = (t.app.server.address() as AddressInfo).port
  })
  after(async () => {
    await t.close()
  })

  /** Writes raw bytes to the server and returns what it answers before closing. */
  function raw(request: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => socket.end(request))
      let answer = ''
      socket.on('data', (chunk) => (answer += chunk))
      socket.on('close', () => resolve(answer))
      socket.on('error', reject)
    })
  }
  const envelope = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { success: boolean; error: { code: string } }

  const long = 'a'.repeat(101)
  const paths: [string, string][] = [
    ['GET', `/watchlists/${long}`],
    ['PATCH', `/watchlists/${long}`],
    ['DELETE', `/watchlists/${long}`],
    ['POST', `/watchlists/${long}/symbols`],
    ['DELETE', `/watchlists/${'0'.repeat(36)}/symbols/${long}`],
    ['DELETE', `/auth/sessions/${long}`],
  ]
  for (const [method, path] of paths) {
    test(`a path parameter over 100 characters is 404 NOT_FOUND like any unknown id: ${method} ${path.replace(long, 'a×101')}`, async () => {
      for (const auth of [token, undefined]) {
        const response = await t.call(method as 'GET', path, auth, method === 'GET' || method === 'DELETE' ? undefined : {})
        assert.equal(response.statusCode, 404, response.body)
        assert.equal(response.json().error.code, 'NOT_FOUND')
        assert.ok(response.headers['x-request-id'])
      }
    })
  }

  test('a request line and headers over 16 KiB: 431 HEADERS_TOO_LARGE in the envelope', async () => {
    const answer = await raw(`GET ${t.base}/watchlists?${'q'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`)
    assert.match(answer, /^HTTP\/1\.1 431 /)
    assert.match(answer, /\r\nx-request-id: [0-9a-f-]{36}\r\n/)
    assert.deepEqual(envelope(answer), { success: false, error: { code: 'HEADERS_TOO_LARGE', message: 'The request line and headers are too large.' } })
  })

  test('a method Node cannot parse: 400 VALIDATION_ERROR in the envelope', async () => {
    const answer = await raw(`FOO ${t.base}/watchlists HTTP/1.1\r\nHost: x\r\n\r\n`)
    assert.match(answer, /^HTTP\/1\.1 400 /)
    assert.equal(envelope(answer).error.code, 'VALIDATION_ERROR')
  })

  test('methods the router knows but no route has: 405 with Allow', async () => {
    for (const method of ['PROPFIND', 'TRACE', 'PUT'] as const) {
      const response = await t.app.inject({ method, url: `${t.base}/watchlists`, headers: { authorization: `Bearer ${token}` } })
      assert.equal(response.statusCode, 405, method)
      assert.equal(response.json().error.code, 'METHOD_NOT_ALLOWED')
      assert.equal(response.headers.allow, 'GET, HEAD, POST')
    }
  })

  test('many query parameters, a null byte and a malformed escape are 4xx, never 500', async () => {
    const many = Array.from({ length: 1500 }, (_, i) => `p${i}=1`).join('&')
    const responses = [
      await t.app.inject({ method: 'GET', url: `${t.base}/watchlists?${many}`, headers: { authorization: `Bearer ${token}` } }),
      await t.app.inject({ method: 'GET', url: `${t.base}/watchlists/%00`, headers: { authorization: `Bearer ${token}` } }),
      await t.app.inject({ method: 'GET', url: `${t.base}/watchlists/%E0%A4%A`, headers: { authorization: `Bearer ${token}` } }),
      await t.app.inject({ method: 'GET', url: `${t.base}/${'x/'.repeat(2000)}` }),
    ]
    for (const response of responses) {
      assert.ok(response.statusCode >= 400 && response.statusCode < 500, `${response.statusCode} ${response.body.slice(0, 200)}`)
      assert.equal(response.json().success, false)
    }
  })
})

import assert from 'node:assert/strict'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { PASSWORD, startTestApp, type TestApp } from '../helpers/app.ts'

/** How long the test waits between two trickled bytes: the whole request would take many timeouts. */
const DRIP_MS = 150

/**
 * docs/SECURITY.md, abuse limits, "Slow clients": a request whose headers and body have not all arrived
 * within REQUEST_TIMEOUT_SECONDS is answered 408 REQUEST_TIMEOUT in the envelope and its connection
 * closed. Over a real socket, since Node's HTTP parser is what is being tested; with a 1 s limit so
 * the test is quick. The cut happens before any route runs, so one engine is enough.
 */
describe('slow clients are cut with 408 REQUEST_TIMEOUT', () => {
  let t: TestApp
  let port: number
  before(async () => {
    t = await startTestApp('sqlite', { env: { REQUEST_TIMEOUT_SECONDS: '1' } })
    await t.app.listen({ port: 0, host: '127.0.0.1' })
    port = (t.app.server.address() as AddressInfo).port
  })
  after(async () => {
    await t.close()
  })

  /**
   * Sends `head` at once, then `rest` one byte every DRIP_MS for as long as the server keeps the
   * connection open; returns what the server answered and how many bytes of `rest` it had taken.
   */
  function trickle(head: string, rest: string): Promise<{ answer: string; dripped: number }> {
    return new Promise((resolve, reject) => {
      let answer = ''
      let dripped = 0
      const socket: Socket = connect(port, '127.0.0.1', async () => {
        socket.write(head)
        while (dripped < rest.length && !socket.destroyed && !socket.writableEnded) {
          await sleep(DRIP_MS)
          if (socket.destroyed) break
          socket.write(rest[dripped++]!)
        }
      })
      socket.on('data', (chunk) => (answer += chunk))
      socket.on('close', () => resolve({ answer, dripped }))
      socket.on('error', (error: NodeJS.ErrnoException) => (error.code === 'ECONNRESET' || error.code === 'EPIPE' ? undefined : reject(error)))
    })
  }

  const headersOf = (answer: string) => answer.slice(0, answer.indexOf('\r\n\r\n')).toLowerCase()
  const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as unknown

  function assertTimedOut(answer: string) {
    assert.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n/, answer)
    assert.match(headersOf(answer), /\r\nconnection: close(\r\n|$)/)
    assert.match(headersOf(answer), /\r\ncontent-type: application\/json; charset=utf-8(\r\n|$)/)
    assert.match(headersOf(answer), /\r\nx-request-id: [0-9a-f-]{36}(\r\n|$)/)
    assert.deepEqual(bodyOf(answer), { success: false, error: { code: 'REQUEST_TIMEOUT', message: 'The request was not received in time.' } })
  }

  test('a login body trickled a byte at a time is cut before it completes: 408 in the envelope, connection closed', async () => {
    const body = JSON.stringify({ email: 'slow@example.com', password: PASSWORD })
    const head = `POST ${t.base}/auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`
    const { answer, dripped } = await trickle(head, body)
    assertTimedOut(answer)
    assert.ok(dripped < body.length, `the body never fully arrived (${dripped} of ${body.length} bytes)`)
  })

  test('headers trickled a line at a time (slowloris) are cut the same way', async () => {
    const head = `GET ${t.base}/auth/me HTTP/1.1\r\nHost: localhost\r\n`
    const endless = 'X-Padding: a\r\n'.repeat(200)
    const { answer, dripped } = await trickle(head, endless)
    assertTimedOut(answer)
    assert.ok(dripped < endless.length)
  })

  test('a connection that sends nothing at all is cut too', async () => {
    const { answer } = await trickle('', '')
    assertTimedOut(answer)
  })

  test('the clock stops when the request has arrived: a keep-alive connection idle for longer than the limit still serves its next request', async () => {
    assert.equal(t.app.server.requestTimeout, 1000)
    assert.equal(t.app.server.keepAliveTimeout, 72_000, 'idle keep-alive connections are closed after 72 s')
    const socket = connect(port, '127.0.0.1')
    try {
      let answer = ''
      socket.on('data', (chunk) => (answer += chunk))
      const request = 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n'
      const answered = async () => {
        for (let i = 0; i < 200 && !/\r\n\r\n\{.*\}$/s.test(answer); i++) await sleep(10)
        const first = answer
        answer = ''
        return first
      }
      socket.write(request)
      assert.match(await answered(), /^HTTP\/1\.1 200 /)
      // Longer than the request timeout and one connection check after it: idle time is not a slow request.
      await sleep(2500)
      assert.ok(!socket.destroyed, 'the idle connection is still open')
      socket.write(request)
      assert.match(await answered(), /^HTTP\/1\.1 200 /)
    } finally {
      socket.destroy()
    }
  })
})

import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { freePort, startTestApp, type TestApp } from '../helpers/app.ts'
import { ENGINES } from '../helpers/db.ts'

/**
 * A device's user code is 8 of 20 letters (RFC 8628 section 5.1): the page that takes it counts each
 * attempt against the per-IP login budget (docs/provider.md), and past it answers a page, not the library.
 */
for (const engine of ENGINES) {
  describe(`wrong device codes are limited per IP on ${engine}`, () => {
    let t: TestApp
    let issuer: string

    before(async () => {
      const port = await freePort()
      issuer = `http://localhost:${port}`
      t = await startTestApp(engine, { env: { PUBLIC_URL: issuer, RATE_LIMIT_LOGIN_PER_IP: '3' } })
      await t.app.listen({ port, host: '127.0.0.1' })
    })
    after(async () => {
      await t?.close()
    })

    test('the fourth code entered within the minute is refused with a 429 page and Retry-After', async () => {
      const statuses: number[] = []
      for (let i = 0; i < 4; i++) {
        const response = await fetch(`${issuer}/oauth/device`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' }, body: 'user_code=BCDF-GHJK&xsrf=x' })
        statuses.push(response.status)
        if (i === 3) {
          assert.match(response.headers.get('content-type') ?? '', /text\/html/)
          assert.ok(Number(response.headers.get('retry-after')) > 0)
          assert.match(await response.text(), /Too many attempts/)
        } else {
          await response.text()
        }
      }
      assert.ok(statuses.slice(0, 3).every((status) => status !== 429), `the first three reach the library: ${statuses}`)
      assert.equal(statuses[3], 429)
    })
  })
}

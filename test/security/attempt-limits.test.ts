import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { createStorage, ENGINES, type EngineName } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { oathtool } from '../helpers/totp.ts'

/**
 * docs/SECURITY.md, "Guesses sent at once": an attempt is counted before it is judged, so guesses
 * sent at once count one by one, on every engine and across instances sharing Redis. Every burst
 * here is real concurrent requests (Promise.all of injects, or of HTTP calls to two listening
 * instances); the clocks are frozen, so no attempt waits out a delay while the burst runs.
 */

/** What a burst's tally looks at, from an inject or from fetch alike. */
interface Answer {
  status: number
  code: string | undefined
  retryAfter: string | undefined
}
const answer = (r: LightMyRequestResponse): Answer => ({ status: r.statusCode, code: r.json().error?.code, retryAfter: r.headers['retry-after'] as string | undefined })

/** Guesses per burst: more than the free failures of the delay tests, fewer than the hashing queue. */
const BURST = 12
/** Free failures of the account's delay in the delay tests. */
const FREE = 5

async function withApp(engine: EngineName, env: Record<string, string>, run: (t: TestApp) => Promise<void>) {
  const t = await startTestApp(engine, { env })
  try {
    await run(t)
  } finally {
    await t.close()
  }
}

/** A verified account with a confirmed authenticator app, and the access token of its first session. */
async function enrolled(t: TestApp) {
  const user = await registerVerifyLogin(t, uniqueEmail('limits'))
  const started = await t.post('/auth/mfa/totp', { name: 'Phone' }, user.access_token)
  assert.equal(started.statusCode, 201, started.body)
  const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
  const confirmed = await t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, user.access_token)
  assert.equal(confirmed.statusCode, 200, confirmed.body)
  return { ...user, secret }
}

/** Six digits that are none of the codes the service accepts at `at` (the step and one either side). */
function wrongCode(secret: string, at: number): string {
  const accepted = new Set([-1, 0, 1].map((steps) => oathtool(secret, at, steps)))
  return ['000000', '111111', '222222', '333333'].find((code) => !accepted.has(code))!
}

/** The password step, one at a time (a right password with MFA is taken back from the delay). */
async function mfaToken(t: TestApp, email: string): Promise<string> {
  const response = await t.post('/auth/login', { email, password: PASSWORD })
  assert.equal(response.json().error?.code, 'MFA_REQUIRED', response.body)
  return response.json().error.mfa.mfa_token as string
}

/** Counts a burst's answers by code; any code outside `allowed` fails the test. */
function tally(answers: Answer[], allowed: string[]): Record<string, number> {
  const counts: Record<string, number> = Object.fromEntries(allowed.map((code) => [code, 0]))
  for (const { status, code } of answers) {
    assert.ok(code !== undefined && allowed.includes(code), `unexpected ${status} ${code}`)
    counts[code]!++
  }
  return counts
}

/** A burst against the account's delay: `FREE` judged as `judged`, every other one 429 RATE_LIMITED with Retry-After. */
function assertCountedOneByOne(answers: Answer[], judged: string) {
  const counts = tally(answers, [judged, 'RATE_LIMITED'])
  assert.equal(counts[judged], FREE, `${counts[judged]} of ${answers.length} judged at once; the account allows ${FREE} free failures`)
  for (const refused of answers.filter((a) => a.code === 'RATE_LIMITED')) {
    assert.equal(refused.status, 429)
    assert.ok(Number(refused.retryAfter) >= 1, `Retry-After ${refused.retryAfter}`)
  }
}

for (const engine of ENGINES) {
  describe(`attempt limits under concurrency on ${engine}`, () => {
    test('40 wrong codes at once on one mfa_token: 5 INVALID_MFA_CODE, 35 INVALID_MFA_TOKEN, and the token is dead even for the right code', async () => {
      // The account's delay far away (40 guesses stay free), so the token's own limit is what answers.
      await withApp(engine, { LOGIN_FREE_FAILURES: '100' }, async (t) => {
        const user = await enrolled(t)
        t.clock.advance(60)
        const token = await mfaToken(t, user.email)
        const wrong = wrongCode(user.secret, t.clock.now())
        const burst = await Promise.all(Array.from({ length: 40 }, () => t.post('/auth/mfa/verify', { mfa_token: token, method: 'totp', code: wrong })))
        const counts = tally(burst.map(answer), ['INVALID_MFA_CODE', 'INVALID_MFA_TOKEN'])
        assert.equal(counts.INVALID_MFA_CODE, 5, `${counts.INVALID_MFA_CODE} wrong codes judged on one token`)
        assert.equal(counts.INVALID_MFA_TOKEN, 35)

        const right = { method: 'totp', code: oathtool(user.secret, t.clock.now()) }
        assert.equal((await t.post('/auth/mfa/verify', { mfa_token: token, ...right })).json().error?.code, 'INVALID_MFA_TOKEN', 'dead after the burst')
        // The same code on a fresh token signs in: the refusal above was the token's, not the code's.
        const fresh = await t.post('/auth/mfa/verify', { mfa_token: await mfaToken(t, user.email), ...right })
        assert.equal(fresh.statusCode, 200, fresh.body)
      })
    })

    test(`wrong codes at once on ${BURST} mfa_tokens count one by one toward the account's delay: ${FREE} judged, the rest RATE_LIMITED`, async () => {
      await withApp(engine, { LOGIN_FREE_FAILURES: String(FREE) }, async (t) => {
        const user = await enrolled(t)
        const tokens: string[] = []
        for (let i = 0; i < BURST; i++) tokens.push(await mfaToken(t, user.email))
        const wrong = wrongCode(user.secret, t.clock.now())
        const burst = await Promise.all(tokens.map((mfa_token) => t.post('/auth/mfa/verify', { mfa_token, method: 'totp', code: wrong })))
        assertCountedOneByOne(burst.map(answer), 'INVALID_MFA_CODE')
      })
    })

    test(`wrong step-up codes at once on one session: ${FREE} judged, the rest RATE_LIMITED, and then the right code waits too`, async () => {
      await withApp(engine, { LOGIN_FREE_FAILURES: String(FREE) }, async (t) => {
        const user = await enrolled(t)
        t.clock.advance(60)
        const wrong = wrongCode(user.secret, t.clock.now())
        const burst = await Promise.all(Array.from({ length: BURST }, () => t.post('/auth/mfa/step-up', { method: 'totp', code: wrong }, user.access_token)))
        assertCountedOneByOne(burst.map(answer), 'INVALID_MFA_CODE')
        const right = await t.post('/auth/mfa/step-up', { method: 'totp', code: oathtool(user.secret, t.clock.now()) }, user.access_token)
        assert.equal(right.statusCode, 429, right.body)
      })
    })

    test(`wrong passwords at once on one account: ${FREE} INVALID_CREDENTIALS, the rest RATE_LIMITED`, async () => {
      await withApp(engine, { LOGIN_FREE_FAILURES: String(FREE) }, async (t) => {
        const user = await registerVerifyLogin(t)
        const burst = await Promise.all(Array.from({ length: BURST }, (_, i) => t.post('/auth/login', { email: user.email, password: `wrong password ${i}` })))
        assertCountedOneByOne(burst.map(answer), 'INVALID_CREDENTIALS')
      })
    })

    test('step-up is under the per-IP login limit: with 3 a minute, the 4th step-up is 429 even with the right code', async () => {
      await withApp(engine, { RATE_LIMIT_LOGIN_PER_IP: '3' }, async (t) => {
        const user = await enrolled(t)
        // A new minute's window: the set-up's login counted in the previous one.
        t.clock.advance(60)
        const wrong = wrongCode(user.secret, t.clock.now())
        const three = await Promise.all(Array.from({ length: 3 }, () => t.post('/auth/mfa/step-up', { method: 'totp', code: wrong }, user.access_token)))
        assert.deepEqual(three.map((r) => answer(r).code), ['INVALID_MFA_CODE', 'INVALID_MFA_CODE', 'INVALID_MFA_CODE'])
        const fourth = answer(await t.post('/auth/mfa/step-up', { method: 'totp', code: oathtool(user.secret, t.clock.now()) }, user.access_token))
        assert.equal(fourth.status, 429)
        assert.equal(fourth.code, 'RATE_LIMITED')
        assert.ok(Number(fourth.retryAfter) >= 1 && Number(fourth.retryAfter) <= 60, `Retry-After ${fourth.retryAfter}`)
        // The next window lets the same right code through: it was the IP's budget, not the code.
        t.clock.advance(60)
        const next = await t.post('/auth/mfa/step-up', { method: 'totp', code: oathtool(user.secret, t.clock.now()) }, user.access_token)
        assert.equal(next.statusCode, 200, next.body)
      })
    })
  })
}

describe('attempt limits across two instances sharing Redis and one PostgreSQL database', () => {
  test(`wrong codes on ${BURST} mfa_tokens and wrong passwords, split across both instances at once: ${FREE} judged in all`, async () => {
    const redisUrl = process.env.REDIS_URL
    assert.ok(redisUrl, 'REDIS_URL must be set (npm test starts a redis-server)')
    const env = { REDIS_URL: redisUrl, LOGIN_FREE_FAILURES: String(FREE) }
    const storage = await createStorage('postgres')
    const instances: TestApp[] = []
    try {
      instances.push(await startTestApp('postgres', { env, storage }))
      instances.push(await startTestApp('postgres', { env, storage }))
      const [a, b] = instances as [TestApp, TestApp]
      // Each instance has its own TestClock, started when it was built: one time for both, so the
      // delay after the fifth failure is judged alike wherever the sixth guess lands.
      b.clock.ms = a.clock.ms
      const bases = [(await a.app.listen({ port: 0, host: '127.0.0.1' })) + a.base, (await b.app.listen({ port: 0, host: '127.0.0.1' })) + b.base]
      /** Over real HTTP, even-numbered guesses to A and odd-numbered ones to B. */
      const post = async (i: number, path: string, body: unknown): Promise<Answer> => {
        const response = await fetch(bases[i % 2] + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
        const json = (await response.json()) as { error?: { code: string } }
        return { status: response.status, code: json.error?.code, retryAfter: response.headers.get('retry-after') ?? undefined }
      }

      const user = await enrolled(a)
      const tokens: string[] = []
      for (let i = 0; i < BURST; i++) tokens.push(await mfaToken(instances[i % 2]!, user.email))
      const wrong = wrongCode(user.secret, a.clock.now())
      assertCountedOneByOne(await Promise.all(tokens.map((mfa_token, i) => post(i, '/auth/mfa/verify', { mfa_token, method: 'totp', code: wrong }))), 'INVALID_MFA_CODE')

      const victim = await registerVerifyLogin(a)
      assertCountedOneByOne(await Promise.all(Array.from({ length: BURST }, (_, i) => post(i, '/auth/login', { email: victim.email, password: `wrong password ${i}` }))), 'INVALID_CREDENTIALS')
    } finally {
      for (const t of instances) await t.close()
      await storage.drop()
    }
  })
})

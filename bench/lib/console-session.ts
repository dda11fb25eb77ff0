// An operator of the console (docs/console.md) and their console session, for a bench: an account
// registered through the API, its address verified and the `operator` role given with the service's
// CLI, a TOTP factor enrolled (codes from Debian's oathtool, as the tests take them:
// test/helpers/totp.ts), then the console's sign-in walked as a browser walks it
// (test/helpers/op-browser.ts): /console/sign-in, the provider's password page, its second-factor
// page, the callback, /console/users. The answer is the `portcullis_console` cookie's value, which
// a load sends as `cookie: portcullis_console=...` to the service on any host name (the session is
// the cookie alone; only POSTs look at the origin).
import { formOf, OpBrowser } from '../../test/helpers/op-browser.ts'
import { oathtool } from '../../test/helpers/totp.ts'

export const CONSOLE_COOKIE = 'portcullis_console'

export interface ConsoleOperator {
  email: string
  password: string
  /** The TOTP factor's base32 secret. */
  secret: string
  /** The last 30-second step whose code was used: each step is taken once, so the next sign-in uses a later one. */
  lastStep: number
}

const stepNow = () => Math.floor(Date.now() / 30_000)
const codeAt = (secret: string, step: number) => oathtool(secret, step * 30_000)

async function post(url: string, body: unknown, token?: string): Promise<{ status: number; body: any }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  })
  return { status: response.status, body: await response.json().catch(() => null) }
}

/**
 * A new operator on a running service (`api`: its /api/v1 URL). `cli` runs the service's CLI on its
 * database (bench/lib/server.ts's cli with the server's environment): adding a factor needs a
 * verified address, and the bench's server mails nothing at registration.
 */
export async function makeOperator(api: string, cli: (args: string[]) => string, email: string, password = 'a console bench passphrase'): Promise<ConsoleOperator> {
  const registered = await post(`${api}/auth/register`, { email, password, full_name: 'Console Bench' })
  if (registered.status !== 201) throw new Error(`console operator: register answered ${registered.status}: ${JSON.stringify(registered.body)}`)
  cli(['users', 'verify', email])
  const login = await post(`${api}/auth/login`, { email, password })
  if (login.status !== 200) throw new Error(`console operator: login answered ${login.status}: ${JSON.stringify(login.body)}`)
  const access = login.body.data.access_token as string
  const started = await post(`${api}/auth/mfa/totp`, { name: 'Bench' }, access)
  if (started.status !== 200 && started.status !== 201) throw new Error(`console operator: TOTP enrolment answered ${started.status}: ${JSON.stringify(started.body)}`)
  const { factor_id: factorId, secret } = started.body.data as { factor_id: string; secret: string }
  const step = stepNow()
  const confirmed = await post(`${api}/auth/mfa/totp/${factorId}/confirm`, { code: codeAt(secret, step) }, access)
  if (confirmed.status !== 200) throw new Error(`console operator: TOTP confirmation answered ${confirmed.status}: ${JSON.stringify(confirmed.body)}`)
  cli(['users', 'roles', email, '--add', 'operator'])
  return { email, password, secret, lastStep: step }
}

/**
 * The console's sign-in as a browser, on the service at `base` (http://127.0.0.1:PORT): the browser
 * uses the origin and path the console's callback names (PUBLIC_URL's: http://localhost:PORT/console
 * by default), so its cookies and the callback line up. Returns the `portcullis_console` cookie's
 * value, checked with a GET of the users page from `base`, and the console's path (`/console`, or
 * `/base/console` under a PUBLIC_URL with a path). `operator.lastStep` moves on.
 */
export async function consoleSignIn(base: string, operator: ConsoleOperator, consolePath = '/console'): Promise<{ token: string; path: string }> {
  const first = await fetch(`${base}${consolePath}/sign-in`, { redirect: 'manual' })
  await first.arrayBuffer()
  const authorize = first.headers.get('location')
  if (first.status !== 303 || !authorize) throw new Error(`console sign-in: ${consolePath}/sign-in answered ${first.status}, not a redirect to the provider`)
  const callback = new URL(new URL(authorize, base).searchParams.get('redirect_uri') ?? '')
  const origin = callback.origin
  const path = callback.pathname.replace(/\/callback$/, '')
  const browser = new OpBrowser(origin)
  let page = await browser.go(`${origin}${path}/sign-in`)
  page = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: operator.email, password: operator.password })
  // The next step after the last one used, or now; a code is taken within one step either side of
  // now, so a step further ahead waits (only when sign-ins follow each other within a step).
  const step = Math.max(operator.lastStep + 1, stepNow())
  while (step > stepNow() + 1) await new Promise((resolve) => setTimeout(resolve, 1000))
  page = await browser.submit(formOf(page, { actionEndsWith: '/mfa' }), { code: codeAt(operator.secret, step) })
  operator.lastStep = step
  if (page.status !== 200 || new URL(page.url).pathname !== `${path}/users`) {
    throw new Error(`console sign-in ended on ${page.url} with ${page.status}: ${page.body.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').slice(0, 400)}`)
  }
  const token = sessionCookie(browser)
  if (!token) throw new Error('console sign-in: no portcullis_console cookie was set')
  if (!(await sessionLives(base, path, token))) throw new Error(`console sign-in: ${base}${path}/users did not answer 200 with the new cookie`)
  return { token, path }
}

/** The browser's `portcullis_console` value: the last one set (and not cleared) in its answers, as its jar holds it. */
function sessionCookie(browser: OpBrowser): string | null {
  let value: string | null = null
  for (const answer of browser.history) {
    for (const line of answer.headers.getSetCookie()) {
      const [pair] = line.split(';')
      const at = pair!.indexOf('=')
      if (pair!.slice(0, at).trim() !== CONSOLE_COOKIE) continue
      const cleared = /;\s*max-age=0\b/i.test(line)
      value = cleared ? null : pair!.slice(at + 1).trim() || null
    }
  }
  return value
}

/** Whether a console session still answers (200 from its users page, not a 303 to sign in). */
export async function sessionLives(base: string, consolePath: string, token: string): Promise<boolean> {
  const response = await fetch(`${base}${consolePath}/users`, { headers: { cookie: `${CONSOLE_COOKIE}=${token}` }, redirect: 'manual' })
  await response.arrayBuffer()
  return response.status === 200
}

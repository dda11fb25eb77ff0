// The users the bearer-read cases rotate through: each registered, logged in, with one watchlist.
// Rotating matters on PostgreSQL: one user's token over and over would let the read batches
// (src/db/batch.ts) answer fifty requests with one index probe, which real traffic would not.
export interface Reader {
  email: string
  password: string
  access_token: string
  refresh_token: string
}

const json = { 'content-type': 'application/json' }

/** `count` users on the service at `api` (its /api/v1 URL), four set up at a time. */
export async function seedReaders(api: string, count: number, password = 'a benchmark passphrase'): Promise<Reader[]> {
  const tag = `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`
  const one = async (u: number): Promise<Reader> => {
    const email = `bench-${tag}-${u}@example.com`
    await fetch(`${api}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password, full_name: 'Bench' }) })
    const login = await fetch(`${api}/auth/login`, { method: 'POST', headers: json, body: JSON.stringify({ email, password }) })
    if (!login.ok) throw new Error(`bench: login for a reader failed with ${login.status}: ${await login.text()}`)
    const tokens = (await login.json()).data as { access_token: string; refresh_token: string }
    await fetch(`${api}/watchlists`, { method: 'POST', headers: { ...json, authorization: `Bearer ${tokens.access_token}` }, body: JSON.stringify({ name: 'Bench', symbols: ['AAPL', 'MSFT'] }) })
    return { email, password, ...tokens }
  }
  const readers: Reader[] = []
  for (let u = 0; u < count; u += 4) readers.push(...(await Promise.all(Array.from({ length: Math.min(4, count - u) }, (_, i) => one(u + i)))))
  return readers
}

/**
 * `count` users of Better Auth's peer (bench/peers/better-auth.ts) at `base` (its root URL), each
 * signed up and holding the jwt plugin's token for its session (GET /api/auth/token), the bearer
 * token of the peer's stateless read. `origin` is the peer's baseURL, which its sign-up checks.
 */
export async function seedBetterAuthReaders(base: string, origin: string, count: number, password = 'a benchmark passphrase'): Promise<string[]> {
  const tag = `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`
  const one = async (u: number): Promise<string> => {
    const signUp = await fetch(`${base}/api/auth/sign-up/email`, { method: 'POST', headers: { ...json, origin }, body: JSON.stringify({ email: `bench-${tag}-${u}@example.com`, password, name: 'Bench' }) })
    if (!signUp.ok) throw new Error(`bench: Better Auth's sign-up answered ${signUp.status}: ${await signUp.text()}`)
    const cookie = signUp.headers.getSetCookie().map((line) => line.split(';')[0]).join('; ')
    const token = await fetch(`${base}/api/auth/token`, { headers: { cookie, origin } })
    if (!token.ok) throw new Error(`bench: Better Auth's /token answered ${token.status}: ${await token.text()}`)
    return ((await token.json()) as { token: string }).token
  }
  const tokens: string[] = []
  for (let u = 0; u < count; u += 4) tokens.push(...(await Promise.all(Array.from({ length: Math.min(4, count - u) }, (_, i) => one(u + i)))))
  return tokens
}

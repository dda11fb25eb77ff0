// npm run bench:provider (issue 31): Portcullis as an OpenID provider (src/provider/) at its token
// endpoint against Better Auth 1.7.5's oauth-provider plugin (bench/peers/better-auth.ts) measured
// in the same run, and the watchlists read with an OAuth access token against the same read with
// Portcullis's own. Prints what it ran with, then one Markdown table in the shape of
// bench/RESULTS.md's.
//
// Each round is a fresh Better Auth, a fresh oidc-provider alone (bench/peers/oidc-provider-alone.ts:
// the library with Portcullis's token settings and storage in a Map, its own cost with nothing of
// Portcullis's, issue 45) and a fresh Portcullis (the built dist/server.js, as npm start runs it)
// in an order that rotates from round to round; on PostgreSQL, Portcullis alone (the peers run on
// SQLite or in memory). Every server gets a confidential first-party client (client_secret_basic,
// PKCE S256, no consent page: Portcullis's `first_party`, Better Auth's `skip_consent`) and users
// signed in once through their own pages (a cookie jar: test/helpers/op-browser.ts for Portcullis).
// Then, 50 connections each, the load from a process of its own (bench/lib/load.ts):
// - the code exchange: authorization codes for `openid offline_access` minted just before the
//   measurement through the signed-in sessions (SIGNERS at a time), each sent once (the loader's
//   `bodies`); both servers answer with an ID token, an opaque access token and a refresh token;
// - the refresh grant: one refresh token per code exchange, each sent once (refresh tokens rotate;
//   a reuse would end the grant): those the code exchange case got (the loader's `collect`), then
//   as many more exchanges, made beforehand, as the batch needs;
// - Portcullis only: GET /api/v1/watchlists for READERS users, with their own access token
//   (POST /auth/login) and with a JWT access token for the API (the code exchange with
//   resource={PUBLIC_URL}/api/v1), in an order that alternates from round to round.
// A one-shot case warms up with a batch of WARMUP_BODIES, then runs until its measured batch is
// used up, sized from the warm-up's rate to last about BENCH_SECONDS. A measurement during which
// other processes used more than BENCH_OTHER_MAX of a core is measured again with a fresh batch
// (bench/lib/quiet.ts). Ratios are medians of the rounds' ratios, their range beside them; req/s, p50
// and p99 medians over rounds.
//
// BENCH_SECONDS (5) measured per case, BENCH_WARMUP_SECONDS (3, the reads'), BENCH_PAIRS (3) rounds,
// BENCH_ENGINES (sqlite,postgres), BENCH_ID_TOKEN_ALG (EdDSA: Portcullis's client registers it,
// Better Auth's jwt plugin signs with it by default; or RS256), BENCH_SERVER_CPUS and
// BENCH_LOADER_CPUS (taskset core lists), LOG_LEVEL (Portcullis's; npm start's default, info).
// PostgreSQL: DATABASE_URL (its user must be able to create databases), or a throwaway cluster
// started here (scripts/pg-throwaway.sh, bench/lib/databases.ts).
import { createHash, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { formOf, OpBrowser } from '../test/helpers/op-browser.ts'
import { benchDatabases } from './lib/databases.ts'
import { loadInChild, type LoadResult } from './lib/load.ts'
import { seedReaders } from './lib/readers.ts'
import { median, met, range, Report, rotation, settings, stats } from './lib/report.ts'
import { BENCH_ENV, startArgs, startServer, type BenchServer } from './lib/server.ts'
import type { PeerClient } from './peers/better-auth.ts'

const s = settings({ seconds: 5 })
const ID_TOKEN_ALG = process.env.BENCH_ID_TOKEN_ALG ?? 'EdDSA'
const CONNECTIONS = 50
const READERS = 100
/** The users whose browser sessions mint the codes, one authorization at a time each. */
const SIGNERS = 20
/** The warm-up of a one-shot case: ten bodies a connection; its rate sizes the measured batch. */
const WARMUP_BODIES = CONNECTIONS * 10
const PASSWORD = 'a benchmark passphrase'
const REDIRECT_URI = 'https://rp.example/cb'
/** Better Auth's routes: its default base path. */
const PEER_BASE_PATH = '/api/auth'
const SCOPE = 'openid offline_access'
if (!['EdDSA', 'RS256'].includes(ID_TOKEN_ALG)) throw new Error(`bench: BENCH_ID_TOKEN_ALG must be EdDSA or RS256, not ${ID_TOKEN_ALG}`)
const form = { 'content-type': 'application/x-www-form-urlencoded' }
const peerVersion = (JSON.parse(readFileSync('node_modules/@better-auth/oauth-provider/package.json', 'utf8')) as { version: string }).version
/** npm start's node flags, for the peer too (the same heap settings); Node runs the peer's TypeScript itself, no loader. */
const peerArgs = [...startArgs().filter((arg) => arg.startsWith('--')), 'bench/peers/better-auth.ts']
/** The library by itself (bench/peers/oidc-provider-alone.ts), with the same node flags. */
const aloneArgs = [...startArgs().filter((arg) => arg.startsWith('--')), 'bench/peers/oidc-provider-alone.ts']
const libraryVersion = (JSON.parse(readFileSync('node_modules/oidc-provider/package.json', 'utf8')) as { version: string }).version

// PostgreSQL: a throwaway cluster unless DATABASE_URL names one; every run gets a database of its own.
const databases = benchDatabases(s.engines, 'provider', 55498)

const report = new Report('npm run bench:provider', s, [
  `connections: ${CONNECTIONS} for every case`,
  `one-shot cases: each code and refresh token sent once (the loader's bodies); codes minted just before the measurement through ${SIGNERS} signed-in sessions, refresh tokens from the code exchanges (the case's own, then more as needed); a warm-up batch of ${WARMUP_BODIES}, then a batch sized for ${s.seconds} s at the warm-up's rate`,
  `reads: ${s.seconds} s measured after ${s.warmup} s of warm-up, rotating through ${READERS} users' tokens; the order own/OAuth alternates by round`,
  `client: confidential, client_secret_basic, PKCE S256, consent skipped (Portcullis first_party, Better Auth skip_consent); scope "${SCOPE}": ID token (${ID_TOKEN_ALG}), opaque access token and refresh token on both sides`,
  `Portcullis: node ${startArgs().join(' ')} (npm start's command), LOG_LEVEL=${BENCH_ENV.LOG_LEVEL}, the log to /dev/null; ${s.engines.join(' and ')}`,
  `Better Auth: better-auth ${peerVersion} + jwt + @better-auth/oauth-provider ${peerVersion}: node ${peerArgs.join(' ')}, SQLite (better-sqlite3, WAL, synchronous=FULL), rate limit off`,
  `oidc-provider ${libraryVersion} alone (SQLite rounds only): node ${aloneArgs.join(' ')}: Portcullis's token settings, storage in a Map (the library's own in-memory adapter holds 1,000 entries), an account that is its sub; codes made through the library's models`,
  `${s.rounds} rounds, a fresh server (and PostgreSQL database) each run, order rotating`,
])

/** `fn` over `items`, `width` at a time, results in order. */
async function pool<T, R>(items: readonly T[], width: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, async () => {
    while (next < items.length) {
      const i = next++
      results[i] = await fn(items[i]!, i)
    }
  }))
  return results
}

interface Pkce { verifier: string; challenge: string }
function pkce(): Pkce {
  const verifier = randomBytes(32).toString('base64url')
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') }
}
/** An authorization code as the client got it, with the PKCE verifier its request was made with. */
interface Minted { code: string; verifier: string }

function authorizationUrl(endpoint: string, clientId: string, challenge: string, params: Record<string, string> = {}): string {
  return `${endpoint}?${new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: REDIRECT_URI, scope: SCOPE, code_challenge: challenge, code_challenge_method: 'S256', state: randomBytes(8).toString('base64url'), ...params })}`
}
function codeOf(location: string | null | undefined, where: string): string {
  const code = location ? new URL(location).searchParams.get('code') : null
  if (!code) throw new Error(`bench: no code from ${where}: ${location}`)
  return code
}
const basic = (client: PeerClient) => `Basic ${Buffer.from(`${encodeURIComponent(client.client_id)}:${encodeURIComponent(client.client_secret)}`).toString('base64')}`
const exchangeBody = (minted: Minted, extra: Record<string, string> = {}) =>
  new URLSearchParams({ grant_type: 'authorization_code', code: minted.code, redirect_uri: REDIRECT_URI, code_verifier: minted.verifier, ...extra }).toString()
const refreshBody = (token: string) => new URLSearchParams({ grant_type: 'refresh_token', refresh_token: token }).toString()

/** One provider under test, as the cases see it. */
interface Provider {
  name: string
  server: BenchServer
  tokenUrl: string
  /** The token endpoint's request headers: HTTP Basic client authentication and the form type. */
  headers: Record<string, string>
  /** `n` fresh authorization codes for SCOPE, through the signed-in sessions. */
  mint(n: number): Promise<Minted[]>
  /** CPU time so far of the processes serving (the server, and its database), in ms. */
  cpuMs(): number
  stop(): Promise<void>
  /** Refresh tokens the code exchanges gave, each for the refresh grant to use once. */
  spare: string[]
}

async function token(provider: Provider, body: string): Promise<Record<string, string>> {
  const response = await fetch(provider.tokenUrl, { method: 'POST', headers: provider.headers, body })
  const text = await response.text()
  if (!response.ok) throw new Error(`bench: ${provider.name}'s token endpoint answered ${response.status}: ${text}`)
  return JSON.parse(text) as Record<string, string>
}

/** Minting `n` codes through `signers` sessions, each minting its share one after another. */
async function mintAcross<S>(signers: readonly S[], n: number, one: (signer: S) => Promise<Minted>): Promise<Minted[]> {
  const shares = signers.map((_, i) => Math.floor(n / signers.length) + (i < n % signers.length ? 1 : 0))
  const minted = await Promise.all(signers.map(async (signer, i) => {
    const mine: Minted[] = []
    for (let k = 0; k < shares[i]!; k++) mine.push(await one(signer))
    return mine
  }))
  return minted.flat()
}

/** Portcullis, built (dist/server.js), with its client registered through the CLI and READERS users signed in through the pages. */
async function portcullis(engine: string): Promise<Provider & { readers: { own: string[]; oauth: string[] }; ownRefresh: string }> {
  const database = await databases.fresh(engine)
  await report.quiet()
  const server = report.server(await startServer(database.env, { cpus: s.serverCpus }))
  try {
    // The service's default PUBLIC_URL: its issuer, and the API's resource identifier.
    const issuer = `http://localhost:${server.port}`
    const readers = await seedReaders(server.api, READERS, PASSWORD)
    const added = server.cli(['clients', 'add', '--name', 'Bench', '--type', 'confidential', '--redirect-uri', REDIRECT_URI, '--first-party', '--id-token-alg', ID_TOKEN_ALG])
    const registered = JSON.parse(added) as { client: { client_id: string }; client_secret: string }
    const client = { client_id: registered.client.client_id, client_secret: registered.client_secret }
    const authorize = `${issuer}/oauth/authorize`
    const signers: OpBrowser[] = []
    const provider: Provider = {
      name: 'Portcullis',
      server,
      tokenUrl: `${server.base}/oauth/token`,
      headers: { ...form, authorization: basic(client) },
      // A plain authorization request drops offline_access (OpenID Connect Core 11): each code is
      // asked for with prompt=consent, which a first-party client passes without a page (three redirects).
      mint: (n) =>
        mintAcross(signers, n, async (browser) => {
          const verifier = pkce()
          const page = await browser.go(authorizationUrl(authorize, client.client_id, verifier.challenge, { prompt: 'consent' }))
          return { code: codeOf(page.location, `${authorize} (${page.status} at ${page.url})`), verifier: verifier.verifier }
        }),
      cpuMs: () => server.cpuMs() + databases.cpuMs(),
      stop: async () => {
        await server.stop()
        await database.drop()
      },
      spare: [],
    }
    // Every reader signs in once through the pages; the code of that sign-in, exchanged for the
    // API, gives the reader's OAuth access token (a JWT for {PUBLIC_URL}/api/v1).
    const signedIn = await pool(readers, 4, async (reader) => {
      const browser = new OpBrowser(issuer)
      const verifier = pkce()
      const page = await browser.go(authorizationUrl(authorize, client.client_id, verifier.challenge, { scope: `${SCOPE} watchlists:read`, prompt: 'consent' }))
      const done = await browser.submit(formOf(page, { actionEndsWith: '/login' }), { email: reader.email, password: reader.password })
      const tokens = await token(provider, exchangeBody({ code: codeOf(done.location, 'the sign-in'), verifier: verifier.verifier }, { resource: `${issuer}/api/v1` }))
      if (tokens.access_token?.split('.').length !== 3) throw new Error(`bench: the exchange with resource= gave no JWT access token: ${JSON.stringify(tokens)}`)
      return { browser, jwt: tokens.access_token }
    })
    signers.push(...signedIn.slice(0, SIGNERS).map((x) => x.browser))
    return { ...provider, readers: { own: readers.map((r) => r.access_token), oauth: signedIn.map((x) => x.jwt) }, ownRefresh: readers[0]!.refresh_token }
  } catch (error) {
    await server.stop()
    await database.drop()
    throw error
  }
}

/** Better Auth with its jwt and oauth-provider plugins (bench/peers/better-auth.ts), SIGNERS users signed up (and so signed in) over HTTP. */
function betterAuth(): Promise<Provider> {
  const peerEnv = { BETTER_AUTH_SECRET: randomBytes(32).toString('base64url') }
  return peer(peerEnv, peerArgs, async (server, client) => {
    const base = `${server.base}${PEER_BASE_PATH}`
    const origin = `http://localhost:${server.port}`
    const tag = randomBytes(4).toString('hex')
    const cookies = await pool(Array.from({ length: SIGNERS }, (_, i) => i), 4, async (i) => {
      const response = await fetch(`${base}/sign-up/email`, { method: 'POST', headers: { 'content-type': 'application/json', origin }, body: JSON.stringify({ email: `bench-${tag}-${i}@example.com`, password: PASSWORD, name: 'Bench' }) })
      if (!response.ok) throw new Error(`bench: Better Auth's sign-up answered ${response.status}: ${await response.text()}`)
      return response.headers.getSetCookie().map((line) => line.split(';')[0]).join('; ')
    })
    return {
      name: `Better Auth ${peerVersion}`,
      tokenUrl: `${base}/oauth2/token`,
      mint: (n) =>
        mintAcross(cookies, n, async (cookie) => {
          const verifier = pkce()
          const response = await fetch(authorizationUrl(`${base}/oauth2/authorize`, client.client_id, verifier.challenge), { headers: { cookie, accept: 'text/html' }, redirect: 'manual' })
          // Node's fetch says `sec-fetch-mode: cors`, and to such a request the plugin answers its redirect as JSON.
          const location = response.status === 200 ? ((await response.json()) as { url?: string }).url : response.headers.get('location')
          return { code: codeOf(location, `Better Auth's authorize (${response.status})`), verifier: verifier.verifier }
        }),
    }
  })
}

/**
 * oidc-provider by itself (bench/peers/oidc-provider-alone.ts): what a token request costs the
 * library with storage in memory and nothing of Portcullis's, the floor under Portcullis's figures.
 */
function libraryAlone(): Promise<Provider> {
  return peer({}, aloneArgs, async (server) => ({
    name: `oidc-provider ${libraryVersion} alone`,
    tokenUrl: `${server.base}/token`,
    mint: async (n) => {
      const verifiers = Array.from({ length: n }, pkce)
      const minted: Minted[] = []
      // In slices: one request of thousands of codes would hold the peer's event loop for seconds.
      for (let at = 0; at < n; at += 500) {
        const slice = verifiers.slice(at, at + 500)
        const response = await fetch(`${server.base}/bench/mint`, { method: 'POST', body: JSON.stringify(slice.map((v) => v.challenge)) })
        if (!response.ok) throw new Error(`bench: the library's mint answered ${response.status}: ${await response.text()}`)
        const codes = (await response.json()) as string[]
        minted.push(...codes.map((code, i) => ({ code, verifier: slice[i]!.verifier })))
      }
      return minted
    },
  }))
}

/**
 * A peer in bench/peers/ (`args`), started with the bench's redirect URI and ID token algorithm
 * and `env`, its client read from the client.json it writes; `build` gives what differs between
 * peers. The server is stopped if that fails.
 */
async function peer(env: Record<string, string>, args: string[], build: (server: BenchServer, client: PeerClient) => Promise<Pick<Provider, 'name' | 'tokenUrl' | 'mint'>>): Promise<Provider> {
  await report.quiet()
  const server = report.server(await startServer({ BENCH_REDIRECT_URI: REDIRECT_URI, BENCH_ID_TOKEN_ALG: ID_TOKEN_ALG, ...env }, { args, cpus: s.serverCpus }))
  try {
    const client = JSON.parse(readFileSync(path.join(server.dataDir, 'client.json'), 'utf8')) as PeerClient
    return { ...(await build(server, client)), server, headers: { ...form, authorization: basic(client) }, cpuMs: () => server.cpuMs(), stop: () => server.stop(), spare: [] }
  } catch (error) {
    await server.stop()
    throw error
  }
}

/**
 * A case whose every request uses up what it sends: a warm-up batch of WARMUP_BODIES, then the
 * measured batch, sized for BENCH_SECONDS at the warm-up's rate and made just before it (again for
 * each attempt, bench/lib/quiet.ts's `prepare`). With `collect`, the field of each answer is kept
 * in the provider's spare refresh tokens.
 */
/** A load's result with the serving processes' CPU a request (Linux clock ticks of 10 ms: a few percent). */
type Measured = LoadResult & { cpuMsPerRequest: number }

async function oneShot(label: string, provider: Provider, bodiesFor: (n: number) => Promise<string[]>, collect?: string): Promise<Measured> {
  const load = async (bodies: string[]) => {
    const { collected, ...result } = await loadInChild({ url: provider.tokenUrl, connections: CONNECTIONS, seconds: s.seconds, method: 'POST', headers: provider.headers, bodies, ...(collect ? { collect } : {}) }, s.loaderCpus)
    provider.spare.push(...(collected ?? []))
    return result
  }
  const warm = report.noteLoad(`${label} (warm-up)`, await load(await bodiesFor(WARMUP_BODIES)))
  // A quarter over: the warm-up is short enough for its ramp-up and tail to weigh on its rate.
  const size = Math.max(CONNECTIONS * 2, Math.ceil(warm.rps * s.seconds * 1.25))
  let bodies: string[] = []
  const measured = async () => {
    const cpu = provider.cpuMs()
    const r = await load(bodies)
    return { value: { ...r, cpuMsPerRequest: (provider.cpuMs() - cpu) / Math.max(1, r.ok + r.non2xx) }, loaderCpuMs: r.loaderProcessCpuMs }
  }
  const prepare = async () => {
    const began = performance.now()
    bodies = await bodiesFor(size)
    console.error(`bench: ${label}: a batch of ${bodies.length} made in ${((performance.now() - began) / 1000).toFixed(1)} s (warm-up ${warm.rps}/s)`)
  }
  const r = await report.kept(label, provider.cpuMs, measured, { prepare })
  report.noteLoad(label, r)
  console.error(`bench: ${label}: ${r.rps} req/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms, ${r.ok} 2xx, ${r.non2xx} non-2xx, server CPU ${r.cpuMsPerRequest.toFixed(2)} ms a request`)
  return r
}

const codeBodies = (provider: Provider) => async (n: number) => (await provider.mint(n)).map((minted) => exchangeBody(minted))
/**
 * `n` refresh tokens, each from a code exchange of its own: those the code exchange case left,
 * then as many more code exchanges as needed (made SIGNERS at a time).
 */
const refreshBodies = (provider: Provider) => async (n: number) => {
  const tokens = provider.spare.splice(0, n)
  const minted = await provider.mint(n - tokens.length)
  const answers = await pool(minted, SIGNERS, (m) => token(provider, exchangeBody(m)))
  return [...tokens, ...answers.map((answer) => comparable(provider, answer).refresh_token!)].map(refreshBody)
}

/** Both servers' answers carry the same: an ID token, an opaque access token and a refresh token. */
function comparable(provider: Provider, answer: Record<string, string>): Record<string, string> {
  const { id_token, access_token, refresh_token } = answer
  if (!id_token || !refresh_token || !access_token || access_token.split('.').length === 3) {
    throw new Error(`bench: ${provider.name}'s code exchange answered otherwise than expected: ${JSON.stringify(answer)}`)
  }
  return answer
}

interface GrantRun { exchange: Measured; refresh: Measured }
interface PortcullisRun extends GrantRun { ownRead: LoadResult; oauthRead: LoadResult; ownRefresh: Measured }

async function grants(label: string, provider: Provider): Promise<GrantRun> {
  const [first] = await provider.mint(1)
  provider.spare.push(comparable(provider, await token(provider, exchangeBody(first!))).refresh_token!)
  const exchange = await oneShot(`${label} code exchange`, provider, codeBodies(provider), 'refresh_token')
  const refresh = await oneShot(`${label} refresh grant`, provider, refreshBodies(provider))
  return { exchange, refresh }
}

async function portcullisRun(engine: string, round: number): Promise<PortcullisRun> {
  const provider = await portcullis(engine)
  try {
    const label = `${engine} Portcullis`
    // The reads first, while every token is fresh; their order alternates from round to round.
    const read: Partial<Record<'own' | 'oauth', LoadResult>> = {}
    for (const kind of rotation(['own', 'oauth'] as const, round)) {
      const name = kind === 'own' ? "Portcullis's own token" : 'OAuth JWT'
      read[kind] = await report.load(`${label} GET /watchlists, ${name}`, provider.cpuMs, { url: `${provider.server.api}/watchlists`, connections: CONNECTIONS, tokens: provider.readers[kind] })
    }
    // Portcullis's own refresh (POST /auth/refresh) in the same run: the refresh grant's yardstick (issue 45).
    const cpu = provider.cpuMs()
    const own = await report.load(`${label} POST /auth/refresh`, provider.cpuMs, { url: `${provider.server.api}/auth/refresh`, connections: CONNECTIONS, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ refresh_token: provider.ownRefresh }) })
    // The CPU covers the warm-up too, whose requests are counted at the measured rate.
    const ownRefresh = { ...own, cpuMsPerRequest: (provider.cpuMs() - cpu) / Math.max(1, own.rps * (s.seconds + s.warmup)) }
    return { ...(await grants(label, provider)), ownRead: read.own!, oauthRead: read.oauth!, ownRefresh }
  } finally {
    await provider.stop()
  }
}

async function peerRun(label: string, start: () => Promise<Provider>): Promise<GrantRun> {
  const provider = await start()
  try {
    return await grants(label, provider)
  } finally {
    await provider.stop()
  }
}

/** Rounds of a fresh Better Auth and the library alone (SQLite rounds only) and a fresh Portcullis, in rotating order. */
async function engineRun(engine: string) {
  const runs = { portcullis: [] as PortcullisRun[], betterAuth: [] as GrantRun[], alone: [] as GrantRun[] }
  const slots = engine === 'sqlite' ? (['betterAuth', 'alone', 'portcullis'] as const) : (['portcullis'] as const)
  for (let round = 0; round < s.rounds; round++) {
    for (const slot of rotation(slots, round)) {
      console.error(`bench: ${engine} round ${round + 1} of ${s.rounds}: ${slot}`)
      if (slot === 'portcullis') runs.portcullis.push(await portcullisRun(engine, round))
      else if (slot === 'alone') runs.alone.push(await peerRun('sqlite oidc-provider alone', libraryAlone))
      else runs.betterAuth.push(await peerRun('sqlite Better Auth', betterAuth))
    }
  }
  return { engine, ...runs }
}

/** The rows of one engine: case, engine, req/s | p50 | p99, server CPU a request, ratio, goal. */
function rows({ engine, portcullis: ours, betterAuth: peer, alone }: Awaited<ReturnType<typeof engineRun>>): string[][] {
  const out: string[][] = []
  const cpu = (runs: Measured[]) => `${median(runs.map((x) => x.cpuMsPerRequest)).toFixed(2)} ms`
  for (const [name, pick, peerPath] of [
    ['code exchange: POST /oauth/token, authorization_code, each code once', (x: GrantRun) => x.exchange, 'POST /api/auth/oauth2/token, authorization_code'],
    ['refresh grant: POST /oauth/token, refresh_token, each token once', (x: GrantRun) => x.refresh, 'POST /api/auth/oauth2/token, refresh_token'],
  ] as const) {
    if (peer.length) {
      const ratios = ours.map((run, i) => pick(run).rps / pick(peer[i]!).rps)
      out.push([`Better Auth ${peerVersion} oauth-provider: ${peerPath}`, engine, stats(peer.map(pick)), cpu(peer.map(pick)), 'baseline', ''])
      out.push([`Portcullis ${name}`, engine, stats(ours.map(pick)), cpu(ours.map(pick)), `${range(ratios)} of Better Auth's req/s`, `>= x5 of Better Auth (issue 45): ${met(median(ratios) >= 5)}`])
      // The library's floor: Portcullis's CPU a request over the library's alone, round by round.
      const over = ours.map((run, i) => pick(run).cpuMsPerRequest / pick(alone[i]!).cpuMsPerRequest)
      out.push([`oidc-provider ${libraryVersion} alone (storage in a Map): POST /token, ${name.split(':')[0]}`, engine, stats(alone.map(pick)), cpu(alone.map(pick)), `Portcullis's CPU a request ${range(over)} of this`, 'the library\'s own cost, measured (issue 45)'])
    } else {
      out.push([`Portcullis ${name}`, engine, stats(ours.map(pick)), cpu(ours.map(pick)), '', 'Better Auth runs on SQLite only'])
    }
  }
  const ownShare = ours.map((run) => run.refresh.rps / run.ownRefresh.rps)
  out.push([`Portcullis's own POST /auth/refresh (one token, ${CONNECTIONS} conns)`, engine, stats(ours.map((x) => x.ownRefresh)), cpu(ours.map((x) => x.ownRefresh)), 'baseline', ''])
  out.push([`Portcullis refresh grant against its own /auth/refresh`, engine, '| |', '', `${range(ownShare, (x) => `${(x * 100).toFixed(1)}%`)} of /auth/refresh's req/s`, `>= 25% (issue 45): ${met(median(ownShare) >= 0.25)}`])
  const readRatios = ours.map((run) => run.oauthRead.rps / run.ownRead.rps)
  out.push([`GET /api/v1/watchlists, Portcullis's own access token (${READERS} users)`, engine, stats(ours.map((x) => x.ownRead)), '', 'baseline', ''])
  out.push([`GET /api/v1/watchlists, OAuth JWT access token (${READERS} users)`, engine, stats(ours.map((x) => x.oauthRead)), '', `${range(readRatios)} of own-token req/s`, `within 10% (>= x0.90): ${met(median(readRatios) >= 0.9)}`])
  return out
}

const results = await report.eachEngine(databases, engineRun)
report.print(['case', 'engine', 'req/s', 'p50 ms', 'p99 ms', 'server CPU a request', 'ratio', 'goal (issues 31, 45)'], results.flatMap(rows))

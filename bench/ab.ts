// A/B of the built service between source trees, in one sitting: for each round, each tree's
// dist/server.js (build it first: `npm run build` in each worktree) runs as its own process on a
// fresh data directory, one user logs in with one watchlist, and autocannon measures the cases.
// Trees interleave (A, B, A, B), so the machine's drift falls on both alike.
//   git worktree add /tmp/before <commit> && ln -s "$PWD/node_modules" /tmp/before/node_modules
//   (cd /tmp/before && npm run build) && npm run build
//   AB_TREES=/tmp/before,$PWD AB_CASES=refresh,me,watchlists,login npx tsx bench/ab.ts
// Server CPU per request (from /proc) is the steadier measure when the machine is noisy. Run it
// both ways round (AB_TREES=a,b then b,a): on the 2-core machine the tree that goes first in a
// round came out ahead by as much as 25% (bench/RESULTS.md, fifth session).
// AB_ROUNDS (2), AB_SECONDS (8); DATABASE_URL for PostgreSQL (both trees share it, hence the one
// fixed KEY_ENCRYPTION_KEY below: benchmark data only).
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'

const json = { 'content-type': 'application/json' }
const password = 'a benchmark passphrase'
const seconds = Number(process.env.AB_SECONDS ?? 8)
if (!process.env.AB_TREES) throw new Error('AB_TREES: the built source trees to compare, comma-separated (see the top of bench/ab.ts)')
const trees = process.env.AB_TREES.split(',')
const cases = (process.env.AB_CASES ?? 'refresh').split(',')
// AB_FLAGS: node flags for each tree, '|'-separated in AB_TREES order (a tree may be listed twice).
const flagSets = (process.env.AB_FLAGS ?? '').split('|')

/** The process's user + system CPU time in microseconds (Linux /proc; clock ticks of 10 ms). */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 10_000
}

async function run(tree: string, port: number, extraEnv: Record<string, string>, nodeFlags: string[] = []) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'ab-'))
  const child = spawn(process.execPath, [...nodeFlags, 'dist/server.js'], { cwd: tree, env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), REQUIRE_EMAIL_VERIFICATION: 'false', KEY_ENCRYPTION_KEY: 'MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=', RATE_LIMIT_LOGIN_PER_IP: '1000000000', RATE_LIMIT_REGISTER_PER_IP: '1000000000', ...extraEnv }, stdio: ['ignore', 'ignore', 'inherit'] })
  const base = `http://127.0.0.1:${port}/api/v1`
  for (let i = 0; i < 500; i++) { if (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)) break; await new Promise((r) => setTimeout(r, 20)) }
  // AB_USERS (1): how many users the bearer cases rotate through, request by request.
  const users: { email: string; tokens: { access_token: string; refresh_token: string } }[] = []
  for (let u = 0; u < Number(process.env.AB_USERS ?? 1); u++) {
    const email = `ab-${Date.now()}-${u}@example.com`
    await fetch(`${base}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password, full_name: 'AB' }) })
    const tokens = (await (await fetch(`${base}/auth/login`, { method: 'POST', headers: json, body: JSON.stringify({ email, password }) })).json()).data
    await fetch(`${base}/watchlists`, { method: 'POST', headers: { ...json, authorization: `Bearer ${tokens.access_token}` }, body: JSON.stringify({ name: 'AB', symbols: ['AAPL'] }) })
    users.push({ email, tokens })
  }
  const { email, tokens } = users[0]!
  const bearer = { authorization: `Bearer ${tokens.access_token}` }
  let turn = 0
  const rotating = (url: string): autocannon.Options =>
    users.length === 1
      ? { url, headers: bearer }
      : { url, requests: [{ setupRequest: (request) => ({ ...request, headers: { authorization: `Bearer ${users[turn++ % users.length]!.tokens.access_token}` } }) }] }
  const out: string[] = []
  for (const c of cases) {
    const opts: autocannon.Options =
      c === 'refresh' ? { url: `${base}/auth/refresh`, method: 'POST', headers: json, body: JSON.stringify({ refresh_token: tokens.refresh_token }) }
      : c === 'me' ? rotating(`${base}/auth/me`)
      : c === 'login' ? { url: `${base}/auth/login`, method: 'POST', headers: json, body: JSON.stringify({ email, password }), connections: 8 }
      : rotating(`${base}/watchlists`)
    const cpuBefore = cpuMicros(child.pid!)
    const r = await autocannon({ duration: seconds, connections: 50, ...opts })
    const cpuPerRequest = (cpuMicros(child.pid!) - cpuBefore) / r.requests.total
    out.push(`${c} ${Math.round(r.requests.average)} req/s p99 ${r.latency.p99} ms non2xx ${r.non2xx} server CPU ${cpuPerRequest.toFixed(1)} us/req`)
  }
  child.kill('SIGTERM')
  await new Promise((r) => child.once('exit', r))
  rmSync(dataDir, { recursive: true, force: true })
  return out.join(' | ')
}

const extra: Record<string, string> = process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}
for (let round = 1; round <= Number(process.env.AB_ROUNDS ?? 2); round++) {
  for (const [i, tree] of trees.entries()) {
    const flags = flagSets[i] ? flagSets[i]!.split(' ') : []
    console.log(`round ${round} ${tree}${flags.length ? ` (${flags.join(' ')})` : ''}: ${await run(tree, 4100 + round, extra, flags)}`)
  }
}

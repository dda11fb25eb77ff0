// npx tsx bench/email-start.ts [samples] (after npm run build): does the e-mailed sign-in's start
// reveal whether an address has an account (issue 32, enumeration)? As bench/login-timing.ts does
// for login: the median latency of POST /auth/email/start for addresses with and without an account,
// 200 samples each by default, interleaved in random order (so drift hits both alike), one request
// at a time on a real socket to the built server (SQLite), with a pause after each for the work
// behind the answer. Also the server's CPU per request of each kind, which differs on purpose: the
// answer is sent before the address is looked up, and only an account gets a row and a mail.
import { startServer } from './server.ts'

const SAMPLES = Number(process.argv[2] ?? 200)
const server = await startServer({
  LOG_LEVEL: 'warn',
  RATE_LIMIT_MAIL_PER_IP: '1000000000',
  RATE_LIMIT_MAIL_PER_ADDRESS: '1000000000',
  RATE_LIMIT_REGISTER_PER_IP: '1000000000',
})
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
try {
  const api = `${server.base}/api/v1`
  const start = async (email: string) => {
    const began = performance.now()
    const answer = await fetch(`${api}/auth/email/start`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email }) })
    await answer.arrayBuffer()
    if (answer.status !== 202) throw new Error(`start: ${answer.status}`)
    return performance.now() - began
  }
  const times = { known: [] as number[], unknown: [] as number[] }
  const cpu = { known: 0, unknown: 0 }
  for (let i = 0; i < SAMPLES; i++) {
    const email = `known-${i}@bench.example`
    const registered = await fetch(`${api}/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: 'a benchmark passphrase', full_name: 'Bench' }) })
    if (registered.status !== 201) throw new Error(`register: ${registered.status}`)
    // The registration's own work (its password hash, its verification mail) is over before the samples.
    await pause(200)
    for (const kind of Math.random() < 0.5 ? (['known', 'unknown'] as const) : (['unknown', 'known'] as const)) {
      const before = server.cpuMs()
      times[kind].push(await start(kind === 'known' ? email : `nobody-${i}@bench.example`))
      // The work behind the answer (a row and a mail for an account) finishes before the next sample.
      await pause(30)
      cpu[kind] += server.cpuMs() - before
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!
  const k = { p50: median(times.known), p90: p90(times.known), cpuUs: Math.round((cpu.known * 1000) / SAMPLES) }
  const u = { p50: median(times.unknown), p90: p90(times.unknown), cpuUs: Math.round((cpu.unknown * 1000) / SAMPLES) }
  console.log(`POST /auth/email/start, ${SAMPLES} samples of each, interleaved, one at a time, SQLite, ${new Date().toISOString()}`)
  console.log('| address | median ms | p90 ms | server CPU per request (answer and the work behind it) |')
  console.log('|---|---|---|---|')
  console.log(`| with an account | ${k.p50.toFixed(2)} | ${k.p90.toFixed(2)} | ${k.cpuUs} us |`)
  console.log(`| without | ${u.p50.toFixed(2)} | ${u.p90.toFixed(2)} | ${u.cpuUs} us |`)
  console.log(`| with / without | x${(k.p50 / u.p50).toFixed(2)} | x${(k.p90 / u.p90).toFixed(2)} | x${(k.cpuUs / Math.max(1, u.cpuUs)).toFixed(2)} |`)
} finally {
  await server.stop()
}

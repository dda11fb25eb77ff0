// npm run bench:enumeration: do the two sign-ins that take an address tell whether it has an account
// (docs/SECURITY.md, enumeration)? The latency of POST /auth/login for an address without an account
// against one with an account and a wrong password (both 401: argon2id runs either way), and of
// POST /auth/email/start for an address with and without an account (both 202: the answer is sent
// before the address is looked up). BENCH_SAMPLES (200) samples of each, one request at a time on a
// real socket to the built server, the four kinds interleaved in random order per sample (so drift
// hits all alike), each sample's account registered just before it and each request followed by a
// pause for the work behind its answer. Also the server's CPU per request of each kind, which for
// the e-mailed start differs on purpose: only an account gets a row and a mail.
// BENCH_ENGINES (sqlite), LOG_LEVEL; PostgreSQL as in bench/lib/databases.ts.
import { benchDatabases } from './lib/databases.ts'
import { percentile } from './lib/load.ts'
import { median, pause, Report, settings, times } from './lib/report.ts'
import { startServer } from './lib/server.ts'

const s = settings({ engines: ['sqlite'] })
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 200)
const PASSWORD = 'a benchmark passphrase'
const KINDS = ['login unknown', 'login wrong password', 'start with account', 'start without'] as const
type Kind = (typeof KINDS)[number]

const report = new Report('npm run bench:enumeration', s, [
  `${SAMPLES} samples of each kind, interleaved in random order, one request at a time; each sample's account registered just before it, a pause of 30 ms after each request for the work behind its answer`,
  `server: the built service, a fresh one${s.engines.includes('postgres') ? ' (and PostgreSQL database)' : ''} per engine; mail limits per address lifted for the bench`,
], 'this process, one request at a time (fetch)')
const databases = benchDatabases(s.engines, 'enumeration', 55495)

async function engineRun(engine: string) {
  await report.quiet()
  const database = await databases.fresh(engine)
  const server = report.server(await startServer({ ...database.env, RATE_LIMIT_MAIL_PER_ADDRESS: '1000000000' }))
  const post = async (path: string, body: unknown, expected: number) => {
    const began = performance.now()
    const answer = await fetch(`${server.api}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    await answer.arrayBuffer()
    if (answer.status !== expected) throw new Error(`bench: ${path} answered ${answer.status}, not ${expected}`)
    return performance.now() - began
  }
  const samples = Object.fromEntries(KINDS.map((kind) => [kind, [] as number[]])) as Record<Kind, number[]>
  const cpu = Object.fromEntries(KINDS.map((kind) => [kind, 0])) as Record<Kind, number>
  try {
    for (let i = 0; i < 5; i++) await post('/auth/login', { email: `warm-${i}@bench.example`, password: PASSWORD }, 401)
    for (let i = 0; i < SAMPLES; i++) {
      const email = `known-${i}@bench.example`
      await post('/auth/register', { email, password: PASSWORD, full_name: 'Bench' }, 201)
      // The registration's own work (its password hash, its verification mail) is over before the samples.
      await pause(200)
      const request: Record<Kind, () => Promise<number>> = {
        'login unknown': () => post('/auth/login', { email: `nobody-${i}@bench.example`, password: PASSWORD }, 401),
        'login wrong password': () => post('/auth/login', { email, password: `${PASSWORD}!` }, 401),
        'start with account': () => post('/auth/email/start', { email }, 202),
        'start without': () => post('/auth/email/start', { email: `nobody-${i}@bench.example` }, 202),
      }
      for (const kind of [...KINDS].sort(() => Math.random() - 0.5)) {
        const before = server.cpuMs()
        samples[kind].push(await request[kind]())
        await pause(30)
        cpu[kind] += server.cpuMs() - before
      }
    }
  } finally {
    await server.stop()
    await database.drop()
  }
  const row = (name: string, known: Kind, unknown: Kind) => {
    const [k, u] = [samples[known].sort((a, b) => a - b), samples[unknown].sort((a, b) => a - b)]
    const us = (kind: Kind) => Math.round((cpu[kind] * 1000) / SAMPLES)
    return [name, engine, `${median(k).toFixed(2)} / ${median(u).toFixed(2)} ms`, times(median(k) / median(u)), times(percentile(k, 90) / percentile(u, 90)), `${us(known)} / ${us(unknown)} us`]
  }
  return [
    row('POST /auth/login, 401: a wrong password / no account', 'login wrong password', 'login unknown'),
    row('POST /auth/email/start, 202: an account / none', 'start with account', 'start without'),
  ]
}

const rows = (await report.eachEngine(databases, engineRun)).flat()
report.print(['case', 'engine', 'median latency, with / without an account', 'median ratio', 'p90 ratio', 'server CPU behind the answer, with / without'], rows)

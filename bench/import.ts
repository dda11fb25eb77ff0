// npm run bench:import (issue 42, moving in): the built CLI's `portcullis users import FILE` on a
// JSON Lines file of a million accounts with bcrypt hashes, into an empty database, timed from
// spawn to exit, with the CLI's memory sampled through the run; the same file again (every line
// already here); then what an imported account's first login costs beside a registered one's.
//   npm run bench:import
//   BENCH_IMPORT_USERS=20000 BENCH_ENGINES=sqlite npm run bench:import        (a quick look)
// Environment: BENCH_IMPORT_USERS (1000000), BENCH_IMPORT_LOGINS (200: imported and registered
// accounts whose logins are timed, one at a time), BENCH_ENGINES (sqlite,postgres), LOG_LEVEL;
// PostgreSQL is DATABASE_URL or a throwaway cluster (bench/lib/databases.ts).
//
// The file is written here, a line at a time through a stream: `{email, full_name, email_verified,
// password_hash}`, one line in five with `created_at` (ISO or milliseconds). The hashes are four
// real bcrypt hashes of cost 10 made once with bcryptjs (not the service's bcrypt), reused: the
// import checks a hash's form and cost and keeps it, it never hashes, so a million distinct hashes
// would cost the import nothing more and this bench an hour of bcrypt.
import { spawn } from 'node:child_process'
import { createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { hash as argon2Hash, verify as argon2Verify } from '@node-rs/argon2'
import { verify as bcryptVerify } from '@node-rs/bcrypt'
import SQLite from 'better-sqlite3'
import bcrypt from 'bcryptjs'
import { ARGON2ID, OWASP_ARGON2_PARAMS } from '../src/auth/passwords.ts'
import { pgBytes, sqliteBytes, sqliteFile, withPg } from './lib/bulk-seed.ts'
import { benchDatabases } from './lib/databases.ts'
import { mb, met, percent, Report, settings } from './lib/report.ts'
import { undisturbed } from './lib/quiet.ts'
import { BENCH_ENV, cli, startServer, type BenchServer } from './lib/server.ts'

const s = settings()
const USERS = Number(process.env.BENCH_IMPORT_USERS ?? 1_000_000)
const LOGINS = Number(process.env.BENCH_IMPORT_LOGINS ?? 200)
/** Logins before each timed series, of accounts of their own: the server's first requests are not what a login costs. */
const WARMUP = 10
/** The issue's target: a million lines within 10 minutes; scaled to the lines of this run. */
const TARGET_SECONDS = 600 * (USERS / 1_000_000)
/** Memory counts as flat when the RSS at 90 % of the file is within this share above the RSS at 10 %. */
const FLAT = 0.2
const BCRYPT_COST = 10
const TIME = existsSync('/usr/bin/time') ? '/usr/bin/time' : null

if (!Number.isInteger(USERS) || USERS < 1000) throw new Error('BENCH_IMPORT_USERS: a whole number of at least 1000')
if (!Number.isInteger(LOGINS) || LOGINS < 10) throw new Error('BENCH_IMPORT_LOGINS: a whole number of at least 10')
if (!existsSync('dist/cli.js')) throw new Error('no dist/cli.js: run npm run build first')

const log = (line: string) => process.stderr.write(`bench: ${line}\n`)
const FIRST = ['ada', 'grace', 'alan', 'edsger', 'barbara', 'donald', 'frances', 'john', 'margaret', 'ken', 'radia', 'niklaus', 'hedy', 'tim', 'karen', 'leslie']
const LAST = ['lovelace', 'hopper', 'turing', 'dijkstra', 'liskov', 'knuth', 'allen', 'backus', 'hamilton', 'thompson', 'perlman', 'wirth', 'lamarr', 'berners', 'jones', 'lamport', 'ritchie']
const DOMAINS = ['example.com', 'example.org', 'example.net', 'mail.example.com', 'corp.example.org']
const cap = (word: string) => word[0]!.toUpperCase() + word.slice(1)
/** Addresses in no sorted order, as an export in creation order has them. */
const person = (i: number, tag: string) => {
  const first = FIRST[i % FIRST.length]!
  const last = LAST[(i * 7) % LAST.length]!
  return { email: `${first}.${last}.${tag}${i}@${DOMAINS[(i * 3) % DOMAINS.length]}`, full_name: `${cap(first)} ${cap(last)}` }
}
const DAY = 86_400_000

// ------------------------------------------------------------------------------------ the file

/** Writes `count` lines from `line(i)` to `file` through a stream, waiting whenever it is full: memory stays flat. */
async function writeLines(file: string, count: number, line: (i: number) => object): Promise<void> {
  const out = createWriteStream(file)
  const closed = new Promise<void>((resolve, reject) => out.once('close', () => resolve()).once('error', reject))
  for (let i = 0; i < count; i += 1000) {
    let chunk = ''
    for (let j = i; j < Math.min(count, i + 1000); j++) chunk += `${JSON.stringify(line(j))}\n`
    if (!out.write(chunk)) await new Promise<void>((resolve) => out.once('drain', () => resolve()))
  }
  out.end()
  await closed
}

async function importFile(dir: string): Promise<{ file: string; bytes: number; seconds: number; hashSeconds: number }> {
  const began = performance.now()
  const hashes = Array.from({ length: 4 }, () => bcrypt.hashSync(randomBytes(12).toString('base64url'), BCRYPT_COST))
  const hashSeconds = (performance.now() - began) / 1000
  const now = Date.now()
  const file = path.join(dir, `users-${USERS}.jsonl`)
  await writeLines(file, USERS, (i) => {
    const line: Record<string, unknown> = { ...person(i, 'u'), email_verified: true, password_hash: hashes[i % hashes.length] }
    // One line in five says when the account was made, as ISO text or as milliseconds, within the last three years.
    if (i % 10 === 0) line.created_at = new Date(now - (i % 1095) * DAY - 3_600_000).toISOString()
    else if (i % 10 === 5) line.created_at = now - (i % 1095) * DAY - 3_600_000
    return line
  })
  return { file, bytes: statSync(file).size, seconds: (performance.now() - began) / 1000, hashSeconds }
}

// ------------------------------------------------------------------------------ the CLI, watched

interface Sample {
  ms: number
  rss: number
  /** How far the CLI has read the file (its descriptor's offset), bytes; -1 when not known. */
  pos: number
}

interface CliRun {
  code: number
  wallMs: number
  /** The CLI's user + system CPU, ms. */
  cpuMs: number
  /** Its highest resident size, bytes. */
  peak: number
  samples: Sample[]
  /** Lines it wrote to stdout, and the last (the summary). */
  outLines: number
  summary: string
  errTail: string
}

const statusKb = (status: string, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0)

/**
 * `portcullis users import FILE` as the installed command runs it (bin/portcullis.mjs on dist/,
 * which is `npm run cli`'s command, with no node flags), under /usr/bin/time when there is one for
 * the exact peak RSS and CPU time; its resident size and read offset sampled every 100 ms.
 */
async function runImport(file: string, env: Record<string, string>, onSample: () => void = () => {}): Promise<CliRun> {
  const node = [process.execPath, 'bin/portcullis.mjs', 'users', 'import', file]
  const timeFile = path.join(path.dirname(file), 'time.out')
  const [command, ...args] = TIME ? [TIME, '-o', timeFile, '-f', '%U %S %M', ...node] : node
  const began = performance.now()
  const child = spawn(command!, args, { env: { ...process.env, ...BENCH_ENV, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let outLines = 0
  let last = ''
  let partial = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => {
    const lines = (partial + text).split('\n')
    partial = lines.pop()!
    outLines += lines.length
    if (lines.length) last = lines.at(-1)!
  })
  let errTail = ''
  child.stderr.setEncoding('utf8').on('data', (text: string) => (errTail = (errTail + text).slice(-2000)))
  const exited = new Promise<number>((resolve) => child.once('close', (code) => resolve(code ?? -1)))

  const samples: Sample[] = []
  let pid: number | undefined = TIME ? undefined : child.pid
  let fd: string | undefined
  let peakKb = 0
  let cpuTicks = 0
  const sample = () => {
    onSample()
    try {
      if (pid === undefined) {
        const children = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim()
        if (!children) return
        pid = Number(children.split(' ')[0])
      }
      const status = readFileSync(`/proc/${pid}/status`, 'utf8')
      peakKb = Math.max(peakKb, statusKb(status, 'VmHWM'))
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
      cpuTicks = Number(stat[11]) + Number(stat[12])
      fd ??= readdirSync(`/proc/${pid}/fd`).find((entry) => {
        try {
          return readlinkSync(`/proc/${pid}/fd/${entry}`) === file
        } catch {
          return false
        }
      })
      let pos = -1
      if (fd !== undefined) {
        try {
          pos = Number(/pos:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))?.[1] ?? -1)
        } catch {
          // The file is closed: read to its end.
          pos = statSync(file).size
        }
      }
      samples.push({ ms: performance.now() - began, rss: statusKb(status, 'VmRSS') * 1024, pos })
    } catch {
      // The process is starting or has just ended.
    }
  }
  const timer = setInterval(sample, 100)
  const code = await exited
  clearInterval(timer)
  const wallMs = performance.now() - began
  if (partial) {
    outLines++
    last = partial
  }
  let cpuMs = cpuTicks * 10
  let peak = peakKb * 1024
  if (TIME && existsSync(timeFile)) {
    // time writes "Command exited with non-zero status N" first when it did.
    const [user, system, maxKb] = readFileSync(timeFile, 'utf8').trim().split('\n').at(-1)!.split(' ').map(Number)
    if (Number.isFinite(user) && Number.isFinite(system) && Number.isFinite(maxKb)) {
      cpuMs = Math.round((user! + system!) * 1000)
      peak = maxKb! * 1024
    }
    rmSync(timeFile, { force: true })
  }
  return { code, wallMs, cpuMs, peak, samples, outLines, summary: last, errTail }
}

/** The sample when `share` of the file had been read (of the run's time when the offset was never seen). */
function at(run: CliRun, share: number, size: number): Sample | undefined {
  const known = run.samples.filter((x) => x.pos >= 0)
  if (known.length > 0) return known.find((x) => x.pos >= share * size)
  return run.samples.find((x) => x.ms >= share * run.wallMs)
}

/** Lines a second while the CLI read from `from` to `to` of the file (lines spread evenly over its bytes). */
function rateBetween(run: CliRun, from: number, to: number, size: number): number | undefined {
  const a = at(run, from, size)
  const b = at(run, to, size)
  if (!a || !b || a.pos < 0 || b.pos <= a.pos || b.ms <= a.ms) return undefined
  return Math.round(((b.pos - a.pos) / size) * USERS / ((b.ms - a.ms) / 1000))
}

/**
 * The CPU time of every process named postgres since this was called, in ms, the processes that
 * ended since included (as last seen): the CLI's connection ends with it, and its backend's time
 * would otherwise leave the sum before it is read. Call it often (the sampler does, every 100 ms).
 */
function postgresCpu(): () => number {
  const first = new Map<number, number>()
  const last = new Map<number, number>()
  const scan = (baseline: boolean) => {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
        if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) !== 'postgres') continue
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
        const pid = Number(entry)
        const ticks = Number(fields[11]) + Number(fields[12])
        if (!first.has(pid)) first.set(pid, baseline ? ticks : 0)
        last.set(pid, ticks)
      } catch {
        // A process that ended during the scan.
      }
    }
  }
  scan(true)
  return () => {
    scan(false)
    let ticks = 0
    for (const [pid, at] of last) ticks += at - first.get(pid)!
    return ticks * 10
  }
}

const SUMMARY = /^imported (\d+) of (\d+) lines; (\d+) already here, (\d+) refused/

const minutes = (ms: number) => {
  const seconds = Math.round(ms / 1000)
  return seconds >= 60 ? `${Math.floor(seconds / 60)}m${String(seconds % 60).padStart(2, '0')}s` : `${seconds} s`
}

// ------------------------------------------------------------------------------------- logins

/** Percentile by nearest rank. */
const pct = (sorted: number[], p: number) => sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]!
interface Timed {
  n: number
  p50: number
  p99: number
}
function summarise(ms: number[]): Timed {
  const sorted = [...ms].sort((a, b) => a - b)
  return { n: sorted.length, p50: pct(sorted, 0.5), p99: pct(sorted, 0.99) }
}

async function timed(run: () => Promise<unknown>): Promise<number> {
  const began = performance.now()
  await run()
  return performance.now() - began
}

const PASSWORD = 'an import benchmark passphrase'

/** A login with a wrong password (or for an address without an account): 401, as the enumeration check's three kinds all answer. */
async function wrongLogin(api: string, email: string): Promise<void> {
  const response = await fetch(`${api}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: `${PASSWORD} (not)` }) })
  await response.arrayBuffer()
  if (response.status !== 401) throw new Error(`a wrong login of ${email} answered ${response.status}`)
}

async function login(api: string, email: string): Promise<void> {
  const response = await fetch(`${api}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) })
  const body = (await response.json()) as { data?: { access_token?: string } }
  if (response.status !== 200 || !body.data?.access_token) throw new Error(`login of ${email} answered ${response.status}`)
}

interface LoginPopulation {
  file: string
  imported: string[]
  registered: string[]
  warmImported: string[]
  warmRegistered: string[]
  /** A bcrypt hash of PASSWORD, for the raw check. */
  bcryptHash: string
}

/**
 * LOGINS (+ WARMUP) accounts with a bcrypt hash of cost 10 of PASSWORD, each its own salt
 * (bcryptjs), and as many with an argon2id hash at the service's parameters, which is what a
 * registered account has; both imported with the CLI before the server starts.
 */
async function loginPopulation(dir: string): Promise<LoginPopulation> {
  const count = LOGINS + WARMUP
  const lines: object[] = []
  const names = { imported: [] as string[], registered: [] as string[] }
  let bcryptHash = ''
  for (let i = 0; i < count; i++) {
    const imported = person(i, 'imported')
    const registered = person(i, 'registered')
    bcryptHash = bcrypt.hashSync(PASSWORD, BCRYPT_COST)
    lines.push({ ...imported, email_verified: true, password_hash: bcryptHash })
    lines.push({ ...registered, email_verified: true, password_hash: await argon2Hash(PASSWORD, { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS }) })
    names.imported.push(imported.email)
    names.registered.push(registered.email)
  }
  const file = path.join(dir, 'logins.jsonl')
  writeFileSync(file, lines.map((line) => JSON.stringify(line)).join('\n') + '\n')
  return {
    file,
    imported: names.imported.slice(WARMUP),
    registered: names.registered.slice(WARMUP),
    warmImported: names.imported.slice(0, WARMUP),
    warmRegistered: names.registered.slice(0, WARMUP),
    bcryptHash,
  }
}

/** Accounts whose hash is not the service's own argon2id (still on an imported one). */
async function importedHashesLeft(engine: string, env: Record<string, string>): Promise<number> {
  const sql = "select count(*) as n from users where password_hash not like '$argon2id$%'"
  if (engine === 'sqlite') {
    const db = new SQLite(sqliteFile(env.DATA_DIR!), { readonly: true })
    try {
      return Number((db.prepare(sql).get() as { n: number }).n)
    } finally {
      db.close()
    }
  }
  return withPg(env.DATABASE_URL!, async (db) => Number((await db.query<{ n: string }>(sql)).rows[0]!.n))
}

// ----------------------------------------------------------------------------------------- run

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-import-'))
const report = new Report('npm run bench:import', s, [
  `the import: node bin/portcullis.mjs users import FILE (the installed command's and npm run cli's, no node flags), in a process of its own${TIME ? ' under /usr/bin/time (peak RSS and CPU)' : ''}, its RSS and read offset sampled every 100 ms, on an empty migrated database, then again on the same file`,
  `logins: ${LOGINS} imported accounts (bcrypt cost ${BCRYPT_COST}, each its own salt, bcryptjs) and ${LOGINS} with an argon2id hash at the service's parameters (what registration stores), one login at a time, alternating; after ${WARMUP} logins of each kind on accounts of their own; the server npm start's command (bench/lib/server.ts)`,
  `raw hashing: @node-rs/bcrypt verify and @node-rs/argon2 hash and verify (m=${OWASP_ARGON2_PARAMS.memoryCost}, t=${OWASP_ARGON2_PARAMS.timeCost}, p=${OWASP_ARGON2_PARAMS.parallelism}), ${LOGINS} each, one at a time, in the bench's process`,
], 'the CLI itself for the import; for the logins, fetch from the bench process, one request at a time')
const databases = benchDatabases(s.engines, 'import', 55496)

log(`writing ${USERS} lines to ${dir}`)
const big = await importFile(dir)
log(`${(big.bytes / 1024 / 1024).toFixed(0)} MB in ${big.seconds.toFixed(1)} s (the four bcrypt hashes ${big.hashSeconds.toFixed(1)} s)`)
log(`making ${LOGINS + WARMUP} bcrypt and ${LOGINS + WARMUP} argon2id hashes for the logins`)
const population = await loginPopulation(dir)

const extra: string[] = [
  `the file: ${USERS.toLocaleString('en')} lines, ${mb(big.bytes)} MB, written in ${big.seconds.toFixed(1)} s by a stream (4 bcrypt hashes of cost ${BCRYPT_COST} made by bcryptjs in ${big.hashSeconds.toFixed(1)} s, reused; one line in five with created_at)`,
]

async function importCases(engine: string): Promise<string[][]> {
  const rows: string[][] = []
  await report.quiet()
  const database = await databases.fresh(engine)
  const dataDir = mkdtempSync(path.join(dir, `${engine}-`))
  const env: Record<string, string> = { DATA_DIR: dataDir, ...database.env }
  try {
    cli(['migrate'], env)
    for (const [pass, label] of [[1, `users import, ${USERS.toLocaleString('en')} lines, empty database`], [2, 'the same file again: every line already here (email_exists)']] as const) {
      log(`${engine}: ${label}`)
      // PostgreSQL's time is the run's own; on SQLite a PostgreSQL busy beside it is another process.
      const postgres = engine === 'postgres' ? postgresCpu() : () => 0
      const { value: run, other } = await measuredOnce(`${engine} import ${pass}`, postgres, async () => {
        const dbBefore = postgres()
        const value = await runImport(big.file, env, postgres)
        return { value: { ...value, dbMs: postgres() - dbBefore }, loaderCpuMs: value.cpuMs }
      })
      const counts = SUMMARY.exec(run.summary)
      const [imported, lines, present, refused] = counts ? counts.slice(1, 5).map(Number) : []
      const expected = pass === 1 ? imported === USERS && present === 0 : imported === 0 && present === USERS
      if (run.code !== 0 || !counts || lines !== USERS || refused !== 0 || !expected) {
        report.failure(`${engine} pass ${pass}: exit ${run.code}, "${run.summary}"${run.errTail ? `, stderr: ${run.errTail.trim().split('\n').at(-1)}` : ''}`)
      }
      const rate = Math.round(USERS / (run.wallMs / 1000))
      const r10 = at(run, 0.1, big.bytes)
      const r90 = at(run, 0.9, big.bytes)
      const flat = r10 && r90 ? met(r90.rss <= r10.rss * (1 + FLAT)) : 'too short a run to tell'
      const early = rateBetween(run, 0.1, 0.2, big.bytes)
      const late = rateBetween(run, 0.8, 0.9, big.bytes)
      const bytes = pass === 1 ? (engine === 'sqlite' ? sqliteBytes(dataDir) : await pgBytes(env.DATABASE_URL!)) : undefined
      const note = [
        `peak RSS ${mb(run.peak)} MB; RSS at 10% of the file ${r10 ? mb(r10.rss) : '-'} MB, at 90% ${r90 ? mb(r90.rss) : '-'} MB`,
        `lines/s from 10% to 20% of the file ${early ?? '-'}, from 80% to 90% ${late ?? '-'}`,
        `CPU: the CLI ${(run.cpuMs / 1000).toFixed(0)} s${engine === 'postgres' ? `, PostgreSQL ${(run.dbMs / 1000).toFixed(0)} s` : ''}`,
        `other processes ${percent(Math.max(0, other))} of a core`,
        `${run.outLines.toLocaleString('en')} line${run.outLines === 1 ? '' : 's'} on stdout`,
        ...(bytes !== undefined ? [`database ${mb(bytes)} MB after`] : []),
      ].join('; ')
      const tenths = Array.from({ length: 9 }, (_, k) => at(run, (k + 1) / 10, big.bytes)).map((x) => (x ? `${mb(x.rss)}` : '-')).join(', ')
      log(`${engine} pass ${pass}: ${minutes(run.wallMs)}, ${rate} lines/s, ${note}; RSS (MB) at each tenth of the file: ${tenths}; "${run.summary}"`)
      rows.push([
        label, engine, `${minutes(run.wallMs)} (${(run.wallMs / 1000).toFixed(1)} s), ${rate.toLocaleString('en')} lines/s`, '', '', note,
        `${USERS === 1_000_000 ? '1M lines' : `${USERS.toLocaleString('en')} lines (the target scaled)`} <= ${minutes(TARGET_SECONDS * 1000)}: ${met(run.wallMs <= TARGET_SECONDS * 1000)}; memory flat (RSS at 90% within ${FLAT * 100}% of at 10%): ${flat}${pass === 2 ? `; every line already here, exit 0: ${met(run.code === 0 && expected)}` : ''}`,
      ])
    }
  } finally {
    await database.drop()
    rmSync(dataDir, { recursive: true, force: true })
  }
  return rows
}

/**
 * A measurement taken once (it uses up what it measures, or takes minutes), on a quiet machine
 * but kept whatever else ran during it: how much did is logged and given back.
 */
async function measuredOnce<T>(label: string, known: () => number, measure: () => Promise<{ value: T; loaderCpuMs: number }>): Promise<{ value: T; other: number }> {
  const result = await undisturbed(label, known, measure, { attempts: 1 })
  report.judged(result)
  log(`${label}: other processes used ${percent(Math.max(0, result.other))} of a core during it`)
  return result
}

/** LOGINS runs of `run`, one at a time, timed: kept only on a quiet machine. */
async function series(label: string, known: () => number, run: (i: number) => Promise<unknown>): Promise<Timed> {
  const result = await report.kept(label, known, async () => {
    const ms: number[] = []
    for (let i = 0; i < LOGINS; i++) ms.push(await timed(() => run(i)))
    return { value: ms, loaderCpuMs: 0 }
  })
  const t = summarise(result)
  log(`${label}: p50 ${t.p50.toFixed(2)} ms, p99 ${t.p99.toFixed(2)} ms`)
  return t
}

/**
 * Two series run alternately, one request of each in turn (which goes first alternating too), so
 * drift falls on both alike; measured once, since the first of them uses up what it measures.
 */
async function interleaved(label: string, known: () => number, a: (i: number) => Promise<unknown>, b: (i: number) => Promise<unknown>): Promise<[Timed, Timed]> {
  const { value: result } = await measuredOnce(label, known, async () => {
    const msA: number[] = []
    const msB: number[] = []
    for (let i = 0; i < LOGINS; i++) {
      if (i % 2 === 0) {
        msA.push(await timed(() => a(i)))
        msB.push(await timed(() => b(i)))
      } else {
        msB.push(await timed(() => b(i)))
        msA.push(await timed(() => a(i)))
      }
    }
    return { value: [msA, msB] as const, loaderCpuMs: 0 }
  })
  const [ta, tb] = [summarise(result[0]), summarise(result[1])]
  log(`${label}: p50 ${ta.p50.toFixed(2)} / ${tb.p50.toFixed(2)} ms, p99 ${ta.p99.toFixed(2)} / ${tb.p99.toFixed(2)} ms`)
  return [ta, tb]
}

/** Three series run in turn, one request of each, in a rotating order (the enumeration check). */
async function rotated(label: string, known: () => number, runs: ((i: number) => Promise<unknown>)[]): Promise<Timed[]> {
  const { value: result } = await measuredOnce(label, known, async () => {
    const series = runs.map(() => [] as number[])
    for (let i = 0; i < LOGINS; i++) {
      for (let k = 0; k < runs.length; k++) {
        const which = (i + k) % runs.length
        series[which]!.push(await timed(() => runs[which]!(i)))
      }
    }
    return { value: series, loaderCpuMs: 0 }
  })
  const timedSeries = result.map(summarise)
  log(`${label}: p50 ${timedSeries.map((t) => t.p50.toFixed(2)).join(' / ')} ms`)
  return timedSeries
}

const ms = (t: Timed) => [t.p50.toFixed(2), t.p99.toFixed(2)]

async function loginCases(engine: string): Promise<string[][]> {
  await report.quiet()
  const raw = {
    bcrypt: await series(`${engine}: raw bcrypt verify`, () => 0, () => bcryptVerify(PASSWORD, population.bcryptHash)),
    argon2Hash: await series(`${engine}: raw argon2id hash`, () => 0, () => argon2Hash(PASSWORD, { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS })),
    argon2Verify: await series(`${engine}: raw argon2id verify`, () => 0, async () => argon2Verify(await argon2HashOnce, PASSWORD)),
  }
  const database = await databases.fresh(engine)
  const dataDir = mkdtempSync(path.join(dir, `${engine}-logins-`))
  const env: Record<string, string> = { DATA_DIR: dataDir, ...database.env }
  let server: BenchServer | undefined
  try {
    cli(['migrate'], env)
    cli(['users', 'import', population.file], env)
    server = report.server(await startServer(database.env, { dataDir }))
    let api = server.api
    const known = () => server!.cpuMs() + databases.cpuMs()
    for (let i = 0; i < WARMUP; i++) {
      await login(api, population.warmImported[i]!)
      await login(api, population.warmRegistered[i]!)
    }
    // What a wrong password tells, while imported accounts wait: each kind spends an imported hash's
    // check and an argon2id one (src/imports/timing.ts), so the three should take the same time.
    const [wrongImported, wrongRegistered, unknown] = (await rotated(`${engine}: wrong password of an imported account / of a registered one / an address without an account`, known, [
      (i) => wrongLogin(api, population.imported[i]!),
      (i) => wrongLogin(api, population.registered[i]!),
      (i) => wrongLogin(api, `nobody-${i}@import-bench.example`),
    ])) as [Timed, Timed, Timed]
    const [first, beside] = await interleaved(`${engine}: first login of an imported account / login of a registered one`, known,
      (i) => login(api, population.imported[i]!), (i) => login(api, population.registered[i]!))
    const left = await importedHashesLeft(engine, env)
    if (left !== 0) report.failure(`${engine}: ${left} accounts still on an imported hash after every imported account logged in`)
    // A fresh start looks for imported hashes at once: none is left, so no login spends a check of one any more.
    await server.stop({ keepData: true })
    server = report.server(await startServer(database.env, { dataDir }))
    api = server.api
    for (let i = 0; i < WARMUP; i++) await login(api, population.warmRegistered[i]!)
    const after = await series(`${engine}: login of a registered account, none left on an imported hash`, known, (i) => login(api, population.registered[i]!))
    const second = await series(`${engine}: second login of an imported account`, known, (i) => login(api, population.imported[i]!))
    const expected = raw.bcrypt.p50 + raw.argon2Hash.p50
    return [
      [`raw bcrypt verify, cost ${BCRYPT_COST} (@node-rs/bcrypt), one at a time`, engine, `${raw.bcrypt.n} checks`, ...ms(raw.bcrypt), '', 'baseline'],
      ['raw argon2id hash, the service\'s parameters (@node-rs/argon2), one at a time', engine, `${raw.argon2Hash.n} hashes`, ...ms(raw.argon2Hash), '', 'baseline'],
      ['raw argon2id verify, the service\'s parameters, one at a time', engine, `${raw.argon2Verify.n} checks`, ...ms(raw.argon2Verify), '', 'baseline'],
      ['POST /auth/login, an imported account\'s first (bcrypt check, argon2id hash, the new hash written)', engine, `${first.n} logins, one at a time`, ...ms(first),
        `x${(first.p50 / beside.p50).toFixed(2)} of the registered login beside it; raw bcrypt verify + argon2id hash ${expected.toFixed(2)} ms (p50s added): x${(first.p50 / expected).toFixed(2)}; hashes left on bcrypt after: ${left}`, 'information'],
      ['POST /auth/login, wrong password, an imported account (its bcrypt check + one argon2id check), imported accounts waiting', engine, `${wrongImported.n} logins, one at a time`, ...ms(wrongImported),
        `x${(wrongImported.p50 / unknown.p50).toFixed(2)} of an address without an account beside it`, 'the same time as an unknown address'],
      ['POST /auth/login, wrong password, a registered account (argon2id + one check of an imported hash), imported accounts waiting', engine, `${wrongRegistered.n} logins, one at a time`, ...ms(wrongRegistered),
        `x${(wrongRegistered.p50 / unknown.p50).toFixed(2)} of an address without an account beside it`, 'the same time as an unknown address'],
      ['POST /auth/login, an address without an account (argon2id dummy + one check of an imported hash), imported accounts waiting', engine, `${unknown.n} logins, one at a time`, ...ms(unknown),
        `raw argon2id verify + bcrypt verify ${(raw.argon2Verify.p50 + raw.bcrypt.p50).toFixed(2)} ms (p50s added): x${(unknown.p50 / (raw.argon2Verify.p50 + raw.bcrypt.p50)).toFixed(2)}`, 'baseline'],
      ['POST /auth/login, a registered account\'s right password, imported accounts waiting (argon2id verify only: a success needs no disguise)', engine, `${beside.n} logins, one at a time`, ...ms(beside),
        `raw argon2id verify ${raw.argon2Verify.p50.toFixed(2)} ms: x${(beside.p50 / raw.argon2Verify.p50).toFixed(2)}`, 'information'],
      ['POST /auth/login, a registered account, every account moved in (server restarted)', engine, `${after.n} logins, one at a time`, ...ms(after),
        `raw argon2id verify ${raw.argon2Verify.p50.toFixed(2)} ms: x${(after.p50 / raw.argon2Verify.p50).toFixed(2)}`, 'information'],
      ['POST /auth/login, an imported account\'s second (its hash now argon2id)', engine, `${second.n} logins, one at a time`, ...ms(second),
        `x${(second.p50 / after.p50).toFixed(2)} of the registered login above`, 'information'],
    ]
  } finally {
    await server?.stop()
    await database.drop()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

const argon2HashOnce = argon2Hash(PASSWORD, { algorithm: ARGON2ID, ...OWASP_ARGON2_PARAMS })

try {
  const rows = (await report.eachEngine(databases, async (engine) => [...(await importCases(engine)), ...(await loginCases(engine))])).flat()
  report.print(['case', 'engine', 'result', 'p50 ms', 'p99 ms', 'beside', 'target (issue 42)'], rows, extra)
} finally {
  rmSync(dir, { recursive: true, force: true })
}

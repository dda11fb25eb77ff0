// Who holds the event loop's core during a login flood, from the kernel's own record. Bearer reads
// run alone and then during a flood, as in bench/flood.ts; for a few seconds of the flood
// `perf sched record` keeps every context switch on the machine. The summary says, for the
// server's event loop and for the read generator (this process), how long each was runnable but
// without a core, and which threads had that core during the waits over 1 ms.
//   npx tsx bench/flood-sched.ts [flood connections, default 500]
// A diagnostic, not part of npm run bench: it needs perf (Debian's linux-perf) and the kernel's
// tracing file system (/sys/kernel/tracing), which on most machines means root.
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { floodBench } from './flood-setup.ts'
import { startServer } from './server.ts'

const floodConnections = Number(process.argv[2] ?? 500)
const RECORD_SECONDS = 6

/** One line of `perf sched timehist --state`: a thread leaving a core. */
interface Switch {
  at: number
  cpu: number
  comm: string
  tid: number
  pid: number
  /** From being woken to getting a core, in s. */
  delay: number
  /** How long it had just run, in s. */
  ran: number
  /** Its state as it left: R when it was preempted, S or D when it went to sleep. */
  state: string
}

function parseTimehist(text: string): Switch[] {
  const switches: Switch[] = []
  for (const line of text.split('\n')) {
    const m = /^\s*([\d.]+)\s+\[(\d+)\]\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$/.exec(line)
    if (!m) continue
    const task = /^(.*)\[(\d+)(?:\/(\d+))?\]$/.exec(m[3]!)
    const tid = task ? Number(task[2]) : 0
    switches.push({
      at: Number(m[1]),
      cpu: Number(m[2]),
      comm: task ? task[1]! : m[3]!,
      tid,
      pid: task ? Number(task[3] ?? tid) : 0,
      delay: Number(m[5]) / 1000,
      ran: Number(m[6]) / 1000,
      state: m[7]!,
    })
  }
  return switches
}

function summarise(switches: Switch[], serverPid: number) {
  const label = (s: Switch) =>
    s.tid === serverPid ? 'server event loop'
    : s.pid === serverPid ? 'server helper threads (hashing, V8)'
    : s.pid === process.pid ? 'read generator (this process)'
    : s.comm === '<idle>' ? 'nothing (idle)'
    : s.comm === 'node' ? 'flood generator (the other node process)'
    : s.comm
  // Each core's runs in time order, to find who ran on it during a wait.
  const runs = new Map<number, { from: number; to: number; who: string }[]>()
  for (const s of switches) {
    if (!runs.has(s.cpu)) runs.set(s.cpu, [])
    runs.get(s.cpu)!.push({ from: s.at - s.ran, to: s.at, who: label(s) })
  }
  const heldBy = (cpu: number, from: number, to: number, self: string, into: Map<string, number>) => {
    const list = runs.get(cpu) ?? []
    let lo = 0
    let hi = list.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (list[mid]!.to <= from) lo = mid + 1
      else hi = mid
    }
    for (let i = lo; i < list.length && list[i]!.from < to; i++) {
      const run = list[i]!
      const overlap = Math.min(run.to, to) - Math.max(run.from, from)
      if (overlap > 0 && run.who !== self) into.set(run.who, (into.get(run.who) ?? 0) + overlap)
    }
  }
  const waitsOf = (who: string, mine: (s: Switch) => boolean) => {
    const own = switches.filter(mine)
    let ran = 0
    let waited = 0
    let longCount = 0
    let longWaited = 0
    const held = new Map<string, number>()
    for (let i = 0; i < own.length; i++) {
      ran += own[i]!.ran
      if (i === 0) continue
      const before = own[i - 1]!
      const after = own[i]!
      const start = after.at - after.ran
      // Preempted: runnable from leaving its core until it ran again. Woken: from the wake-up.
      const [from, cpu] = before.state === 'R' ? [before.at, before.cpu] : [start - after.delay, after.cpu]
      const wait = start - from
      if (wait <= 0) continue
      waited += wait
      if (wait > 0.001) {
        longCount++
        longWaited += wait
        heldBy(cpu, from, start, who, held)
      }
    }
    const ms = (s: number) => Math.round(s * 1000)
    return {
      ran_ms: ms(ran),
      runnable_without_core_ms: ms(waited),
      waits_over_1ms: longCount,
      waits_over_1ms_total_ms: ms(longWaited),
      their_core_held_by_ms: Object.fromEntries([...held].filter(([, v]) => v >= 0.0005).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, ms(v)])),
    }
  }
  const first = switches[0]?.at ?? 0
  return {
    recorded_s: +((switches.at(-1)?.at ?? first) - first).toFixed(1),
    event_loop: waitsOf('server event loop', (s) => s.tid === serverPid),
    read_generator: waitsOf('read generator (this process)', (s) => s.tid === process.pid),
  }
}

const server = await startServer({ RATE_LIMIT_LOGIN_PER_IP: '100000000', LOGIN_FREE_FAILURES: '100' })
const scratch = mkdtempSync(path.join(tmpdir(), 'portcullis-sched-'))
try {
  const { reads: me, flood: loginFlood } = await floodBench(server)
  const alone = await me()

  const data = path.join(scratch, 'perf.data')
  const perf = spawn('perf', ['sched', 'record', '-a', '-o', data, '--', 'sleep', String(RECORD_SECONDS)], { stdio: ['ignore', 'ignore', 'pipe'] })
  let perfErrors = ''
  perf.stderr.on('data', (chunk) => (perfErrors += chunk))
  const recorded = new Promise<number | null>((resolve) => perf.once('exit', resolve))
  const [during, flood] = await Promise.all([me(), loginFlood(floodConnections)])
  if ((await recorded) !== 0) throw new Error(`perf sched record failed (it needs linux-perf and /sys/kernel/tracing): ${perfErrors.trim()}`)
  const timehist = execFileSync('perf', ['sched', 'timehist', '-i', data, '--state'], { encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'ignore'] })

  const p99 = (load: typeof alone) => +load.percentile(99).toFixed(2)
  console.log(JSON.stringify({
    bearer_p99_ms: { alone: p99(alone), during_flood: p99(during) },
    login_flood: { connections: floodConnections, status_2xx: flood['2xx'], status_503: flood.non2xx },
    ...summarise(parseTimehist(timehist), server.child.pid!),
  }, null, 2))
} finally {
  rmSync(scratch, { recursive: true, force: true })
  await server.stop()
}

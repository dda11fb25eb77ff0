// A bench-only preload (node --import) for the service: samples the process's memory every 50 ms
// and, when the process exits, writes to $BENCH_MEMORY_PROBE the sample taken at the highest
// resident size, split as far as the process can see it: V8's heap (reserved and used), memory
// outside the heap that JavaScript objects hold (external, array buffers), and the resident set
// as anonymous memory (everything malloc, V8 and the threads' stacks hold) and file-backed pages
// (the node binary and libraries). What is anonymous but not V8's is native: argon2id's working
// memory, SQLite's and libuv's, the allocators' free lists. Each SIGUSR2 takes a sample to compare
// the peak with (written beside it as `marks`, in order).
import { readFileSync, writeFileSync } from 'node:fs'

const kb = (text, field) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(text)?.[1] ?? 0) * 1024
let peak
const marks = []
function sample() {
  const status = readFileSync('/proc/self/status', 'utf8')
  const now = { ...process.memoryUsage(), anon: kb(status, 'RssAnon'), file: kb(status, 'RssFile') }
  if (!peak || now.rss > peak.rss) peak = now
  return now
}
sample()
setInterval(sample, 50).unref()
process.on('SIGUSR2', () => marks.push(sample()))
process.on('exit', () => writeFileSync(process.env.BENCH_MEMORY_PROBE, JSON.stringify({ peak, marks })))

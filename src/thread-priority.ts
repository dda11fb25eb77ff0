import { execFile } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { access } from 'node:fs/promises'
import { setPriority } from 'node:os'

/** The lowest CPU priority a thread can have (nice 19). */
const LOWEST = 19

export interface YieldedThreads {
  /** How many threads were lowered. */
  threads: number
  /** `idle` when every one runs under SCHED_IDLE; `nice 19` when util-linux's chrt was not there or did not set it for all of them. */
  policy: 'idle' | 'nice 19' | 'none'
}

/** Linux's SCHED_IDLE for one thread, through util-linux's chrt (Node has no call for it). */
function scheduleIdle(tid: number): Promise<boolean> {
  return new Promise((resolve) => {
    execFile('chrt', ['--idle', '--pid', '0', String(tid)], { timeout: 5_000 }, (error) => resolve(error === null))
  })
}

/**
 * Puts every thread of this process except the event loop's at the lowest CPU priority, so that
 * when the cores are short the event loop runs first. The threads are libuv's pool, where argon2id
 * hashes (15 ms of pure CPU each), and V8's helpers. During a login flood the hashes otherwise take
 * both cores of a small machine and every bearer request waits behind them; lowered, they get what
 * the event loop leaves, which on a machine with CPU to spare is all of it, so logins alone are no slower.
 *
 * Two steps, both per thread and without privilege (only raising a priority needs one): nice 19,
 * then the SCHED_IDLE policy. Under nice 19 a hash that has just been given a core still keeps it
 * for a moment when the event loop wakes; a SCHED_IDLE thread gives it up at once. Linux keeps both
 * per thread, so no other process is touched. Elsewhere this does nothing.
 */
export async function yieldThreadsToEventLoop(): Promise<YieldedThreads> {
  if (process.platform !== 'linux') return { threads: 0, policy: 'none' }
  // libuv starts its whole pool on the first piece of work given to it; one file-system call makes
  // sure the pool's threads exist before they are looked for.
  await access('/proc/self/task')
  const lowered: number[] = []
  for (const entry of readdirSync('/proc/self/task')) {
    const tid = Number(entry)
    if (tid === process.pid) continue
    try {
      setPriority(tid, LOWEST)
      lowered.push(tid)
    } catch {
      // A thread that ended between the listing and now.
    }
  }
  const idle = await Promise.all(lowered.map(scheduleIdle))
  return { threads: lowered.length, policy: lowered.length > 0 && idle.every(Boolean) ? 'idle' : 'nice 19' }
}

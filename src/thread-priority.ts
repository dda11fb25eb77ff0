import { readdirSync } from 'node:fs'
import { access } from 'node:fs/promises'
import { setPriority } from 'node:os'

/** The lowest CPU priority a thread can have (nice 19). */
const LOWEST = 19

/**
 * Puts every thread of this process except the event loop's at the lowest CPU priority, so that
 * when the cores are short the event loop runs first. The threads are libuv's pool, where argon2id
 * hashes (15 ms of pure CPU each), and V8's helpers. During a login flood the hashes otherwise take
 * both cores of a small machine and every bearer request waits behind them; niced, they get what the
 * event loop leaves, which on a machine with CPU to spare is all of it, so logins alone are no slower.
 *
 * Linux keeps a nice value per thread, so this touches no other process and needs no privilege
 * (only raising a priority would). Elsewhere it does nothing. Returns how many threads it lowered.
 */
export async function yieldThreadsToEventLoop(): Promise<number> {
  if (process.platform !== 'linux') return 0
  // libuv starts its whole pool on the first piece of work given to it; one file-system call makes
  // sure the pool's threads exist before they are looked for.
  await access('/proc/self/task')
  let lowered = 0
  for (const entry of readdirSync('/proc/self/task')) {
    const tid = Number(entry)
    if (tid === process.pid) continue
    try {
      setPriority(tid, LOWEST)
      lowered++
    } catch {
      // A thread that ended between the listing and now.
    }
  }
  return lowered
}

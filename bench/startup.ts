// npx tsx bench/startup.ts: how long the built service takes from process start to listening (npm
// start's command, an empty data directory made once beforehand), and whether the OpenID provider's
// library was imported by then (issue 31: start-up must not pay for it; it loads on first use).
// Runs BENCH_STARTS (7) starts one after the other; prints each and the median.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const STARTS = Number(process.env.BENCH_STARTS ?? 7)
// A loader hook that reports any import of oidc-provider on stderr.
const watch = `data:text/javascript,import{registerHooks}from"node:module";registerHooks({resolve(s,c,n){if(s.includes("oidc-provider"))process.stderr.write("oidc-provider imported\\n");return n(s,c)}})`

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'portcullis-startup-'))
const runs: { ms: number; libraryLoaded: boolean }[] = []
try {
  for (let i = 0; i <= STARTS; i++) {
    const began = performance.now()
    const child = spawn(process.execPath, ['--max-semi-space-size=4', '--max-old-space-size=512', '--import', watch, 'dist/server.js'], {
      env: { ...process.env, DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'info' },
    })
    let libraryLoaded = false
    child.stderr.on('data', (chunk) => {
      if (String(chunk).includes('oidc-provider imported')) libraryLoaded = true
    })
    const ms = await new Promise<number>((resolve, reject) => {
      child.stdout.on('data', (chunk) => {
        if (String(chunk).includes('Server listening')) resolve(Math.round(performance.now() - began))
      })
      child.once('exit', (code) => reject(new Error(`the service exited (${code}) before listening`)))
    })
    child.kill('SIGKILL')
    // The first start creates the database and keys: not what a restart costs.
    if (i > 0) runs.push({ ms, libraryLoaded })
  }
} finally {
  rmSync(dataDir, { recursive: true, force: true })
}
const sorted = runs.map((run) => run.ms).sort((a, b) => a - b)
console.log(`start-up to listening, ${STARTS} starts after a first one: ${runs.map((run) => run.ms).join(', ')} ms; median ${sorted[Math.floor(sorted.length / 2)]} ms`)
console.log(`oidc-provider imported during start-up: ${runs.some((run) => run.libraryLoaded) ? 'yes' : 'no'}`)

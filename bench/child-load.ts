// Load from a process of its own (autocannon's command line). A load generator shares its event
// loop with whatever else runs in its process: a 500-connection flood generated in the process
// that also measures bearer latency delays the measurement's own callbacks, and that delay was
// being counted as the server's (bench/RESULTS.md, 2026-11-22 third session).
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'

export interface ChildLoad {
  url: string
  connections: number
  seconds: number
  method?: string
  headers?: Record<string, string>
  body?: string
}

/** Resolves with autocannon's JSON result (its `2xx`, `non2xx`, `errors`, `latency`...). */
export function loadFromChild(load: ChildLoad): Promise<Record<string, any>> {
  const cli = createRequire(import.meta.url).resolve('autocannon/autocannon.js')
  const args = [cli, '--json', '-c', String(load.connections), '-d', String(load.seconds), '-m', load.method ?? 'GET']
  for (const [name, value] of Object.entries(load.headers ?? {})) args.push('-H', `${name}=${value}`)
  if (load.body !== undefined) args.push('-b', load.body)
  args.push(load.url)
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'ignore'] })
  let out = ''
  child.stdout.on('data', (chunk) => (out += chunk))
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`autocannon exited with ${code}`))))
  })
}

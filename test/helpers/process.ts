import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'

export interface ServerProcess {
  child: ChildProcess
  output(): string
}

/**
 * The built service (`dist/server.js`, what `npm start` runs in production) as a process of its
 * own, resolved once it listens. Mail goes to the outbox and the limits are the process's own
 * unless `env` says otherwise: processes of different tests must not share Redis counters.
 */
export async function startServerProcess(env: Record<string, string>): Promise<ServerProcess> {
  const child = spawn(process.execPath, ['dist/server.js'], {
    env: { ...process.env, NODE_ENV: 'development', LOG_LEVEL: 'info', SMTP_URL: '', REDIS_URL: '', DATABASE_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', (chunk) => (output += chunk))
  child.stderr!.on('data', (chunk) => (output += chunk))
  const port = env.PORT
  assert.ok(port, 'startServerProcess needs PORT')
  let up = false
  for (let i = 0; i < 150 && !up && child.exitCode === null; i++) {
    up = await fetch(`http://127.0.0.1:${port}/healthz`).then((response) => response.ok, () => false)
    if (!up) await new Promise((r) => setTimeout(r, 100))
  }
  if (!up) child.kill('SIGKILL')
  assert.ok(up, `the server did not come up:\n${output}`)
  return { child, output: () => output }
}

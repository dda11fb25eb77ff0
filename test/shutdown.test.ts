import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { Agent, request } from 'node:http'
import { describe, test } from 'node:test'
import { createStorage, ENGINES } from './helpers/db.ts'
import { freePort } from './helpers/app.ts'
import { startServerProcess } from './helpers/process.ts'

interface Answer {
  status: number | 'reset' | 'error'
  connection?: string | undefined
  code?: string | undefined
}

/** One request; resolves with its status, or with how it failed at the socket. */
function send(port: number, agent: Agent | false, method: string, path: string, body?: unknown): Promise<Answer> {
  return new Promise((resolve) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const req = request({ host: '127.0.0.1', port, method, path, agent, headers: payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {} }, (res) => {
      let text = ''
      res.on('data', (chunk) => (text += chunk))
      res.on('end', () => {
        let code: string | undefined
        try {
          code = JSON.parse(text).error?.code
        } catch {}
        resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, code })
      })
    })
    req.on('error', (error: NodeJS.ErrnoException) => resolve({ status: error.code === 'ECONNRESET' ? 'reset' : 'error', code: error.code }))
    req.end(payload)
  })
}

async function startServer(env: Record<string, string>): Promise<{ child: ChildProcess; port: number; output: () => string }> {
  const port = await freePort()
  return { ...(await startServerProcess({ PORT: String(port), ...env })), port }
}

/**
 * The shutdown case of issue 12, made deterministic: the process is stopped (as a container held
 * at its CPU quota is), a burst of requests reaches it on new and on kept-alive connections, the
 * SIGTERM arrives, and the process resumes. Every one of those requests must get an answer.
 */
for (const engine of ENGINES) {
  describe(`graceful shutdown on ${engine}`, () => {
    test('requests that reached a stopped process before SIGTERM are all answered, none reset; exit 0', async () => {
      const storage = await createStorage(engine)
      const { child, port, output } = await startServer({ DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl ?? '', SHUTDOWN_DRAIN_SECONDS: '1' })
      const keepAlive = new Agent({ keepAlive: true, maxSockets: 8 })
      try {
        // Eight connections kept alive by earlier requests.
        const warm = await Promise.all(Array.from({ length: 8 }, () => send(port, keepAlive, 'GET', '/healthz')))
        assert.ok(warm.every((answer) => answer.status === 200))

        child.kill('SIGSTOP')
        const burst = [
          ...Array.from({ length: 8 }, (_, i) => send(port, keepAlive, 'GET', i % 2 ? '/readyz' : '/healthz')),
          ...Array.from({ length: 12 }, (_, i) =>
            i % 3 === 0
              ? send(port, false, 'POST', '/api/v1/auth/register', { email: `stopped-${i}@example.com`, password: 'a long and unguessable passphrase', full_name: 'Stopped' })
              : send(port, false, 'GET', '/healthz'),
          ),
        ]
        // Let every request be written into the stopped process's socket buffers and backlog.
        await new Promise((r) => setTimeout(r, 300))
        child.kill('SIGTERM')
        child.kill('SIGCONT')

        const answers = await Promise.all(burst)
        const failed = answers.filter((answer) => typeof answer.status !== 'number')
        assert.deepEqual(failed, [], `not answered: ${JSON.stringify(failed)}`)
        for (const answer of answers) {
          assert.ok([200, 201, 503].includes(answer.status as number), JSON.stringify(answer))
          if (answer.status === 503) assert.equal(answer.code, 'SERVICE_UNAVAILABLE')
        }
        const [code] = (await once(child, 'exit')) as [number | null]
        assert.equal(code, 0, output())
      } finally {
        keepAlive.destroy()
        child.kill('SIGKILL')
        await storage.drop()
      }
    })

    test('SIGINT the same: /readyz answers 503 at once while requests are still served, then the listener closes', async () => {
      const storage = await createStorage(engine)
      const { child, port, output } = await startServer({ DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl ?? '', SHUTDOWN_DRAIN_SECONDS: '2' })
      try {
        assert.equal((await send(port, false, 'GET', '/readyz')).status, 200)
        const signalled = Date.now()
        child.kill('SIGINT')
        await new Promise((r) => setTimeout(r, 200))
        const ready = await send(port, false, 'GET', '/readyz')
        assert.equal(ready.status, 503, 'a load balancer sees the instance leave')
        assert.equal(ready.code, 'SERVICE_UNAVAILABLE')
        const served = await send(port, false, 'GET', '/healthz')
        assert.equal(served.status, 200, 'requests are still answered during the drain')
        assert.equal(served.connection, 'close', 'and keep-alive clients are told to move on')
        const [code] = (await once(child, 'exit')) as [number | null]
        assert.equal(code, 0, output())
        assert.ok(Date.now() - signalled >= 2000, 'the drain period was kept')
        assert.equal((await send(port, false, 'GET', '/healthz')).status, 'error', 'nothing listens afterwards')
      } finally {
        child.kill('SIGKILL')
        await storage.drop()
      }
    })
  })
}

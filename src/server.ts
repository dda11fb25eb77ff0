import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.ts'
import { ConfigError, loadConfig, type Config } from './config.ts'
import { isDatabaseUnavailable } from './db/index.ts'

/** Start-up waits for a database that is not there yet (a container starting beside us), with backoff. */
async function buildWhenDatabaseIsUp(config: Config): Promise<FastifyInstance> {
  for (let attempt = 1, delay = 500; ; attempt++, delay = Math.min(delay * 2, 10_000)) {
    try {
      return await buildApp(config)
    } catch (error) {
      if (!isDatabaseUnavailable(error)) throw error
      process.stderr.write(`portcullis: database unreachable (attempt ${attempt}), retrying in ${delay} ms\n`)
      await sleep(delay)
    }
  }
}

const SHUTDOWN_DEADLINE_MS = 20_000

export async function serve(config: Config): Promise<void> {
  const app = await buildWhenDatabaseIsUp(config)
  let closing = false
  const shutdown = async (signal: string) => {
    if (closing) return
    closing = true
    app.log.info({ signal }, 'shutting down: no new connections, finishing in-flight requests')
    // Fastify stops accepting, waits for in-flight requests, then runs onClose (mail drain, database close).
    // A client that holds a request open past the deadline is cut off rather than blocking the stop.
    const deadline = setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_DEADLINE_MS)
    deadline.unref()
    await app.close()
    process.exitCode = 0
  }
  process.once('SIGTERM', () => void shutdown('SIGTERM'))
  process.once('SIGINT', () => void shutdown('SIGINT'))
  await app.listen({ port: config.port, host: config.host })
}

const isEntry = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (isEntry) {
  try {
    await serve(loadConfig())
  } catch (error) {
    process.stderr.write(`portcullis: ${error instanceof ConfigError ? error.message : (error as Error).message}\n`)
    process.exitCode = 1
  }
}

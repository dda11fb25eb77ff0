import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.ts'
import { ConfigError, loadConfig, type Config } from './config.ts'
import { isDatabaseUnavailable } from './db/index.ts'
import { yieldThreadsToEventLoop } from './thread-priority.ts'

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

/** After the drain, in-flight requests get this long before their connections are cut. */
const SHUTDOWN_DEADLINE_MS = 19_000

export async function serve(config: Config): Promise<void> {
  const app = await buildWhenDatabaseIsUp(config)
  let closing = false
  let endDrain = () => {}
  const shutdown = async (signal: string) => {
    if (closing) {
      // A second signal (a second Ctrl-C) skips what is left of the drain.
      endDrain()
      return
    }
    closing = true
    // 1. Leave: /readyz answers 503 and every answer carries Connection: close, while the listener
    //    stays open, so requests already on their way (queued in the backlog while the process was
    //    stalled, or sent before the load balancer noticed) are accepted and answered, not reset.
    app.services.readiness.leave()
    app.log.info({ signal, drainMs: config.shutdownDrainMs }, 'shutting down: /readyz now answers 503; still serving during the drain')
    await new Promise<void>((resolve) => {
      endDrain = resolve
      setTimeout(resolve, config.shutdownDrainMs)
    })
    // 2. Close: Fastify stops accepting, waits for in-flight requests, then runs onClose (mail
    //    drain, database close). A client holding a request open past the deadline is cut off.
    app.log.info('closing the listener, finishing in-flight requests')
    const deadline = setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_DEADLINE_MS)
    deadline.unref()
    await app.close()
    process.exitCode = 0
  }
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
  process.on('SIGINT', () => void shutdown('SIGINT'))
  await app.listen({ port: config.port, host: config.host })
  app.log.info(await yieldThreadsToEventLoop(), 'helper threads (password hashing among them) set to the lowest CPU priority')
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

import type { FastifyInstance } from 'fastify'

/**
 * Counts the route handlers running. On close, Fastify waits for open connections; a request
 * whose client has already gone (a load generator stopping, a user closing the tab while a login
 * waits for a hashing slot) has no connection left to wait for, yet its handler still runs and
 * writes. Shutdown waits for these too before the database closes, so they finish instead of
 * failing half-way on a closed pool.
 */
export class HandlersInFlight {
  private running = 0
  private waiters: (() => void)[] = []

  /** Wraps every route registered after this call. */
  install(app: FastifyInstance): void {
    const tracker = this
    app.addHook('onRoute', (route) => {
      const handler = route.handler
      // A handler that answers through a promise is counted until it settles; one that answers
      // synchronously or by callback (static files) is passed through exactly as it was, since
      // Fastify treats the two kinds differently.
      route.handler = function (this: FastifyInstance, request, reply) {
        const result: unknown = handler.call(this, request, reply)
        if (!(result instanceof Promise)) return result
        tracker.running++
        return result.finally(() => {
          tracker.running--
          if (tracker.running === 0) for (const wake of tracker.waiters.splice(0)) wake()
        })
      }
    })
  }

  /** Resolves when no handler runs, or after `deadlineMs` whatever is still running. */
  async idle(deadlineMs: number): Promise<void> {
    if (this.running === 0) return
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      new Promise<void>((resolve) => this.waiters.push(resolve)),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, deadlineMs)
      }),
    ])
    clearTimeout(timer)
  }
}

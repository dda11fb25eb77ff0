import type { FastifyInstance } from 'fastify'
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client'
import { RequestMetrics } from './request-metrics.ts'

/**
 * The Prometheus metrics of one app instance, on prom-client with a registry of its own (tests
 * build several apps in one process): requests by method, route pattern and status, their
 * duration as a histogram (so percentiles can be computed and alerted on), Node's process metrics
 * (memory, event-loop lag, GC), and gauges and counters the services register. Route patterns,
 * never raw paths, keep label cardinality bounded; unknown paths count as "unmatched".
 */
export class Metrics {
  readonly registry = new Registry()
  private readonly requests = new RequestMetrics(this.registry)

  constructor() {
    collectDefaultMetrics({ register: this.registry })
  }

  gauge(options: { name: string; help: string; read(): number }): void {
    const { read } = options
    new Gauge({
      name: options.name,
      help: options.help,
      registers: [this.registry],
      collect() {
        this.set(read())
      },
    })
  }

  counter<Label extends string>(options: { name: string; help: string; labelNames?: readonly Label[] }): Counter<Label> {
    return new Counter({ name: options.name, help: options.help, labelNames: options.labelNames ?? [], registers: [this.registry] })
  }

  /** Counts the requests of every route registered after this call (src/http/request-metrics.ts). */
  install(app: FastifyInstance): void {
    this.requests.install(app)
  }

  contentType(): string {
    return this.registry.contentType
  }

  render(): Promise<string> {
    return this.registry.metrics()
  }
}

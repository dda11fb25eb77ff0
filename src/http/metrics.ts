import type { FastifyInstance } from 'fastify'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'

/** Seconds; from a cached bearer read to a slow password hash. */
const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

/**
 * The Prometheus metrics of one app instance, on prom-client with a registry of its own (tests
 * build several apps in one process): requests by method, route pattern and status, their
 * duration as a histogram (so percentiles can be computed and alerted on), Node's process metrics
 * (memory, event-loop lag, GC), and gauges and counters the services register. Route patterns,
 * never raw paths, keep label cardinality bounded; unknown paths count as "unmatched".
 */
export class Metrics {
  readonly registry = new Registry()
  private readonly requests = new Counter({
    name: 'portcullis_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  })
  private readonly durations = new Histogram({
    name: 'portcullis_http_request_duration_seconds',
    help: 'Time spent answering, by method and route pattern.',
    labelNames: ['method', 'route'] as const,
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  })

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

  install(app: FastifyInstance): void {
    app.addHook('onResponse', (request, reply, done) => {
      const route = request.routeOptions.url ?? 'unmatched'
      this.requests.inc({ method: request.method, route, status: reply.statusCode })
      this.durations.observe({ method: request.method, route }, reply.elapsedTime / 1000)
      done()
    })
  }

  contentType(): string {
    return this.registry.contentType
  }

  render(): Promise<string> {
    return this.registry.metrics()
  }
}

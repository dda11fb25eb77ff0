import type { FastifyInstance } from 'fastify'

export interface Gauge {
  name: string
  help: string
  read(): number
}

/**
 * Prometheus text exposition of a few counters: requests by method, route pattern and status,
 * their total duration, and gauges the service registers. Route patterns (not raw paths) keep
 * label cardinality bounded; unknown paths count as "unmatched".
 */
export class Metrics {
  private readonly requests = new Map<string, number>()
  private readonly durations = new Map<string, { sum: number; count: number }>()
  private readonly gauges: Gauge[] = []
  private readonly started = Date.now()

  gauge(gauge: Gauge): void {
    this.gauges.push(gauge)
  }

  install(app: FastifyInstance): void {
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? 'unmatched'
      const key = `method="${request.method}",route="${route}",status="${reply.statusCode}"`
      this.requests.set(key, (this.requests.get(key) ?? 0) + 1)
      const duration = this.durations.get(route) ?? { sum: 0, count: 0 }
      duration.sum += reply.elapsedTime / 1000
      duration.count++
      this.durations.set(route, duration)
    })
  }

  render(): string {
    const lines = [
      '# HELP portcullis_http_requests_total HTTP requests answered, by method, route pattern and status.',
      '# TYPE portcullis_http_requests_total counter',
      ...[...this.requests].map(([labels, value]) => `portcullis_http_requests_total{${labels}} ${value}`),
      '# HELP portcullis_http_request_duration_seconds Time spent answering, by route pattern.',
      '# TYPE portcullis_http_request_duration_seconds summary',
      ...[...this.durations].flatMap(([route, d]) => [
        `portcullis_http_request_duration_seconds_sum{route="${route}"} ${d.sum.toFixed(6)}`,
        `portcullis_http_request_duration_seconds_count{route="${route}"} ${d.count}`,
      ]),
      '# HELP portcullis_uptime_seconds Seconds since this instance started.',
      '# TYPE portcullis_uptime_seconds gauge',
      `portcullis_uptime_seconds ${((Date.now() - this.started) / 1000).toFixed(0)}`,
    ]
    for (const gauge of this.gauges) {
      lines.push(`# HELP ${gauge.name} ${gauge.help}`, `# TYPE ${gauge.name} gauge`, `${gauge.name} ${gauge.read()}`)
    }
    return `${lines.join('\n')}\n`
  }
}

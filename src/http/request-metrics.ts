import type { FastifyInstance, FastifyReply, FastifyRequest, onResponseHookHandler } from 'fastify'
import type { Registry } from 'prom-client'

/** Seconds; from a cached bearer read to a slow password hash. */
export const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

const REQUESTS = { name: 'portcullis_http_requests_total', help: 'HTTP requests answered, by method, route pattern and status.' }
const DURATIONS = { name: 'portcullis_http_request_duration_seconds', help: 'Time spent answering, by method and route pattern.' }

interface Count {
  labels: { method: string; route: string; status: number }
  value: number
}

interface Durations {
  labels: { method: string; route: string }
  /** Per bucket of DURATION_BUCKETS, then one for anything above the last: not cumulative. */
  inBucket: number[]
  sum: number
  count: number
}

/** A value of prom-client's exposition (what its own metrics' getForPromString returns). */
interface Exposed {
  value: number
  labels: Record<string, string | number>
  sharedLabels?: Record<string, string | number>
  metricName?: string
}

/**
 * Requests by method, route pattern and status, and their durations as a histogram: counted in
 * plain maps as each request ends, and turned into prom-client's exposition only when /metrics is
 * read. prom-client's own counter and histogram build a key string from the labels object on
 * every update, and with the route read through Fastify's `request.routeOptions` (an object of a
 * dozen fields built at each read) the two updates were about a tenth of a bearer read's server
 * CPU (issue 46). Here the route's pattern is taken once, when the route is registered: each route
 * gets an onResponse hook of its own that knows it, and requests no route matched count as
 * "unmatched". The exposition is prom-client's, line for line (test/unit/request-metrics.test.ts
 * compares the two for the same requests).
 */
export class RequestMetrics {
  // In the order first seen, which is the order of the exposition (as prom-client's own).
  private readonly counts: Count[] = []
  private readonly durations: Durations[] = []
  private readonly routes = new Map<string, RouteTally>()

  constructor(registry: Registry) {
    registry.registerMetric(this.metric(REQUESTS.name, REQUESTS.help, 'counter', () => this.counts.map((count) => ({ value: count.value, labels: { ...count.labels } }))) as never)
    registry.registerMetric(this.metric(DURATIONS.name, DURATIONS.help, 'histogram', () => this.durations.flatMap((entry) => histogramValues(entry))) as never)
  }

  /** One request answered. */
  record(method: string, route: string, status: number, seconds: number): void {
    this.routeTally(route).record(method, status, seconds)
  }

  /** Counts every request answered by a route registered after this call, and every unmatched one. */
  install(app: FastifyInstance): void {
    const hookFor = (tally: RouteTally): onResponseHookHandler => (request, reply, done) => {
      tally.record(request.method, reply.statusCode, reply.elapsedTime / 1000)
      done()
    }
    app.addHook('onRoute', (route) => {
      route.onResponse = [...[route.onResponse ?? []].flat(), hookFor(this.routeTally(route.url))] as never
    })
    const unmatched = hookFor(this.routeTally('unmatched'))
    app.addHook('onResponse', (request, reply, done) => {
      if (request.is404) unmatched.call(app, request, reply, done)
      else done()
    })
  }

  private routeTally(route: string): RouteTally {
    let tally = this.routes.get(route)
    if (!tally) {
      tally = new RouteTally(route, this.counts, this.durations)
      this.routes.set(route, tally)
    }
    return tally
  }

  private metric(name: string, help: string, type: 'counter' | 'histogram', values: () => Exposed[]) {
    const metric = {
      // prom-client's registry renames a counter for OpenMetrics (no "_total" of its own) by setting this.
      name,
      help,
      type,
      aggregator: 'sum' as const,
      getForPromString: async () => ({ name: metric.name, help, type, values: values(), aggregator: 'sum' as const }),
      // prom-client's JSON form has the shared labels folded into each value's own.
      get: async () => {
        const exposed = await metric.getForPromString()
        return { ...exposed, values: exposed.values.map(({ sharedLabels, ...value }) => ({ ...value, labels: { ...value.labels, ...sharedLabels } })) }
      },
      reset: () => {
        for (const tally of this.routes.values()) tally.reset(type)
        if (type === 'counter') this.counts.length = 0
        else this.durations.length = 0
      },
    }
    return metric
  }
}

/** One route's counts: by method, then status, each entry also listed for the exposition. */
class RouteTally {
  private readonly methods = new Map<string, { durations: Durations; statuses: Map<number, Count> }>()

  constructor(
    private readonly route: string,
    private readonly counts: Count[],
    private readonly durations: Durations[],
  ) {}

  record(method: string, status: number, seconds: number): void {
    let byMethod = this.methods.get(method)
    if (!byMethod) {
      const durations: Durations = { labels: { method, route: this.route }, inBucket: new Array<number>(DURATION_BUCKETS.length + 1).fill(0), sum: 0, count: 0 }
      byMethod = { durations, statuses: new Map() }
      this.methods.set(method, byMethod)
    }
    let count = byMethod.statuses.get(status)
    if (!count) {
      count = { labels: { method, route: this.route, status }, value: 0 }
      byMethod.statuses.set(status, count)
      this.counts.push(count)
    }
    count.value++
    const entry = byMethod.durations
    if (entry.count === 0) this.durations.push(entry)
    let bucket = 0
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket++
    entry.inBucket[bucket]!++
    entry.sum += seconds
    entry.count++
  }

  /** prom-client's reset: the counts (or the durations) start again from nothing. */
  reset(type: 'counter' | 'histogram'): void {
    for (const byMethod of this.methods.values()) {
      if (type === 'counter') byMethod.statuses.clear()
      else byMethod.durations = { ...byMethod.durations, inBucket: byMethod.durations.inBucket.map(() => 0), sum: 0, count: 0 }
    }
  }
}

/** One route's histogram as prom-client exposes it: cumulative buckets, +Inf, sum, count. */
function histogramValues(entry: Durations): Exposed[] {
  const out: Exposed[] = []
  let cumulative = 0
  DURATION_BUCKETS.forEach((bound, i) => {
    cumulative += entry.inBucket[i]!
    out.push({ labels: { le: bound }, sharedLabels: entry.labels, value: cumulative, metricName: `${DURATIONS.name}_bucket` })
  })
  out.push({ labels: { le: '+Inf' }, sharedLabels: entry.labels, value: entry.count, metricName: `${DURATIONS.name}_bucket` })
  out.push({ labels: {}, sharedLabels: entry.labels, value: entry.sum, metricName: `${DURATIONS.name}_sum` })
  out.push({ labels: {}, sharedLabels: entry.labels, value: entry.count, metricName: `${DURATIONS.name}_count` })
  return out
}

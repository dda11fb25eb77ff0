import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import Fastify from 'fastify'
import { Counter, Histogram, Registry } from 'prom-client'
import { DURATION_BUCKETS, RequestMetrics } from '../../src/http/request-metrics.ts'

/** The same requests counted by prom-client's own counter and histogram, the way the service did before. */
function promClientOf(requests: [string, string, number, number][]) {
  const registry = new Registry()
  const counter = new Counter({ name: 'portcullis_http_requests_total', help: 'HTTP requests answered, by method, route pattern and status.', labelNames: ['method', 'route', 'status'], registers: [registry] })
  const histogram = new Histogram({ name: 'portcullis_http_request_duration_seconds', help: 'Time spent answering, by method and route pattern.', labelNames: ['method', 'route'], buckets: DURATION_BUCKETS, registers: [registry] })
  for (const [method, route, status, seconds] of requests) {
    counter.inc({ method, route, status })
    histogram.observe({ method, route }, seconds)
  }
  return registry
}

describe('RequestMetrics', () => {
  // Durations on bucket bounds, between them, below the first and above the last.
  const requests: [string, string, number, number][] = [
    ['GET', '/api/v1/watchlists', 200, 0.0004],
    ['GET', '/api/v1/watchlists', 200, 0.001],
    ['GET', '/api/v1/watchlists', 401, 0.0031],
    ['POST', '/api/v1/auth/login', 200, 0.047],
    ['POST', '/api/v1/auth/login', 429, 0.0009],
    ['GET', 'unmatched', 404, 12.5],
    ['GET', '/api/v1/watchlists', 200, 2.5],
    ['POST', '/api/v1/auth/login', 200, 0.31],
  ]

  test("exposes exactly what prom-client's counter and histogram expose for the same requests, in both text formats", async () => {
    const registry = new Registry()
    const metrics = new RequestMetrics(registry)
    for (const [method, route, status, seconds] of requests) metrics.record(method, route, status, seconds)
    const theirs = promClientOf(requests)
    assert.equal(await registry.metrics(), await theirs.metrics())
    registry.setContentType(Registry.OPENMETRICS_CONTENT_TYPE as never)
    theirs.setContentType(Registry.OPENMETRICS_CONTENT_TYPE as never)
    assert.equal(await registry.metrics(), await theirs.metrics())
    registry.resetMetrics()
    assert.doesNotMatch(await registry.metrics(), /portcullis_http_requests_total\{/)
  })

  test("labels a request with its route's pattern, HEAD and unknown paths included", async () => {
    const registry = new Registry()
    const metrics = new RequestMetrics(registry)
    const app = Fastify()
    metrics.install(app)
    app.get('/things/:id', async () => ({ ok: true }))
    app.post('/things', { onResponse: (_request, _reply, done) => done() }, async (_request, reply) => reply.code(201).send({}))
    await app.ready()
    await app.inject({ method: 'GET', url: '/things/1' })
    await app.inject({ method: 'GET', url: '/things/2?x=1' })
    await app.inject({ method: 'HEAD', url: '/things/3' })
    await app.inject({ method: 'POST', url: '/things' })
    await app.inject({ method: 'GET', url: '/nothing/here' })
    const text = await registry.metrics()
    assert.match(text, /portcullis_http_requests_total\{method="GET",route="\/things\/:id",status="200"\} 2\n/)
    assert.match(text, /portcullis_http_requests_total\{method="HEAD",route="\/things\/:id",status="200"\} 1\n/)
    assert.match(text, /portcullis_http_requests_total\{method="POST",route="\/things",status="201"\} 1\n/)
    assert.match(text, /portcullis_http_requests_total\{method="GET",route="unmatched",status="404"\} 1\n/)
    assert.match(text, /portcullis_http_request_duration_seconds_count\{method="GET",route="\/things\/:id"\} 2\n/)
    await app.close()
  })
})

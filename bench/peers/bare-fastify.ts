// The baseline: a bare Fastify server answering {"hello":"world"}, as its own process, so the
// ratios in bench/run.ts are against the framework's ceiling on the same machine in the same run.
import Fastify from 'fastify'

const app = Fastify()
app.get('/', async () => ({ hello: 'world' }))
app.get('/healthz', async () => ({ ok: true }))
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' })

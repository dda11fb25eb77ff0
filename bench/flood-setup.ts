// What bench/flood.ts and bench/flood-sched.ts share: one account with a bearer token, 8
// connections of GET /auth/me with it, and a login flood of that account from a process of its
// own (bench/child-load.ts says why).
import { loadFromChild } from './child-load.ts'
import { timedLoad, type TimedLoad } from './latency.ts'
import type { BenchServer } from './server.ts'

export interface FloodBench {
  /** 10 s of bearer reads (GET /auth/me) at 8 connections, each response timed. */
  reads(): Promise<TimedLoad>
  /** 10 s of POST /auth/login for the same account from `connections` connections; autocannon's JSON result. */
  flood(connections: number): Promise<Record<string, any>>
}

export async function floodBench(server: BenchServer): Promise<FloodBench> {
  const base = `${server.base}/api/v1`
  const json = { 'content-type': 'application/json' }
  const email = `flood-${Date.now()}@example.com`
  const password = 'a flood benchmark passphrase'
  await fetch(`${base}/auth/register`, { method: 'POST', headers: json, body: JSON.stringify({ email, password, full_name: 'Flood' }) })
  const token = (await (await fetch(`${base}/auth/login`, { method: 'POST', headers: json, body: JSON.stringify({ email, password }) })).json()).data.access_token
  return {
    reads: () => timedLoad({ url: `${base}/auth/me`, connections: 8, duration: 10, headers: { authorization: `Bearer ${token}` } }),
    flood: (connections) => loadFromChild({ url: `${base}/auth/login`, connections, seconds: 10, method: 'POST', headers: json, body: JSON.stringify({ email, password }) }),
  }
}

// npm run bench:startup: how long the built service takes from process start to its first 200 from
// /healthz (npm start's command, on a data directory its first start made), and whether the OpenID
// provider's library was imported by then (start-up must not pay for it; it loads on first use).
// BENCH_STARTS (7) starts one after the other, after a first one that creates the database and keys
// (not what a restart costs); BENCH_ENGINES (sqlite), one database per engine.
import { benchDatabases } from './lib/databases.ts'
import { median, met, Report, settings } from './lib/report.ts'
import { startArgs, startServer } from './lib/server.ts'

const s = settings({ engines: ['sqlite'] })
const STARTS = Number(process.env.BENCH_STARTS ?? 7)
// A loader hook that says on stderr when anything imports oidc-provider.
const WATCH = `data:text/javascript,import{registerHooks}from"node:module";registerHooks({resolve(s,c,n){if(s.includes("oidc-provider"))process.stderr.write("oidc-provider imported\\n");return n(s,c)}})`
const args = startArgs()
const watched = [...args.slice(0, -1), '--import', WATCH, args.at(-1)!]

const report = new Report('npm run bench:startup', s, [
  `server: node ${args.join(' ')} (npm start's command) with a loader hook watching for oidc-provider; ${STARTS} starts after a first one on the same data directory`,
], 'none (a start is timed to the first 200 from /healthz, polled every 5 ms)')
const databases = benchDatabases(s.engines, 'startup', 55494)

const rows = await report.eachEngine(databases, async (engine) => {
  await report.quiet()
  const database = await databases.fresh(engine)
  const first = await startServer(database.env, { args: watched })
  await first.stop({ keepData: true })
  const starts: number[] = []
  let imported = false
  try {
    for (let i = 0; i < STARTS; i++) {
      const server = report.server(await startServer(database.env, { args: watched, dataDir: first.dataDir, onStderr: (text) => (imported ||= text.includes('oidc-provider imported')) }))
      starts.push(Math.round(server.readyMs))
      await server.stop()
    }
  } finally {
    await first.stop()
    await database.drop()
  }
  return ['start to /healthz 200, existing database', engine, `${median(starts)} ms (${starts.join(', ')})`, `oidc-provider ${imported ? 'imported' : 'not imported'} at start: ${met(!imported)}`]
})
report.print(['case', 'engine', 'median (each start)', 'the provider library'], rows)

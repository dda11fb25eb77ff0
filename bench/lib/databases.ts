// The benches' databases: PostgreSQL from DATABASE_URL (its user must be able to create databases)
// or a throwaway cluster started here (scripts/pg-throwaway.sh), a database of its own for every
// run, and the database server's CPU time for the quiet-machine checks (bench/lib/quiet.ts).
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { cpuOfCommand, cpuOfTree } from './quiet.ts'

export interface BenchDatabases {
  /** A fresh store for one run: SQLite (the server's own DATA_DIR), or a new PostgreSQL database. */
  fresh(engine: string): Promise<{ env: Record<string, string>; drop(): Promise<void> }>
  /** The database server's CPU time so far (ms): ours if we started it, else every process named postgres. */
  cpuMs(): number
  /** Stops the throwaway cluster, if one was started. */
  stop(): void
}

/** `tag` names the bench in the databases it makes; `port` is its throwaway cluster's (one per bench, so two can run). */
export function benchDatabases(engines: string[], tag: string, port: number): BenchDatabases {
  let cluster: string | undefined
  let adminUrl = process.env.DATABASE_URL
  if (engines.includes('postgres') && !adminUrl) {
    cluster = mkdtempSync(path.join(os.tmpdir(), `portcullis-bench-${tag}-pg-`))
    const started = spawnSync('scripts/pg-throwaway.sh', ['start', cluster, String(port)], { encoding: 'utf8' })
    if (started.status !== 0) throw new Error(`could not start PostgreSQL: ${started.stderr}`)
    adminUrl = started.stdout.trim()
  }
  const postmaster = cluster ? Number(readFileSync(path.join(cluster, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]) : undefined
  let made = 0
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: adminUrl })
    await client.connect()
    try {
      await client.query(sql)
    } finally {
      await client.end()
    }
  }
  return {
    async fresh(engine) {
      // An empty DATABASE_URL, so that one in the bench's own environment does not turn a SQLite run into a PostgreSQL one.
      if (engine === 'sqlite') return { env: { DATABASE_URL: '' }, drop: async () => {} }
      const name = `portcullis_bench_${tag}_${process.pid}_${++made}`
      await admin(`CREATE DATABASE ${name}`)
      const url = new URL(adminUrl!)
      url.pathname = `/${name}`
      return { env: { DATABASE_URL: url.toString() }, drop: () => admin(`DROP DATABASE ${name} WITH (FORCE)`) }
    },
    cpuMs: () => (postmaster ? cpuOfTree(postmaster) : adminUrl ? cpuOfCommand('postgres') : 0),
    stop() {
      if (cluster) spawnSync('scripts/pg-throwaway.sh', ['stop', cluster])
    },
  }
}

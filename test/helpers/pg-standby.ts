import { execFile } from 'node:child_process'
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { freePort, within } from './app.ts'

const run = promisify(execFile)
const STANDBY_NAME = 'portcullis_standby'

const TOOLS = ['pg_ctl', 'initdb', 'pg_basebackup']

/**
 * Debian's server binaries, all from one folder: /usr/lib/postgresql/<newest>/bin, else a folder on
 * PATH that has them all (a PATH may link pg_ctl alone, as on this project's test machines).
 */
function serverBinaries(): string {
  const hasAll = (dir: string) => TOOLS.every((tool) => existsSync(path.join(dir, tool)))
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').sort((a, b) => Number(a) - Number(b)) : []
  const found = versions.map((version) => `/usr/lib/postgresql/${version}/bin`).filter(hasAll).pop() ?? (process.env.PATH ?? '').split(':').find(hasAll)
  if (!found) throw new Error(`no PostgreSQL server binaries (${TOOLS.join(', ')}): apt-get install postgresql`)
  return found
}

export interface Node {
  port: number
  dataDir: string
  log: string
}

export interface StandbyPair {
  primary: Node
  standby: Node
  /** libpq's multi-host form: the primary first, the standby second, read-write sessions only. */
  url: string
  /** The primary's URL alone (for checks made outside the service). */
  urlOf(node: Node): string
  /** The primary lost as a machine is: its postmaster and every server process SIGKILLed at once. */
  killPrimary(): Promise<void>
  /** `pg_ctl promote` on the standby, resolved once it accepts writes; its duration in ms. */
  promote(): Promise<number>
  /** Stops whatever still runs and removes the clusters. */
  stop(): Promise<void>
}

/**
 * A primary and a streaming standby on loopback, from Debian's binaries, in a temporary folder
 * this helper owns: `pg_basebackup -R` clones the primary, and the primary waits for the standby
 * on every commit (`synchronous_standby_names` names it, `synchronous_commit=on`), so a commit the
 * primary acknowledged is on the standby too. As root, the clusters run as the postgres user
 * (initdb refuses root). Throws, never skips, when anything fails; a half-started pair is removed.
 */
export async function startStandbyPair(): Promise<StandbyPair> {
  const bin = serverBinaries()
  const root = mkdtempSync(path.join(tmpdir(), 'portcullis-failover-'))
  const asRoot = process.getuid?.() === 0
  if (asRoot) chownSync(root, Number((await run('id', ['-u', 'postgres'])).stdout.trim()), Number((await run('id', ['-g', 'postgres'])).stdout.trim()))
  const asOwner = (command: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', path.join(bin, command), ...args]) : run(path.join(bin, command), args)
  const node = (name: string, port: number): Node => ({ port, dataDir: path.join(root, name), log: path.join(root, `${name}.log`) })
  const primary = node('primary', await freePort())
  const standby = node('standby', await freePort())
  const urlOf = (n: Node) => `postgres://app@127.0.0.1:${n.port}/postgres`
  // fsync=off: the clusters lose processes here, never the machine, so what a server wrote is in
  // the operating system's cache and survives; the commit still waits for the standby's report.
  const options = (port: number, extra = '') =>
    `-c listen_addresses=127.0.0.1 -p ${port} -k ${root} -c fsync=off -c max_connections=100 -c max_wal_senders=5 ${extra}`
  const start = (n: Node, extra = '') => asOwner('pg_ctl', ['-D', n.dataDir, '-l', n.log, '-w', '-t', '20', '-o', options(n.port, extra), 'start'])
  const tail = (n: Node) => (existsSync(n.log) ? readFileSync(n.log, 'utf8').slice(-2000) : '(no log)')

  const stop = async () => {
    for (const n of [standby, primary]) {
      if (existsSync(path.join(n.dataDir, 'postmaster.pid'))) await asOwner('pg_ctl', ['-D', n.dataDir, '-m', 'immediate', 'stop']).catch(() => {})
    }
    rmSync(root, { recursive: true, force: true })
  }

  try {
    await asOwner('initdb', ['-D', primary.dataDir, '-U', 'app', '--auth=trust', '-E', 'UTF8', '--no-locale'])
    // initdb's pg_hba.conf already trusts replication connections from 127.0.0.1.
    await start(primary, `-c synchronous_standby_names=${STANDBY_NAME} -c synchronous_commit=on`)
    await asOwner('pg_basebackup', ['-D', standby.dataDir, '-R', '-X', 'stream', '-d', `host=127.0.0.1 port=${primary.port} user=app application_name=${STANDBY_NAME}`])
    // The standby's own settings name no synchronous standby: once promoted it stands alone, and a
    // commit that waited for a standby that is not there would never be acknowledged.
    await start(standby)
    await within(20_000, async () => (await syncState(urlOf(primary))) === 'sync').catch((error: Error) => {
      throw new Error(`the standby never became synchronous (${error.message}):\n${tail(standby)}`)
    })
  } catch (error) {
    const logs = `primary log:\n${tail(primary)}\nstandby log:\n${tail(standby)}`
    await stop()
    const detail = error as Error & { stderr?: string }
    throw new Error(`could not start a PostgreSQL primary and standby: ${detail.message}\n${detail.stderr ?? ''}\n${logs}`)
  }

  return {
    primary,
    standby,
    url: `postgres://app@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres?target_session_attrs=read-write`,
    urlOf,
    async killPrimary() {
      const postmaster = Number(readFileSync(path.join(primary.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
      const children = childrenOf(postmaster)
      process.kill(postmaster, 'SIGKILL')
      for (const pid of children) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {
          // already gone
        }
      }
      await within(5_000, async () => !alive(postmaster) && children.every((pid) => !alive(pid)))
    },
    async promote() {
      const started = performance.now()
      await asOwner('pg_ctl', ['-D', standby.dataDir, '-w', '-t', '20', 'promote'])
      return performance.now() - started
    },
    stop,
  }
}

async function syncState(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url })
  try {
    await client.connect()
    const { rows } = await client.query<{ sync_state: string }>('select sync_state from pg_stat_replication where application_name = $1', [STANDBY_NAME])
    return rows[0]?.sync_state
  } catch {
    return undefined
  } finally {
    await client.end().catch(() => {})
  }
}

/** The server processes the postmaster started (backends, WAL sender, checkpointer...), by their parent id. */
function childrenOf(parent: number): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so read after its ')'.
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === parent
      } catch {
        return false
      }
    })
    .map(Number)
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ')
  } catch {
    return false
  }
}

// The test command. Runs every test file with node's test runner on both engines.
// PostgreSQL: DATABASE_URL when given (CI starts one); otherwise a throwaway cluster started here
// from the local PostgreSQL binaries. Redis likewise: REDIS_URL, or a throwaway redis-server.
// If neither works the run fails: no test is silently skipped.
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, statSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)))
const only = process.argv.slice(2)

function testFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name)
    if (statSync(full).isDirectory()) return testFiles(full)
    return name.endsWith('.test.ts') ? [full] : []
  })
}

/** A port nothing listens on right now, chosen by the OS (a random guess can collide). */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

const files = (only.length > 0 ? only : testFiles(path.join(root, 'test'))).sort()
const env = { ...process.env }
let cluster

if (!env.DATABASE_URL) {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-pg-'))
  const port = String(await freePort())
  const started = spawnSync(path.join(root, 'scripts/pg-throwaway.sh'), ['start', dir, port], { encoding: 'utf8' })
  if (started.status !== 0) {
    process.stderr.write(started.stderr)
    process.stderr.write('test: PostgreSQL is needed for the PostgreSQL half of the suite. Set DATABASE_URL or install PostgreSQL (apt-get install postgresql).\n')
    process.exit(1)
  }
  env.DATABASE_URL = started.stdout.trim()
  cluster = dir
}

let redis
if (!env.REDIS_URL) {
  const binary = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((candidate) => existsSync(candidate))
  if (!binary) {
    process.stderr.write('test: redis-server is needed for the shared-limit tests. Set REDIS_URL or install it (apt-get install redis-server).\n')
    if (cluster) spawnSync(path.join(root, 'scripts/pg-throwaway.sh'), ['stop', cluster])
    process.exit(1)
  }
  const port = String(await freePort())
  redis = spawn(binary, ['--port', port, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'], { stdio: 'ignore' })
  env.REDIS_URL = `redis://127.0.0.1:${port}`
}

const stop = () => {
  if (cluster) spawnSync(path.join(root, 'scripts/pg-throwaway.sh'), ['stop', cluster])
  cluster = undefined
  redis?.kill()
  redis = undefined
}
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => { stop(); process.exit(130) })

// TAP when the output is not a terminal (CI, a log file), as Node 20 chose by itself; Node 24's
// default is the spec reporter everywhere.
const reporter = process.stdout.isTTY ? [] : ['--test-reporter=tap']
const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...reporter, ...files], { env, stdio: 'inherit', cwd: root })
child.on('exit', (code, signal) => {
  stop()
  process.exit(code ?? (signal ? 1 : 0))
})

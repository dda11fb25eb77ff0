import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { freePort } from '../helpers/app.ts'
import { startServerProcess } from '../helpers/process.ts'

/**
 * The README's blocks marked to be pasted (a fence whose info string is `sh runnable`) run as a
 * person pastes them: in README order, in one shell (later blocks use the variables of earlier
 * ones), with `set -euo pipefail`, against the built service (`dist/server.js`, what `npm start`
 * runs) and from a directory that looks like the checkout, so `data/outbox/` and `npm run cli`
 * mean what they mean there.
 *
 * On SQLite only: this tests the README's text (its commands, its JSON, its shell), not an
 * engine, and the README's walk is the one `npm start` serves, on the embedded database. Every
 * route it calls runs on both engines in test/integration/. Running it twice would also wait for
 * a second 30-second TOTP step for nothing.
 */

const root = path.dirname(path.dirname(path.dirname(fileURLToPath(import.meta.url))))
const README_PORT = 3000

interface Block {
  /** The line of the opening fence, for messages. */
  line: number
  text: string
}

/** The fenced blocks whose info string is `sh runnable` (only its first word sets the highlighting). */
function runnableBlocks(markdown: string): Block[] {
  const blocks: Block[] = []
  let open: Block | null = null
  markdown.split('\n').forEach((line, index) => {
    if (open === null) {
      if (/^```sh runnable\b/.test(line)) open = { line: index + 1, text: '' }
    } else if (/^```\s*$/.test(line)) {
      blocks.push(open)
      open = null
    } else {
      open.text += `${line}\n`
    }
  })
  assert.equal(open, null, 'a runnable block is never closed')
  return blocks
}

/**
 * The answers in a block's output: curl prints each JSON body with no newline after it, so they
 * run together (`{...}{...}`). Split at the ends of top-level values, outside strings.
 */
function answers(output: string): Record<string, any>[] {
  const found: Record<string, any>[] = []
  let depth = 0
  let start = -1
  let inString = false
  for (let i = 0; i < output.length; i++) {
    const char = output[i]
    if (inString) {
      if (char === '\\') i++
      else if (char === '"') inString = false
    } else if (char === '"') {
      inString = true
    } else if (char === '{') {
      if (depth++ === 0) start = i
    } else if (char === '}' && --depth === 0) {
      found.push(JSON.parse(output.slice(start, i + 1)))
    }
  }
  return found
}

function jwtClaims(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'))
}

function needs(command: string, args: string[], install: string): void {
  // A missing tool fails the test: the README tells people to use it, so the suite must run it.
  assert.equal(spawnSync(command, args, { stdio: 'ignore' }).status, 0, `${command} is needed to run the README's blocks (${install})`)
}

describe('README', () => {
  test('every block marked `sh runnable` runs as pasted, in order, in one shell', { timeout: 180_000 }, async () => {
    needs('bash', ['--version'], 'apt-get install bash')
    needs('curl', ['--version'], 'apt-get install curl')
    needs('oathtool', ['--version'], 'apt-get install oathtool')
    needs('npm', ['--version'], 'npm comes with Node.js')

    const blocks = runnableBlocks(readFileSync(path.join(root, 'README.md'), 'utf8'))
    const walk = blocks.findIndex((block) => block.text.includes('/auth/register'))
    const mfa = blocks.findIndex((block) => block.text.includes('/auth/mfa/verify'))
    const admin = blocks.findIndex((block) => block.text.includes('/admin/users'))
    assert.ok(walk >= 0 && mfa > walk && admin > mfa, 'the walk, then two-factor, then the admin API are marked runnable, in that order')
    assert.ok(blocks[walk]!.text.includes(`BASE=http://localhost:${README_PORT}/api/v1`), 'the walk addresses the service as localhost:3000')

    // A directory like the checkout: the build and its dependencies (so `npm run cli` works), and
    // a data/ of its own that is the service's DATA_DIR (so `data/outbox/*.eml` is its outbox).
    const checkout = mkdtempSync(path.join(tmpdir(), 'portcullis-readme-'))
    for (const entry of ['package.json', 'bin', 'dist', 'node_modules']) symlinkSync(path.join(root, entry), path.join(checkout, entry))
    const dataDir = path.join(checkout, 'data')
    const outputs = path.join(checkout, 'outputs')
    mkdirSync(dataDir)
    mkdirSync(outputs)

    // Port 3000 may be taken (a developer's own `npm start`), so the service gets a free port and
    // only the port is rewritten in the blocks; everything else runs exactly as printed.
    const port = await freePort()
    const server = await startServerProcess({ PORT: String(port), DATA_DIR: dataDir, DATABASE_URL: '' })
    try {
      // Each block's stdout and stderr go to files of their own; `{ ... }` is no subshell, so the
      // variables a block sets stay for the next. After the last, the variables the blocks set
      // (an unset one prints empty rather than stopping the shell, and fails its check below).
      const script = [
        'set -euo pipefail',
        ...blocks.map((block, i) => [
          `echo ${i} > outputs/reached`,
          `{\n${block.text.replaceAll(`localhost:${README_PORT}`, `localhost:${port}`)}} > outputs/${i}.out 2> outputs/${i}.err`,
        ].join('\n')),
        'for name in ACCESS REFRESH ID SECRET FACTOR MFA KEY USER_ID; do printf "%s=%s\\n" "$name" "${!name-}"; done > outputs/variables',
      ].join('\n')
      writeFileSync(path.join(checkout, 'readme.sh'), script)

      // The environment of a person's shell, not the test runner's: no DATABASE_URL, REDIS_URL or
      // DATA_DIR of the suite, which would send `npm run cli` to another database than the service's.
      // Node 24 first on PATH, as npm puts node_modules/.bin first for `npm run`.
      const env = { PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? '/usr/bin:/bin'}`, HOME: process.env.HOME ?? checkout, LANG: 'C.UTF-8' }
      const bash = spawn('bash', ['readme.sh'], { cwd: checkout, env, stdio: ['ignore', 'pipe', 'pipe'] })
      let shell = ''
      bash.stdout.on('data', (chunk) => (shell += chunk))
      bash.stderr.on('data', (chunk) => (shell += chunk))
      const [status] = await once(bash, 'exit')

      const read = (name: string) => {
        try {
          return readFileSync(path.join(outputs, name), 'utf8')
        } catch {
          return ''
        }
      }
      const reached = Number(read('reached').trim())
      const where = (i: number) => `the block at README.md:${blocks[i]!.line}`
      assert.equal(status, 0, `the shell stopped in ${where(reached)}:\nstdout: ${read(`${reached}.out`)}\nstderr: ${read(`${reached}.err`)}\nshell: ${shell}\nservice:\n${server.output().slice(-4000)}`)

      // Every answer of every block succeeded (a refusal would print {"success":false,...}).
      const byBlock = blocks.map((_, i) => answers(read(`${i}.out`)))
      byBlock.forEach((list, i) => {
        assert.ok(list.length > 0, `${where(i)} prints at least one answer`)
        for (const answer of list) assert.equal(answer.success, true, `${where(i)} answered ${JSON.stringify(answer)}`)
      })

      // The variables were extracted, not left as the whole answer (sed prints its input unchanged
      // when its pattern does not match).
      const variables = Object.fromEntries(read('variables').trim().split('\n').map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]))
      for (const [name, value] of Object.entries(variables)) assert.match(value, /^[A-Za-z0-9_.-]+$/, `$${name} is a bare value: ${value}`)
      assert.match(variables.ACCESS!, /^[\w-]+\.[\w-]+\.[\w-]+$/, '$ACCESS is a JWT')
      assert.match(variables.SECRET!, /^[A-Z2-7]+$/, '$SECRET is base32')
      assert.match(variables.KEY!, /^pcl_/, '$KEY is an API key')

      // The walk: registration, verification, the protected route, refresh and the watchlists.
      const walked = byBlock[walk]!
      const data = (predicate: (d: any) => boolean) => walked.map((answer) => answer.data).find(predicate)
      assert.ok(data((d) => d.verification_required === true), 'registered')
      assert.ok(data((d) => d.verified === true), 'verified with the token from the outbox')
      assert.ok(data((d) => d.email === 'ada@example.com' && d.full_name === 'Ada Lovelace'), 'GET /auth/me answered the account')
      assert.ok(data((d) => typeof d.access_token === 'string' && d.refresh_token === undefined), 'refreshed')
      assert.deepEqual(data((d) => Array.isArray(d.watchlists))?.watchlists.map((list: any) => list.symbols), [['AAPL', 'MSFT', 'NVDA']])

      // Two-factor: confirmed (the first factor answers the recovery codes), then a login finished
      // with a fresh code, whose access token says so.
      const [confirmed, verified] = byBlock[mfa]!
      assert.equal(confirmed!.data.factor.id, variables.FACTOR)
      assert.equal(confirmed!.data.recovery_codes.length, 10)
      assert.equal(typeof verified!.data.refresh_token, 'string')
      const claims = jwtClaims(verified!.data.access_token)
      assert.deepEqual(claims.amr, ['pwd', 'otp', 'mfa'])
      assert.equal(claims.acr, 'aal2')

      // The admin API with a key from the CLI: the user found, disabled and enabled again.
      const [listed, disabled, enabled] = byBlock[admin]!
      assert.deepEqual(listed!.data.users.map((user: any) => user.email), ['ada@example.com'])
      assert.equal(disabled!.data.user.status, 'disabled')
      assert.equal(enabled!.data.user.status, 'active')
    } finally {
      server.child.kill('SIGTERM')
      if (server.child.exitCode === null) await once(server.child, 'exit')
      rmSync(checkout, { recursive: true, force: true })
    }
  })
})

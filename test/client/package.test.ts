import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { build } from 'esbuild'
import { PASSWORD, registerVerifyLogin, uniqueEmail } from '../helpers/app.ts'
import { consoleMessages, useChromium, useSite } from '../helpers/browser.ts'
import { ENGINES } from '../helpers/db.ts'
import { tokenFromMail } from '../helpers/mail.ts'

/*
 * The proof that @portcullis/client works outside this checkout: its tarball, as `npm pack` makes
 * it, installed into a project of its own in the temp folder (no node_modules of ours above it),
 * then used there by name from a Node script, type-checked by tsc, and bundled by esbuild into a
 * page that signs in from Chromium.
 */

const PACKAGE_DIR = fileURLToPath(new URL('../../packages/client/', import.meta.url))
const TSC = createRequire(import.meta.url).resolve('typescript/bin/tsc')

// `npm test` hands its settings down in npm_* variables (its local prefix, the root, among them):
// the npm run here must see only the folder it runs in.
const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')))

/** Runs a command to its end without blocking this process (the service under test runs in it); its stdout. */
async function exec(file: string, args: string[], cwd: string): Promise<string> {
  try {
    return (await promisify(execFile)(file, args, { cwd, env })).stdout
  } catch (error) {
    const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string }
    throw new Error(`${path.basename(file)} ${args.join(' ')} failed in ${cwd}:\n${stdout}${stderr}`)
  }
}

/** A Node service of the application's: register, then (given the mailed token) the rest, in body mode. */
const NODE_APP = `import { PortcullisClient } from '@portcullis/client'

const [step, baseUrl, email, password, token] = process.argv.slice(2)
const client = new PortcullisClient({ baseUrl })
if (step === 'register') {
  console.log(JSON.stringify(await client.register({ email, password, full_name: 'Package User' })))
} else {
  const verified = await client.verifyEmail(token)
  const login = await client.login({ email, password })
  const watchlist = await client.createWatchlist({ name: 'Semis', symbols: ['nvda', 'amd'] })
  const me = await client.me()
  console.log(JSON.stringify({ verified, login: Object.keys(login), watchlist, me }))
}
`

/** TypeScript of the application's; the @ts-expect-error fails the check if the types were `any`. */
const TYPED_APP = `import { PortcullisClient, PortcullisError, type ClientErrorCode, type LoginResult, type MfaRequired } from '@portcullis/client'

const client = new PortcullisClient({ baseUrl: 'https://auth.example.com/v1' })

export async function signIn(email: string, password: string): Promise<LoginResult | MfaRequired | ClientErrorCode> {
  try {
    return await client.login({ email, password })
  } catch (error) {
    if (error instanceof PortcullisError) return error.code
    throw error
  }
}

// @ts-expect-error expires_in is a number
export const wrong: LoginResult = { access_token: 'a', token_type: 'bearer', expires_in: 'soon' }
`

/** The page's script: the service and the account come in the query string (the page is the test's). */
const PAGE_SCRIPT = `import { PortcullisClient } from '@portcullis/client'

const query = new URLSearchParams(location.search)
const client = new PortcullisClient({ baseUrl: query.get('api'), transport: 'cookie' })
const out = document.getElementById('email')
try {
  await client.login({ email: query.get('email'), password: query.get('password') })
  out.textContent = (await client.me()).email
} catch (error) {
  out.textContent = 'failed: ' + (error.code ?? error)
}
`

// No favicon: the browser would ask this server for one, and the 404 would be logged as an error.
const PAGE = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>App</title><link rel="icon" href="data:,"></head>
<body><output id="email"></output><script type="module" src="/app.js"></script></body></html>`

describe('@portcullis/client from its tarball, installed in a project of its own', () => {
  const chromium = useChromium()
  let work: string
  let project: string
  let packed: string[]
  let page: { origin: string; server: Server }

  before(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'portcullis-package-'))
    // --ignore-scripts: packs the dist/ that `npm run build` made (as `npm test` does first). The
    // prepack script would rebuild it from clean, under the other test files serving it meanwhile.
    const [pack] = JSON.parse(await exec('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], PACKAGE_DIR)) as { filename: string; files: { path: string }[] }[]
    packed = pack!.files.map((file) => file.path)

    project = path.join(work, 'app')
    mkdirSync(project)
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }))
    // Offline: there is no network here, and a package without dependencies needs none.
    await exec('npm', ['install', '--offline', '--no-audit', '--no-fund', path.join(work, pack!.filename)], project)
    writeFileSync(path.join(project, 'node-app.mjs'), NODE_APP)
    writeFileSync(path.join(project, 'typed-app.ts'), TYPED_APP)
    writeFileSync(path.join(project, 'page.js'), PAGE_SCRIPT)

    // Bundled as an application would: resolved from the project's node_modules, nothing of ours.
    const bundle = await build({ entryPoints: ['page.js'], absWorkingDir: project, bundle: true, format: 'esm', platform: 'browser', write: false, logLevel: 'silent' })
    const script = bundle.outputFiles[0]!.contents
    const server = createServer((request, response) => {
      const { pathname } = new URL(request.url ?? '/', 'http://app')
      if (pathname === '/') return response.writeHead(200, { 'content-type': 'text/html' }).end(PAGE)
      if (pathname === '/app.js') return response.writeHead(200, { 'content-type': 'text/javascript' }).end(script)
      response.writeHead(404).end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    page = { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server }
  })
  after(async () => {
    if (page) await new Promise((resolve) => page.server.close(resolve))
    if (work) rmSync(work, { recursive: true, force: true })
  })

  test('the tarball holds the compiled modules, their declarations, package.json and the README, nothing else', () => {
    for (const file of packed) assert.match(file, /^(package\.json|README\.md|dist\/[\w.-]+\.(js|d\.ts))$/, `${file} in the tarball`)
    const sources = readdirSync(path.join(PACKAGE_DIR, 'src')).map((name) => name.replace(/\.ts$/, ''))
    for (const source of sources) {
      assert.ok(packed.includes(`dist/${source}.js`) && packed.includes(`dist/${source}.d.ts`), `src/${source}.ts is in the tarball compiled`)
    }
    assert.ok(packed.includes('README.md'))
  })

  test('it installs alone: no dependency of its own comes with it', () => {
    const installed = JSON.parse(readFileSync(path.join(project, 'node_modules/@portcullis/client/package.json'), 'utf8')) as Record<string, unknown>
    for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies']) assert.equal(installed[field], undefined, field)
    assert.deepEqual(readdirSync(path.join(project, 'node_modules')).filter((name) => !name.startsWith('.')), ['@portcullis'])
  })

  test('its types resolve from the installed package: tsc (NodeNext, no Node types) passes on code using them', async () => {
    await exec(process.execPath, [TSC, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--lib', 'es2022,dom', 'typed-app.ts'], project)
  })

  for (const engine of ENGINES) {
    describe(`against the service on ${engine}`, () => {
      // The page's origin, known once the outer before hook ran, is the one CORS_ORIGINS admits.
      const site = useSite(engine, { clientPage: 'none', env: () => ({ CORS_ORIGINS: page.origin }) })
      const baseUrl = () => `${site.origin}${site.t.base}`

      test('a Node script imports it by name, registers, verifies, logs in, creates a watchlist and reads /auth/me', async () => {
        const email = uniqueEmail('package')
        const registered = JSON.parse(await exec(process.execPath, ['node-app.mjs', 'register', baseUrl(), email, PASSWORD], project))
        assert.equal(registered.verification_required, true)
        const token = tokenFromMail(await site.t.mail.next(email))
        const result = JSON.parse(await exec(process.execPath, ['node-app.mjs', 'sign-in', baseUrl(), email, PASSWORD, token], project))
        assert.deepEqual(result.verified, { email, verified: true })
        assert.deepEqual(result.login, ['access_token', 'refresh_token', 'token_type', 'expires_in'], 'the body transport, the default in Node')
        assert.equal(result.watchlist.name, 'Semis')
        assert.deepEqual(result.watchlist.symbols, ['NVDA', 'AMD'])
        assert.equal(result.me.email, email)
        assert.equal(result.me.email_verified, true)
      })

      test('a page bundling it signs in from Chromium in cookie mode and shows /auth/me', async () => {
        const { email } = await registerVerifyLogin(site.t, uniqueEmail('bundled'))
        await chromium.withContext(async (context) => {
          const tab = await context.newPage()
          const errors = consoleMessages(tab, ['error'], { pageErrors: true })
          const query = new URLSearchParams({ api: baseUrl(), email, password: PASSWORD })
          await tab.goto(`${page.origin}/?${query}`)
          await tab.waitForFunction(`document.getElementById('email').textContent !== ''`)
          assert.equal(await tab.textContent('#email'), email)
          const refresh = (await context.cookies()).filter((cookie) => cookie.name === 'portcullis_refresh')
          assert.equal(refresh.length, 1, 'the refresh token is in the cookie')
          assert.equal(refresh[0]!.httpOnly, true)
          assert.deepEqual(errors, [])
        })
      })
    })
  }
})

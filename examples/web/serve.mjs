// The sample app's one command, `npm run example`: the Portcullis service (the built dist/server.js)
// as a child process on http://localhost:3000, and this folder's page on http://localhost:5173,
// which talks to the service with the typed client. Ctrl-C stops both.
//
// test/browser/example.test.ts imports startExample() from here, so the test runs exactly what the
// command runs, on ports and a data folder of its own.
import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, realpathSync } from 'node:fs'
import { createServer } from 'node:http'
import { createServer as createNetServer } from 'node:net'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.resolve(HERE, '../..')

// The typed client's compiled ES modules (packages/client, built by `npm run build`), served to the
// page under /client/ as an application would serve or bundle @portcullis/client.
const CLIENT_DIR = path.join(ROOT, 'packages/client/dist')

/** The page's own files: the only paths outside /client/ it serves (nothing else in the folder leaks). */
const FILES = {
  '/': 'index.html',
  '/app.js': 'app.js',
  '/view.js': 'view.js',
  '/style.css': 'style.css',
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' }

/**
 * Only what the example decides, the identity providers (OIDC_*) and the bot protection (CAPTCHA_*)
 * the person configured, and what a process needs from its surroundings. The rest of the shell's
 * environment stays out: a DATABASE_URL, SMTP_URL or BASE_PATH meant for a real deployment must not
 * reach this throwaway service, nor change what the page expects.
 */
function serviceEnv(settings) {
  const inherited = Object.entries(process.env).filter(([name]) => ['PATH', 'HOME', 'TMPDIR', 'TZ', 'SYSTEMROOT'].includes(name) || name.startsWith('OIDC_') || name.startsWith('CAPTCHA_'))
  return { ...Object.fromEntries(inherited), ...settings }
}

/**
 * What the bot-protection widgets need a page's policy to allow, as Cloudflare and hCaptcha
 * document it (the service's own pages allow the same: src/captcha/providers.ts).
 */
const CAPTCHA_SOURCES = {
  turnstile: { script: 'https://challenges.cloudflare.com', frame: 'https://challenges.cloudflare.com', style: '', connect: '' },
  hcaptcha: { script: 'https://hcaptcha.com https://*.hcaptcha.com', frame: 'https://hcaptcha.com https://*.hcaptcha.com', style: 'https://hcaptcha.com https://*.hcaptcha.com', connect: 'https://hcaptcha.com https://*.hcaptcha.com' },
}

/** The widget the sign-up form shows: the service's CAPTCHA_PROVIDER and its public CAPTCHA_SITE_KEY, or null. */
function captchaOf(env) {
  return Object.hasOwn(CAPTCHA_SOURCES, env.CAPTCHA_PROVIDER ?? '') && env.CAPTCHA_SITE_KEY ? { provider: env.CAPTCHA_PROVIDER, siteKey: env.CAPTCHA_SITE_KEY } : null
}

/** The page's settings, as a module it imports: the service's address depends on PORT. */
function configModule(apiBase, outbox, captcha) {
  return `// Written by examples/web/serve.mjs for this run.\nexport const API_BASE = ${JSON.stringify(apiBase)}\nexport const OUTBOX = ${JSON.stringify(outbox)}\nexport const CAPTCHA = ${JSON.stringify(captcha)}\n`
}

/**
 * Scripts only from this origin (none inline), the API as the one place the page may connect to,
 * the QR code as a data: image; with bot protection on, also the provider's widget. No referrer: the
 * address bar briefly holds a one-time login code when a provider sign-in comes back.
 */
function securityHeaders(apiOrigin, captcha) {
  const widget = captcha ? CAPTCHA_SOURCES[captcha.provider] : { script: '', frame: '', style: '', connect: '' }
  const plus = (sources) => (sources ? ` ${sources}` : '')
  return {
    'content-security-policy': `default-src 'none'; script-src 'self'${plus(widget.script)}; style-src 'self'${plus(widget.style)}; img-src 'self' data:; connect-src ${apiOrigin}${plus(widget.connect)};${widget.frame ? ` frame-src ${widget.frame};` : ''} base-uri 'none'; form-action 'self'; frame-ancestors 'none'`,
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
    // Edits to the example show on the next reload.
    'cache-control': 'no-store',
  }
}

/** A file of the compiled client by its URL path, or null for anything outside CLIENT_DIR. */
function clientFile(urlPath) {
  const file = path.resolve(CLIENT_DIR, `.${urlPath}`)
  return file.startsWith(CLIENT_DIR + path.sep) && TYPES[path.extname(file)] && existsSync(file) ? file : null
}

function pageServer(apiOrigin, config, captcha) {
  const headers = securityHeaders(apiOrigin, captcha)
  return createServer((request, response) => {
    const { pathname } = new URL(request.url ?? '/', 'http://localhost')
    if (request.method !== 'GET' && request.method !== 'HEAD') return response.writeHead(405, { ...headers, allow: 'GET, HEAD' }).end()
    if (pathname === '/config.js') return response.writeHead(200, { ...headers, 'content-type': TYPES['.js'] }).end(config)
    // The URL parser has already resolved any `..`; clientFile() still checks where the path lands.
    const file = Object.hasOwn(FILES, pathname) ? path.join(HERE, FILES[pathname])
      : pathname.startsWith('/client/') ? clientFile(pathname.slice('/client'.length))
      : null
    if (!file) return response.writeHead(404, { ...headers, 'content-type': 'text/plain' }).end('Not found\n')
    response.writeHead(200, { ...headers, 'content-type': TYPES[path.extname(file)] }).end(readFileSync(file))
  })
}

/** Whether something listens on port already: another service's /readyz would pass for ours. */
function taken(port) {
  return new Promise((resolve) => {
    const probe = createNetServer()
    probe.once('error', () => resolve(true))
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(false)))
  })
}

/** Resolves once the service answers /readyz; rejects if it exits first or takes too long. */
async function serviceReady(child, url, exited) {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    const exit = await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 100, null))])
    if (exit) throw new Error(`the service stopped before it was ready (${exit}); its output says why`)
    if (await fetch(url).then((answer) => answer.ok, () => false)) return
  }
  child.kill('SIGKILL')
  throw new Error(`the service did not answer ${url} within a minute`)
}

/**
 * Starts the service and the page; resolves once both answer, with their addresses and stop().
 *
 * - port, apiPort: the page's and the service's ports (5173 and 3000 by default).
 * - dataDir: the service's DATA_DIR (data/example): its SQLite database, its signing keys, and the
 *   outbox folder its mail is written to.
 * - env: more settings for the service, last (DATABASE_URL for PostgreSQL, LOG_LEVEL, an
 *   identity provider).
 * - output: a function that receives the service's log output; by default it goes to this
 *   process's own stdout and stderr.
 */
export async function startExample({ port = 5173, apiPort = 3000, dataDir = path.join(ROOT, 'data/example'), env: settings = {}, output } = {}) {
  // The service runs on this same node, whose native modules (argon2, SQLite) npm ci built for 24.
  // `npm run example` finds the project's own node 24 in node_modules/.bin.
  if (Number(process.versions.node.split('.')[0]) < 24) throw new Error(`Node 24 is needed, this is ${process.version}: start it with \`npm run example\``)
  for (const [file, what] of [[path.join(ROOT, 'dist/server.js'), 'the service'], [path.join(CLIENT_DIR, 'index.js'), 'the client']]) {
    if (!existsSync(file)) throw new Error(`${path.relative(ROOT, file)} (${what}) is missing: run \`npm run build\` first`)
  }
  // localhost, not 127.0.0.1, in both addresses: the passkey relying party ID is PUBLIC_URL's host,
  // and a browser refuses passkeys for a page whose host is an IP address. Both servers listen on
  // 127.0.0.1, where browsers find localhost.
  const appOrigin = `http://localhost:${port}`
  const apiOrigin = `http://localhost:${apiPort}`
  const apiBase = `${apiOrigin}/api/v1`
  if (await taken(apiPort)) throw new Error(`port ${apiPort} is taken (another \`npm run example\` or \`npm start\`?): set PORT to another`)
  mkdirSync(dataDir, { recursive: true })
  const relative = path.relative(ROOT, dataDir)
  const outbox = path.join(relative.startsWith('..') ? dataDir : relative, 'outbox')

  const env = serviceEnv({
    NODE_ENV: 'development',
    PORT: String(apiPort),
    PUBLIC_URL: apiOrigin,
    BASE_PATH: '/api/v1',
    DATA_DIR: dataDir,
    // The page's origin may call the API from the browser and keep the session's cookie...
    CORS_ORIGINS: appOrigin,
    // ...and a provider sign-in may send the browser back to it.
    OIDC_REDIRECT_ORIGINS: appOrigin,
    // The service's own pages (the mailed verification link opens one) link back to the page.
    APP_URL: appOrigin,
    ...settings,
  })
  const child = spawn(process.execPath, [path.join(ROOT, 'dist/server.js')], {
    cwd: ROOT,
    env,
    stdio: ['ignore', output ? 'pipe' : 'inherit', output ? 'pipe' : 'inherit'],
  })
  if (output) {
    child.stdout.on('data', (chunk) => output(String(chunk)))
    child.stderr.on('data', (chunk) => output(String(chunk)))
  }
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `exit code ${code}`)))
  const captcha = captchaOf(env)
  const server = pageServer(apiOrigin, configModule(apiBase, outbox, captcha), captcha)

  const stopService = async () => {
    // Ctrl-C in a terminal already sent the service SIGINT; a second signal only skips what is
    // left of its one-second drain, which nobody waits on here.
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    await exited
  }
  const stopPage = () =>
    new Promise((resolve) => {
      if (!server.listening) return resolve()
      server.close(() => resolve())
      server.closeAllConnections()
    })

  try {
    await new Promise((resolve, reject) => {
      server.once('error', (error) => reject(error.code === 'EADDRINUSE' ? new Error(`port ${port} is taken: set EXAMPLE_PORT to another`) : error))
      server.listen(port, '127.0.0.1', resolve)
    })
    await serviceReady(child, `http://127.0.0.1:${apiPort}/readyz`, exited)
  } catch (error) {
    await Promise.all([stopService(), stopPage()])
    throw error
  }

  return {
    appUrl: `${appOrigin}/`,
    apiUrl: apiBase,
    dataDir,
    outbox,
    /** Resolves with how the service ended: after stop(), or on its own (a crash). */
    serviceExit: exited,
    stop: async () => {
      await Promise.all([stopService(), stopPage()])
    },
  }
}

/** A port from the environment, or the default. */
function portFrom(name, fallback) {
  const value = process.env[name]
  if (value === undefined || value === '') return fallback
  const port = Number(value)
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`${name} must be a port number (1 to 65535), not "${value}"`)
  return port
}

async function main() {
  let example
  try {
    example = await startExample({ port: portFrom('EXAMPLE_PORT', 5173), apiPort: portFrom('PORT', 3000) })
  } catch (error) {
    console.error(`example: ${error.message}`)
    process.exit(1)
  }
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await example.stop()
  }
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => void stop())
  void example.serviceExit.then(async (how) => {
    if (stopping) return
    console.error(`example: the service stopped (${how}); stopping the page too`)
    process.exitCode = 1
    await stop()
  })
  console.log(
    [
      '',
      `  The sample app:  ${example.appUrl}`,
      `  Portcullis API:  ${example.apiUrl}`,
      `  Mail (no SMTP):  ${example.outbox}/`,
      '',
      '  Ctrl-C stops both.',
      '',
    ].join('\n'),
  )
}

// Started as `node examples/web/serve.mjs` (npm run example), not imported by the test.
if (process.argv[1] && pathToFileURL(realpathSync(process.argv[1])).href === import.meta.url) await main()

import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before } from 'node:test'
import type { FastifyInstance } from 'fastify'
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type ConsoleMessage, type Page } from 'playwright-core'
import { freePort, startTestApp, type TestApp } from './app.ts'
import type { EngineName } from './db.ts'

/*
 * The browser tests' common ground. A test file asks for one Chromium (`useChromium`) and, in each
 * engine's describe, for the service on a socket with a page that loads the client (`useSite`);
 * both start in before hooks and close in after hooks, failed tests or not. A context made for
 * one test lives inside `chromium.withContext`, which closes it however the test ends.
 */

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((candidate) => existsSync(candidate))

/**
 * Debian's Chromium, headless. Nothing here downloads a browser: without the package the test
 * fails with the command that installs it (.ci/run installs it when missing).
 */
async function launchBrowser(): Promise<Browser> {
  if (!CHROMIUM) throw new Error('Chromium is needed for the browser tests: apt-get install chromium')
  return chromium.launch({
    executablePath: CHROMIUM,
    // The machine has no network beyond loopback; these keep Chromium from trying to reach Google.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
}

export interface Chromium {
  /** The file's browser; there from its first before hook on. */
  readonly browser: Browser
  /** A fresh context (its own cookies and storage) for body, closed when body ends, passed or failed. */
  withContext<T>(body: (context: BrowserContext) => Promise<T>): Promise<T>
  withContext<T>(options: BrowserContextOptions, body: (context: BrowserContext) => Promise<T>): Promise<T>
  /**
   * A context shared by the tests of the describe this is called in: opened in its before hook,
   * closed in its after hook. Called before `useSite`, it closes before the service does.
   */
  useContext(options?: BrowserContextOptions): { readonly context: BrowserContext }
}

/** One Chromium for the test file: call it in the file's outer describe; it closes after the file's last test. */
export function useChromium(): Chromium {
  let launched: Browser | undefined
  before(async () => {
    launched = await launchBrowser()
  })
  after(async () => {
    await launched?.close()
  })
  const browser = () => launched ?? fail('Chromium starts in a before hook: use it from a test or a hook')
  return {
    get browser() {
      return browser()
    },
    async withContext<T>(...args: [(context: BrowserContext) => Promise<T>] | [BrowserContextOptions, (context: BrowserContext) => Promise<T>]) {
      const [options, body] = args.length === 1 ? [{}, args[0]] : args
      const context = await browser().newContext(options)
      try {
        return await body(context)
      } finally {
        await context.close()
      }
    },
    useContext(options = {}) {
      let opened: BrowserContext | undefined
      before(async () => {
        opened = await browser().newContext(options)
      })
      after(async () => {
        // A no-op where the browser closed first (this called in the outer describe, after useChromium).
        await opened?.close()
      })
      return {
        get context() {
          return opened ?? fail('the context opens in a before hook: use it from a test or a later hook')
        },
      }
    },
  }
}

/** A new tab of context on a page that loads the client (a `ClientApp`'s url), once the client is ready. */
export async function openClient(context: BrowserContext, url: string): Promise<Page> {
  const page = await context.newPage()
  await gotoClient(page, url)
  return page
}

/** Sends page to a page that loads the client and waits for the client. */
export async function gotoClient(page: Page, url: string): Promise<void> {
  await page.goto(url)
  await clientReady(page)
}

/** Waits for the page's client to be made (after a reload, or on coming back from another site). */
export async function clientReady(page: Page): Promise<void> {
  await page.waitForFunction('window.ready === true')
}

/**
 * The text of every console message of these types that page logs from now on (and of its
 * uncaught errors, with pageErrors), filled in as they come; messages matching `except` are left out.
 * Attach it before the page loads to hear what the load said.
 */
export function consoleMessages(page: Page, types: ReturnType<ConsoleMessage['type']>[], options: { except?: RegExp; pageErrors?: boolean } = {}): string[] {
  const messages: string[] = []
  page.on('console', (message) => {
    if (types.includes(message.type()) && !options.except?.test(message.text())) messages.push(message.text())
  })
  if (options.pageErrors) page.on('pageerror', (error) => messages.push(error.message))
  return messages
}

/**
 * A platform authenticator in page's browser through the DevTools protocol (CTAP2, internal,
 * resident keys, user verification done, presence given without asking), as a passkey needs.
 */
export async function addVirtualAuthenticator(context: BrowserContext, page: Page) {
  const cdp = await context.newCDPSession(page)
  await cdp.send('WebAuthn.enable')
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  })
  return {
    /** The credentials the authenticator holds now. */
    credentials: async () => (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials,
  }
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

export interface AxeViolation {
  id: string
  impact: string | null
  help: string
  nodes: { target: string[] }[]
}

/**
 * Runs axe-core inside the page and returns its serious and critical violations. The pages' CSP
 * forbids script tags, so the source is evaluated through the DevTools protocol instead.
 */
export async function seriousViolations(page: Page): Promise<AxeViolation[]> {
  await page.evaluate(axeSource)
  const violations = (await page.evaluate(`axe.run(document).then((result) => result.violations)`)) as AxeViolation[]
  return violations.filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
}

export interface Screenshots {
  /** The folder, made on first use and kept after the run so the pictures can be looked at. */
  readonly dir: string
  /** Saves page (the whole page unless fullPage is false) as `<name>.png` in the folder; returns its path. */
  take(page: Page, name: string, options?: { fullPage?: boolean }): Promise<string>
}

/** A folder of screenshots for one test file. */
export function screenshots(name: string): Screenshots {
  let dir: string | undefined
  const folder = () => (dir ??= mkdtempSync(path.join(tmpdir(), `portcullis-${name}-`)))
  return {
    get dir() {
      return folder()
    },
    async take(page, shot, options = {}) {
      const file = path.join(folder(), `${shot}.png`)
      await page.screenshot({ path: file, fullPage: options.fullPage ?? true })
      return file
    },
  }
}

/** A page that loads the bundled client; `url` is the page, `origin` the origin it runs in. */
export interface ClientApp {
  origin: string
  url: string
}

/** What `window.client` is made with beyond baseUrl and onSessionEnd (a transport, say). */
export type ClientOptions = Record<string, unknown>

const CLIENT_DIR = path.resolve('packages/client/dist')

/**
 * The page: imports the client (packages/client/dist, as built by `npm run build`) as an ES module from
 * `moduleDir`, and sets `window.client` against `apiBase` (in the client's default transport,
 * cookie in a browser, unless options say otherwise), `window.makeClient(options?)` for another
 * (options added to those), `window.ended` collecting onSessionEnd's reasons, and `window.ready`.
 */
function clientPage(moduleDir: string, apiBase: string, options: ClientOptions): string {
  if (!existsSync(path.join(CLIENT_DIR, 'index.js'))) throw new Error('packages/client/dist is missing: npm run build')
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>App</title></head><body>
<script type="module">
import { PortcullisClient } from '${moduleDir}/index.js'
window.ended = []
window.makeClient = (options = {}) => new PortcullisClient({ baseUrl: ${JSON.stringify(apiBase)}, onSessionEnd: (event) => window.ended.push(event.reason), ...options })
window.client = window.makeClient(${JSON.stringify(options)})
window.ready = true
</script></body></html>`
}

/** A module of the built client by its file name, or null for any other name. */
function clientModule(name: string): Buffer | null {
  const file = /^[a-z][a-z-]*\.js$/.test(name) ? path.join(CLIENT_DIR, name) : ''
  return file && existsSync(file) ? readFileSync(file) : null
}

/** An application's origin of its own: the client page at `/`, against `apiBase`. */
export async function serveClientApp(apiBase: string, options: ClientOptions = {}): Promise<ClientApp & { close(): Promise<void> }> {
  const html = clientPage('/client', apiBase, options)
  const server = createServer((request, response) => {
    const { pathname } = new URL(request.url ?? '/', 'http://app')
    if (pathname === '/') return response.writeHead(200, { 'content-type': 'text/html' }).end(html)
    const module = clientModule(/^\/client\/(.+)$/.exec(pathname)?.[1] ?? '')
    if (module) return response.writeHead(200, { 'content-type': 'text/javascript' }).end(module)
    response.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { origin, url: `${origin}/`, close: () => new Promise((resolve) => server.close(() => resolve())) }
}

/** The client page as a route of the service itself, at /client-test (added before it listens). */
function mountClientPage(app: FastifyInstance, origin: string, apiBase: string, options: ClientOptions): ClientApp {
  const html = clientPage('/client-test/client', apiBase, options)
  app.get('/client-test', async (_request, reply) => reply.type('text/html').send(html))
  app.get<{ Params: { file: string } }>('/client-test/client/:file', async (request, reply) => {
    const module = clientModule(request.params.file)
    return module ? reply.type('text/javascript').send(module) : reply.code(404).send('')
  })
  return { origin, url: `${origin}/client-test` }
}

type Env = Record<string, string>

export interface SiteOptions {
  /**
   * The host of the service's origin (its PUBLIC_URL); it listens on 127.0.0.1 either way.
   * 'localhost' where an IP address will not do: a WebAuthn RP ID.
   */
  host?: '127.0.0.1' | 'localhost'
  /**
   * Where the page with the client is: on an application origin of its own that CORS_ORIGINS
   * admits ('own-origin', the default), a route of the service ('service'), or nowhere ('none').
   */
  clientPage?: 'own-origin' | 'service' | 'none'
  /** What the page's `window.client` is made with beyond baseUrl. */
  client?: ClientOptions
  /**
   * More settings, given the service's origin first: for one that names it, or that needs
   * something started first (an identity provider told the service's callback).
   */
  env?: (origin: string) => Env | Promise<Env>
}

export interface Site {
  /** The service, listening. */
  readonly t: TestApp
  /** The service's origin, its PUBLIC_URL. */
  readonly origin: string
  /** The page with the client (refused with clientPage 'none'). */
  readonly app: ClientApp
}

/**
 * The service of `engine` listening on a real socket (a browser needs one), with its client page
 * as options say. On a failed start what did start is closed again.
 */
export async function startSite(engine: EngineName, options: SiteOptions = {}): Promise<Site & { close(): Promise<void> }> {
  const port = await freePort()
  const origin = `http://${options.host ?? '127.0.0.1'}:${port}`
  const apiBase = `${origin}/api/v1`
  const where = options.clientPage ?? 'own-origin'
  const closers: (() => Promise<void>)[] = []
  const close = async () => {
    for (const closer of closers.splice(0).reverse()) await closer()
  }
  try {
    const env: Env = { PORT: String(port), PUBLIC_URL: origin, ...(await options.env?.(origin)) }
    let app: ClientApp | undefined
    if (where === 'own-origin') {
      // The application's origin is only known once it listens; the API's CORS list needs it first.
      const served = await serveClientApp(apiBase, options.client)
      closers.push(served.close)
      env.CORS_ORIGINS = served.origin
      app = served
    }
    const t = await startTestApp(engine, { env })
    closers.push(t.close)
    if (where === 'service') app = mountClientPage(t.app, origin, apiBase, options.client ?? {})
    await t.app.listen({ port, host: '127.0.0.1' })
    return {
      t,
      origin,
      get app() {
        return app ?? fail(`no client page: this site was started with clientPage '${where}'`)
      },
      close,
    }
  } catch (error) {
    await close()
    throw error
  }
}

/**
 * `startSite` for the tests of the describe this is called in: started in its before hook, closed
 * in its after hook. Read its fields inside a test or a later hook.
 */
export function useSite(engine: EngineName, options: SiteOptions = {}): Site {
  let site: Awaited<ReturnType<typeof startSite>> | undefined
  before(async () => {
    site = await startSite(engine, options)
  })
  after(async () => {
    await site?.close()
  })
  const started = () => site ?? fail('the site starts in a before hook: use it from a test or a later hook')
  return {
    get t() {
      return started().t
    },
    get origin() {
      return started().origin
    },
    get app() {
      return started().app
    },
  }
}

function fail(message: string): never {
  throw new Error(message)
}

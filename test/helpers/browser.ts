import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { chromium, type Browser, type Page } from 'playwright-core'

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((candidate) => existsSync(candidate))

/**
 * Debian's Chromium, headless. Nothing here downloads a browser: without the package the test
 * fails with the command that installs it (.ci/run installs it when missing).
 */
export async function launchBrowser(): Promise<Browser> {
  if (!CHROMIUM) throw new Error('Chromium is needed for the browser tests: apt-get install chromium')
  return chromium.launch({
    executablePath: CHROMIUM,
    // The machine has no network beyond loopback; these keep Chromium from trying to reach Google.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
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

/** A folder for one test file's screenshots, kept after the run so they can be looked at. */
export function screenshotDir(name: string): string {
  return mkdtempSync(path.join(tmpdir(), `portcullis-${name}-`))
}

/**
 * An application's origin: one page that loads the bundled client (dist/client, as built by
 * `npm run build`) as an ES module, with `window.client` against `apiBase` in the client's default
 * transport (cookie, in a browser), `window.makeClient(options?)` for another (options added to
 * those), and `window.ended` collecting onSessionEnd's reasons.
 */
export async function serveClientApp(apiBase: string): Promise<{ origin: string; close(): Promise<void> }> {
  const dir = path.resolve('dist/client')
  if (!existsSync(path.join(dir, 'index.js'))) throw new Error('dist/client is missing: npm run build')
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>App</title></head><body>
<script type="module">
import { PortcullisClient } from '/client/index.js'
window.ended = []
window.makeClient = (options = {}) => new PortcullisClient({ baseUrl: ${JSON.stringify(apiBase)}, onSessionEnd: (event) => window.ended.push(event.reason), ...options })
window.client = window.makeClient()
window.ready = true
</script></body></html>`
  const server = createServer((request, response) => {
    const { pathname } = new URL(request.url ?? '/', 'http://app')
    if (pathname === '/') return response.writeHead(200, { 'content-type': 'text/html' }).end(html)
    const file = /^\/client\/([a-z]+\.js)$/.exec(pathname)?.[1]
    if (file && existsSync(path.join(dir, file))) return response.writeHead(200, { 'content-type': 'text/javascript' }).end(readFileSync(path.join(dir, file)))
    response.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}

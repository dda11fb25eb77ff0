import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
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

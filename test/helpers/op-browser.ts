/**
 * A browser without a window, for the provider's pages (test/provider/): fetch with redirects
 * followed by hand and a cookie jar that honours each cookie's path and expiry (the library scopes
 * its interaction cookies to /oauth/interaction/{uid} and /oauth/authorize/{uid}), forms read off
 * the page and posted with their hidden fields, as a browser posts them.
 */

/** One answer the browser got, with its body read. */
export interface Page {
  url: string
  status: number
  headers: Headers
  body: string
  /** The redirect's target, absolute, or null. */
  location: string | null
}

/** A form of a page: where it posts and the values it carries by itself (hidden fields). */
export interface PageForm {
  id: string | null
  action: string
  fields: Record<string, string>
}

interface Cookie {
  name: string
  value: string
  path: string
  expires: number
}

const REDIRECTS = new Set([301, 302, 303, 307, 308])

function attribute(tag: string, name: string): string | null {
  const match = new RegExp(`\\s${name}\\s*=\\s*(?:"([^"]*)"|'([^']*)'|([^\\s>]+))`, 'i').exec(tag)
  if (!match) return null
  return decodeEntities(match[1] ?? match[2] ?? match[3] ?? '')
}

function decodeEntities(text: string): string {
  return text
    .replace(/&#(\d+);/g, (_m, code: string) => String.fromCodePoint(Number(code)))
    .replace(/&#x([0-9a-f]+);/gi, (_m, code: string) => String.fromCodePoint(parseInt(code, 16)))
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&')
}

/** The forms of a page, each with its hidden inputs (and inputs outside it that name it with `form=`). */
export function formsOf(page: Page): PageForm[] {
  const forms: PageForm[] = []
  const formTags = [...page.body.matchAll(/<form\b[^>]*>([\s\S]*?)<\/form>/gi)]
  for (const match of formTags) {
    const open = /<form\b[^>]*>/i.exec(match[0])![0]
    const fields: Record<string, string> = {}
    for (const input of match[1]!.matchAll(/<input\b[^>]*>/gi)) {
      const type = attribute(input[0], 'type')
      const name = attribute(input[0], 'name')
      if (type?.toLowerCase() === 'hidden' && name !== null) fields[name] = attribute(input[0], 'value') ?? ''
    }
    forms.push({ id: attribute(open, 'id'), action: new URL(attribute(open, 'action') ?? '', page.url).href, fields })
  }
  return forms
}

/** The one form of a page posting to a path ending in `suffix`, or with that id. */
export function formOf(page: Page, which: { actionEndsWith?: string; id?: string }): PageForm {
  const found = formsOf(page).filter((form) =>
    which.id !== undefined ? form.id === which.id : new URL(form.action).pathname.endsWith(which.actionEndsWith ?? ''),
  )
  if (found.length !== 1) throw new Error(`expected one form ${JSON.stringify(which)} on ${page.url} (status ${page.status}), found ${found.length}:\n${page.body.slice(0, 2000)}`)
  return found[0]!
}

/** The page's heading, for assertions on which page it is. */
export function headingOf(page: Page): string | null {
  const match = /<h1[^>]*>([\s\S]*?)<\/h1>/i.exec(page.body)
  return match ? decodeEntities(match[1]!.replace(/<[^>]+>/g, '').trim()) : null
}

export class OpBrowser {
  private readonly jar = new Map<string, Cookie>()
  /** Every answer, in order: a test can tell a flow that showed no page from one that did. */
  readonly history: Page[] = []

  /** `origin`: the provider's; a redirect anywhere else (a client's redirect URI) is not followed. */
  constructor(readonly origin: string) {}

  private cookieHeader(url: URL): string {
    const now = Date.now()
    const sent: string[] = []
    for (const [key, cookie] of this.jar) {
      if (cookie.expires <= now) {
        this.jar.delete(key)
        continue
      }
      const pathMatches = url.pathname === cookie.path || url.pathname.startsWith(cookie.path.endsWith('/') ? cookie.path : `${cookie.path}/`)
      if (pathMatches) sent.push(`${cookie.name}=${cookie.value}`)
    }
    return sent.join('; ')
  }

  private store(url: URL, headers: Headers): void {
    for (const line of headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';')
      const at = pair!.indexOf('=')
      const cookie: Cookie = { name: pair!.slice(0, at).trim(), value: pair!.slice(at + 1).trim(), path: url.pathname.replace(/\/[^/]*$/, '') || '/', expires: Infinity }
      for (const raw of attributes) {
        const [name = '', value = ''] = raw.split('=').map((part) => part.trim())
        if (/^path$/i.test(name)) cookie.path = value || '/'
        else if (/^expires$/i.test(name)) cookie.expires = Math.min(cookie.expires, Date.parse(value))
        else if (/^max-age$/i.test(name)) cookie.expires = Number(value) <= 0 ? 0 : Date.now() + Number(value) * 1000
      }
      const key = `${cookie.path}\n${cookie.name}`
      if (cookie.expires <= Date.now()) this.jar.delete(key)
      else this.jar.set(key, cookie)
    }
  }

  /** The names of the cookies the browser holds now (any path). */
  cookieNames(): string[] {
    return [...this.jar.values()].filter((cookie) => cookie.expires > Date.now()).map((cookie) => cookie.name)
  }

  /** One request, no redirect followed. A form is sent as application/x-www-form-urlencoded. */
  async request(url: string, init: { method?: 'GET' | 'POST'; form?: Record<string, string>; headers?: Record<string, string> } = {}): Promise<Page> {
    const target = new URL(url, this.origin)
    const method = init.method ?? (init.form ? 'POST' : 'GET')
    const headers: Record<string, string> = {
      accept: 'text/html',
      // A browser's own navigations and same-origin form posts say so (Fetch Metadata).
      'sec-fetch-site': method === 'POST' ? 'same-origin' : 'none',
      ...(method === 'POST' ? { origin: this.origin } : {}),
      ...init.headers,
    }
    const cookies = this.cookieHeader(target)
    if (cookies) headers.cookie = cookies
    const body = init.form ? new URLSearchParams(init.form).toString() : undefined
    if (body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded'
    const response = await fetch(target, { method, headers, ...(body === undefined ? {} : { body }), redirect: 'manual' })
    this.store(target, response.headers)
    const location = response.headers.get('location')
    const page: Page = {
      url: target.href,
      status: response.status,
      headers: response.headers,
      body: await response.text(),
      location: location === null ? null : new URL(location, target).href,
    }
    this.history.push(page)
    return page
  }

  /**
   * A request, then every redirect within the provider's origin (as GETs); stops at a page or at
   * a redirect elsewhere, whose target is then `location`.
   */
  async go(url: string, init: Parameters<OpBrowser['request']>[1] = {}): Promise<Page> {
    let page = await this.request(url, init)
    for (let hops = 0; REDIRECTS.has(page.status) && page.location !== null && new URL(page.location).origin === this.origin; hops++) {
      if (hops > 20) throw new Error(`too many redirects from ${url}`)
      page = await this.request(page.location)
    }
    return page
  }

  /** Submits a form of the page as a browser would: its hidden fields, what the person typed, the button pressed. */
  submit(form: PageForm, typed: Record<string, string> = {}, headers: Record<string, string> = {}): Promise<Page> {
    return this.go(form.action, { method: 'POST', form: { ...form.fields, ...typed }, headers })
  }
}

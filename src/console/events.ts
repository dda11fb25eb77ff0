import type { FastifyInstance } from 'fastify'
import { AUDIT_TYPES } from '../audit/events.ts'
import { normaliseEmail } from '../auth/input.ts'
import { AppError } from '../errors.ts'
import { html, type Html } from '../html.ts'
import type { AppServices } from '../services.ts'
import { isUuid } from '../text.ts'
import type { ConsoleContext } from './routes.ts'
import { consoleLayout, iso, table } from './views.ts'

const PAGE_SIZE = 50
const DAY_MS = 86_400_000
const DATE = /^\d{4}-\d{2}-\d{2}$/

type Query = { user?: string; type?: string; since?: string; until?: string; cursor?: string }

/** A filter's value from the query string: one plain string (a repeated parameter arrives as an array), trimmed, bounded. */
const one = (value: unknown, max = 254): string => (typeof value === 'string' ? value.trim().slice(0, max) : '')

/** A day of the date input (YYYY-MM-DD, UTC) as the instant it starts; null when it is not one. */
function dayStart(value: string): number | null {
  if (!DATE.test(value)) return null
  const ms = Date.parse(`${value}T00:00:00.000Z`)
  return Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== value ? null : ms
}

/** `user:{id}` of an operator, or an API key, or `cli`/`system`: an operator's id links to their page. */
function actorCell(c: ConsoleContext, actor: string | null): Html | string | null {
  const id = actor?.startsWith('user:') ? actor.slice('user:'.length) : null
  return id !== null && isUuid(id) ? html`<a href="${c.base}/users/${id}">${actor}</a>` : actor
}

/**
 * The account an operator names in a form: a user id as it is (a deleted user's events keep it;
 * `label` says so), an exact address through the admin listing (its address-prefix search; the
 * exact address, when an account has it, is among the first rows).
 */
export async function userNamed(admin: AppServices['admin'], value: string): Promise<{ id: string; label: string; exists: boolean } | { problem: string }> {
  if (isUuid(value)) {
    const id = value.toLowerCase()
    try {
      return { id, label: (await admin.getUser(id)).email, exists: true }
    } catch (error) {
      if (error instanceof AppError && error.code === 'NOT_FOUND') return { id, label: `${id} (no longer an account)`, exists: false }
      throw error
    }
  }
  if (!value.includes('@')) return { problem: 'Give a user id or an address.' }
  const address = normaliseEmail(value)
  const { users } = await admin.listUsers({ email: address, limit: 5 })
  const user = users.find((candidate) => candidate.email.toLowerCase() === address)
  return user ? { id: user.user_id, label: user.email, exists: true } : { problem: 'No account has this address.' }
}

/**
 * Audit events (docs/console.md): the trail newest first, 50 a page, keyset pages (the admin API's
 * listing, AdminService.events, and its cursor), filtered by a user (their id, or their exact
 * address, resolved through the admin listing), an event type, and days (UTC; `until` includes its
 * day). A filter that cannot be used re-shows the form with what is wrong, and no events.
 */
export function eventRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { admin } = c.services

  app.get<{ Querystring: Query }>(`${c.base}/events`, async (request, reply) => {
    const userText = one(request.query.user)
    const type = one(request.query.type, 64)
    const since = one(request.query.since, 10)
    const until = one(request.query.until, 10)
    const cursor = one(request.query.cursor, 512)
    const problems: Record<string, string> = {}

    const user = userText === '' ? null : await userNamed(admin, userText)
    if (user && 'problem' in user) problems.user = user.problem
    if (type !== '' && !(AUDIT_TYPES as readonly string[]).includes(type)) problems.type = 'Choose a type from the list.'
    const sinceMs = since === '' ? undefined : dayStart(since)
    const untilMs = until === '' ? undefined : dayStart(until)
    if (sinceMs === null) problems.since = 'Give a day as YYYY-MM-DD.'
    if (untilMs === null) problems.until = 'Give a day as YYYY-MM-DD.'

    const filters = { ...(userText ? { user: userText } : {}), ...(type ? { type } : {}), ...(since ? { since } : {}), ...(until ? { until } : {}) }
    let page: Awaited<ReturnType<typeof admin.events>> | null = null
    if (Object.keys(problems).length === 0) {
      try {
        page = await admin.events({
          ...(user && 'id' in user ? { user_id: user.id } : {}),
          ...(type ? { type } : {}),
          ...(typeof sinceMs === 'number' ? { since: new Date(sinceMs).toISOString() } : {}),
          ...(typeof untilMs === 'number' ? { until: new Date(untilMs + DAY_MS).toISOString() } : {}),
          limit: PAGE_SIZE,
          ...(cursor ? { cursor } : {}),
        })
      } catch (error) {
        // A cursor from another filter, or altered: the one thing here the service itself refuses.
        if (!(error instanceof AppError && error.code === 'VALIDATION_ERROR')) throw error
        problems.cursor = 'This page link no longer fits the filters: search again.'
      }
    }

    const field = (name: string) => (problems[name] ? html`<p class="error" id="${name}-error">${problems[name]}</p>` : '')
    const invalid = (name: string) => (problems[name] ? html` aria-invalid="true" aria-describedby="${name}-error"` : '')
    const form = html`<form method="get" action="${c.base}/events" class="filters" role="search">
<div class="field"><label for="user">User (id or address)</label><input id="user" name="user" type="text" autocomplete="off" value="${userText}"${invalid('user')}>${field('user')}</div>
<div class="field"><label for="type">Event type</label><select id="type" name="type"${invalid('type')}>
<option value="">Any</option>
${AUDIT_TYPES.map((value) => html`<option value="${value}"${value === type ? html` selected` : ''}>${value}</option>\n`)}</select>${field('type')}</div>
<div class="field"><label for="since">From (UTC day)</label><input id="since" name="since" type="date" value="${since}"${invalid('since')}>${field('since')}</div>
<div class="field"><label for="until">Until (UTC day, included)</label><input id="until" name="until" type="date" value="${until}"${invalid('until')}>${field('until')}</div>
<button type="submit">Search</button>
</form>`

    if (!page) {
      return c.send(reply, 400, consoleLayout(c.page(request), 'events', 'Audit events', html`${form}
<p class="error" role="alert">${problems.cursor ?? 'These filters cannot be used: see what is marked above.'}</p>`))
    }
    const who = user && 'id' in user ? html`<p>Events of <a href="${c.base}/users/${user.id}">${user.label}</a>.</p>` : ''
    const next = page.next_cursor ? `${c.base}/events?${new URLSearchParams({ ...filters, cursor: page.next_cursor })}` : null
    const rows = page.events.map((event) => [
      iso(event.at),
      event.type,
      event.user_id ? html`<a href="${c.base}/users/${event.user_id}"><code>${event.user_id}</code></a>` : null,
      event.reason,
      actorCell(c, event.actor),
      event.ip,
    ])
    return c.send(reply, 200, consoleLayout(c.page(request), 'events', 'Audit events', html`${form}
${who}
${table('Events, newest first', ['When', 'What', 'User', 'Why', 'By', 'From'], rows, 'No event matches.')}
${next ? html`<p><a href="${next}">Next page</a></p>` : ''}`))
  })
}

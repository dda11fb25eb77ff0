import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../errors.ts'
import { html, type Html } from '../html.ts'
import type { Form } from '../pages/routes.ts'
import { WEBHOOK_EVENTS } from '../webhooks/events.ts'
import type { DeliveryView, WebhookView } from '../webhooks/service.ts'
import type { ConsoleContext } from './routes.ts'
import { actionButton, confirmPage, consoleLayout, iso, notice, problemList, table } from './views.ts'

/** The endpoint form as typed: the events a checkbox each (`event:user.created`, `event:*` for every one). */
interface WebhookFields {
  url: string
  description: string
  events: string[]
}

const BLANK: WebhookFields = { url: '', description: '', events: [] }
const DELIVERIES_PAGE = 50
const EVERY = '*'

const fieldsOf = (form: Form): WebhookFields => ({
  url: (form.url ?? '').trim(),
  description: (form.description ?? '').trim(),
  events: Object.keys(form).filter((name) => name.startsWith('event:')).map((name) => name.slice('event:'.length)),
})
const fieldsFrom = (webhook: WebhookView): WebhookFields => ({ url: webhook.url, description: webhook.description ?? '', events: webhook.events })

/** A refused change's problems in the form's words, or null for any other error. */
function problemsOf(error: unknown): string[] | null {
  if (!(error instanceof AppError)) return null
  if (error.code === 'LIMIT_EXCEEDED') return [error.message]
  if (error.code !== 'VALIDATION_ERROR') return null
  const label: Record<string, string> = { url: 'URL', events: 'Events', description: 'Description' }
  return (error.details ?? []).map(({ field, message }) => `${label[field] ?? field}: ${message}.`)
}

function webhookForm(action: string, fields: WebhookFields, problems: string[], creating: boolean): Html {
  const box = (event: string, label: string) =>
    html`<div><input type="checkbox" id="event:${event}" name="event:${event}" value="on"${fields.events.includes(event) ? html` checked` : ''}> <label for="event:${event}" class="inline-label">${label}</label></div>\n`
  return html`${problemList(problems)}<form method="post" action="${action}">
<div class="field"><label for="url">URL (events are POSTed here)</label><input id="url" name="url" type="text" autocomplete="off" value="${fields.url}"></div>
<div class="field"><label for="description">Description (optional)</label><input id="description" name="description" type="text" autocomplete="off" value="${fields.description}"></div>
<fieldset><legend>Events</legend>
${box(EVERY, 'every event (*), including those added later')}${WEBHOOK_EVENTS.map((event) => box(event, event))}</fieldset>
<button type="submit">${creating ? 'Add the endpoint' : 'Save the endpoint'}</button>
</form>`
}

/** What became of a delivery, in a word. */
function stateOf(delivery: DeliveryView): string {
  if (delivery.delivered_at !== null) return `delivered ${iso(delivery.delivered_at)}`
  if (delivery.failed_at !== null) return `given up ${iso(delivery.failed_at)}`
  return `waiting: next attempt ${iso(delivery.next_attempt_at)}`
}

const disabledWhy = (webhook: WebhookView) =>
  webhook.enabled ? '—' : webhook.disabled_reason === 'failing' ? 'failing: three days of failed deliveries' : webhook.disabled_reason === 'operator' ? 'operator: turned off by hand' : 'created disabled'

/**
 * Webhooks (docs/console.md): the endpoints (WebhookService, as the admin API's routes in
 * src/webhooks/routes.ts use it), one endpoint with its deliveries log (newest first, keyset pages),
 * and what the admin API does: add (the signing secret shown once, on the answering page), edit,
 * enable, disable (asked first: its waiting deliveries are given up), rotate the secret (shown once;
 * not asked, since the previous secret keeps signing for 24 hours), retry a delivery, remove
 * (asked first).
 */
export function webhookRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { webhooks } = c.services

  const listPage = async (request: FastifyRequest, reply: FastifyReply, status: number, fields: WebhookFields, problems: string[]) => {
    const rows = (await webhooks.list()).map((webhook) => [
      html`<a href="${c.base}/webhooks/${webhook.id}">${webhook.url}</a>`, webhook.description, webhook.events.join(' '),
      webhook.enabled ? 'yes' : 'no', disabledWhy(webhook), iso(webhook.created_at),
    ])
    const create = c.page(request).operator.canWrite ? html`<h2>Add an endpoint</h2>\n${webhookForm(`${c.base}/webhooks`, fields, problems, true)}` : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'webhooks', 'Webhooks', html`${notice((request.query as { notice?: string }).notice)}
${table('Endpoints, oldest first', ['URL', 'Description', 'Events', 'Enabled', 'Disabled because', 'Created'], rows, 'No endpoint.')}
${create}`))
  }

  const webhookPage = async (request: FastifyRequest, reply: FastifyReply, id: string, status: number, edit?: { fields: WebhookFields; problems: string[] }) => {
    const webhook = await webhooks.get(id)
    const cursor = (request.query as { cursor?: unknown }).cursor
    const path = `${c.base}/webhooks/${webhook.id}`
    let log: Awaited<ReturnType<typeof webhooks.deliveries>>
    try {
      log = await webhooks.deliveries(id, { limit: DELIVERIES_PAGE, ...(typeof cursor === 'string' && cursor !== '' ? { cursor } : {}) })
    } catch (error) {
      if (!(error instanceof AppError && error.code === 'VALIDATION_ERROR')) throw error
      return c.send(reply, 400, consoleLayout(c.page(request), 'webhooks', 'This page of deliveries cannot be shown', html`<p>The link to it is not one this console made. <a href="${path}">Start from the newest deliveries</a>.</p>`))
    }
    const write = c.page(request).operator.canWrite
    const changes = write
      ? html`<div class="actions">
${webhook.enabled ? actionButton(`${path}/disable`, 'Disable…', {}, { danger: true }) : actionButton(`${path}/enable`, 'Enable')}
${actionButton(`${path}/rotate-secret`, 'Rotate the signing secret')}
${actionButton(`${path}/remove`, 'Remove…', {}, { danger: true })}
</div>`
      : ''
    const rows = log.deliveries.map((delivery) => [
      iso(delivery.created_at), delivery.type, html`<code>${delivery.webhook_id}</code>`, stateOf(delivery), delivery.attempts,
      delivery.last_status, delivery.last_error,
      write ? actionButton(`${path}/deliveries/${delivery.id}/retry`, 'Send again', {}, { inline: true }) : '',
    ])
    const next = log.next_cursor ? `${path}?${new URLSearchParams({ cursor: log.next_cursor })}` : null
    return c.send(reply, status, consoleLayout(c.page(request), 'webhooks', webhook.url, html`${notice((request.query as { notice?: string }).notice)}
<dl>
<dt>Id</dt><dd><code>${webhook.id}</code></dd>
<dt>Description</dt><dd>${webhook.description ?? '—'}</dd>
<dt>Events</dt><dd>${webhook.events.join(' ')}</dd>
<dt>Enabled</dt><dd>${webhook.enabled ? 'yes' : 'no'}</dd>
<dt>Disabled because</dt><dd>${disabledWhy(webhook)}</dd>
<dt>Created</dt><dd>${iso(webhook.created_at)}</dd>
<dt>Updated</dt><dd>${iso(webhook.updated_at)}</dd>
</dl>
${changes}
<h2>Deliveries</h2>
${table(`Newest first, ${DELIVERIES_PAGE} a page`, ['Created', 'Event', 'webhook-id', 'State', 'Attempts', 'Last HTTP status', 'Last error', ''], rows, 'No delivery yet.')}
${next ? html`<p><a href="${next}">Older deliveries</a></p>` : ''}
${write ? html`<h2>Edit</h2>\n${webhookForm(path, edit?.fields ?? fieldsFrom(webhook), edit?.problems ?? [], false)}` : ''}`))
  }

  /** The page answering a new signing secret: the only place it is ever shown. */
  const secretPage = (request: FastifyRequest, reply: FastifyReply, title: string, webhook: WebhookView, secret: string, rotated: boolean) =>
    c.send(reply, 200, consoleLayout(c.page(request), 'webhooks', title, html`<p>The signing secret, shown only on this page: copy it to the receiver now. It is stored sealed and never shown again; if it is lost, rotate it.${rotated ? ' The previous secret keeps signing beside it for 24 hours.' : ''}</p>
<p class="secret">${secret}</p>
<p><a href="${c.base}/webhooks/${webhook.id}">Go to the endpoint</a></p>`))

  app.get<{ Querystring: { notice?: string } }>(`${c.base}/webhooks`, async (request, reply) => listPage(request, reply, 200, BLANK, []))

  app.get<{ Params: { id: string }; Querystring: { notice?: string; cursor?: string } }>(`${c.base}/webhooks/:id`, async (request, reply) => webhookPage(request, reply, request.params.id, 200))

  app.post(`${c.base}/webhooks`, async (request, reply) => {
    const fields = fieldsOf(c.form(request))
    try {
      const { webhook, secret } = await webhooks.create({ url: fields.url, events: fields.events, description: fields.description || null }, c.context(request))
      return secretPage(request, reply, `Endpoint ${webhook.url} added`, webhook, secret, false)
    } catch (error) {
      const problems = problemsOf(error)
      if (problems) return listPage(request, reply, 400, fields, problems)
      throw error
    }
  })

  app.post<{ Params: { id: string } }>(`${c.base}/webhooks/:id`, async (request, reply) => {
    const id = request.params.id
    const fields = fieldsOf(c.form(request))
    try {
      await webhooks.update(id, { url: fields.url, events: fields.events, description: fields.description || null }, c.context(request))
    } catch (error) {
      const problems = problemsOf(error)
      if (problems) return webhookPage(request, reply, id, 400, { fields, problems })
      throw error
    }
    return c.redirect(reply, `/webhooks/${id}`, 'saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/webhooks/:id/enable`, async (request, reply) => {
    await webhooks.update(request.params.id, { enabled: true }, c.context(request))
    return c.redirect(reply, `/webhooks/${request.params.id}`, 'saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/webhooks/:id/disable`, async (request, reply) => {
    const id = request.params.id
    const webhook = await webhooks.get(id)
    if (c.form(request).confirm !== 'yes') {
      return c.send(reply, 200, confirmPage(c.page(request), 'webhooks', `Disable ${webhook.url}?`, html`<p>No event is sent to it until it is enabled again, and the deliveries waiting for it are given up (each can be sent again by hand later).</p>`, `${c.base}/webhooks/${id}/disable`, 'Disable the endpoint', `${c.base}/webhooks/${id}`))
    }
    await webhooks.update(id, { enabled: false }, c.context(request))
    return c.redirect(reply, `/webhooks/${id}`, 'saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/webhooks/:id/rotate-secret`, async (request, reply) => {
    const { webhook, secret } = await webhooks.rotateSecret(request.params.id, c.context(request))
    return secretPage(request, reply, `New signing secret for ${webhook.url}`, webhook, secret, true)
  })

  app.post<{ Params: { id: string; delivery: string } }>(`${c.base}/webhooks/:id/deliveries/:delivery/retry`, async (request, reply) => {
    const { id, delivery } = request.params
    try {
      await webhooks.retry(id, delivery, c.context(request))
    } catch (error) {
      // The service's own words: the delivery is unknown, or too old to send again (its payload is kept a week).
      if (!(error instanceof AppError && error.code === 'NOT_FOUND')) throw error
      return c.send(reply, 404, consoleLayout(c.page(request), 'webhooks', 'This delivery cannot be sent again', html`<p>${error.message === 'Not found.' ? 'There is no such delivery of this endpoint.' : error.message} Nothing was queued.</p><p><a href="${c.base}/webhooks/${id}">Back to the endpoint</a></p>`))
    }
    return c.redirect(reply, `/webhooks/${id}`, 'retried')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/webhooks/:id/remove`, async (request, reply) => {
    const id = request.params.id
    const webhook = await webhooks.get(id)
    if (c.form(request).confirm !== 'yes') {
      return c.send(reply, 200, confirmPage(c.page(request), 'webhooks', `Remove ${webhook.url}?`, html`<p>The endpoint is removed with its deliveries log, and no event is sent to it again. This cannot be undone.</p>`, `${c.base}/webhooks/${id}/remove`, 'Remove the endpoint', `${c.base}/webhooks/${id}`))
    }
    await webhooks.remove(id, c.context(request))
    return c.redirect(reply, '/webhooks', 'removed')
  })
}

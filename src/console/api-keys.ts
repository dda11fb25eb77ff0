import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ApiKeyError, SCOPES, type ApiKeySummary, type Scope } from '../admin/api-keys.ts'
import { durationMs } from '../duration.ts'
import { html } from '../html.ts'
import type { Form } from '../pages/routes.ts'
import type { ConsoleContext } from './routes.ts'
import { actionButton, confirmPage, consoleLayout, iso, notice, problemList, table } from './views.ts'

/** The key form as typed: the scopes a checkbox each (`scope:users:read`), the lifetime as the CLI takes it. */
interface KeyFields {
  name: string
  scopes: string[]
  expires: string
}

const BLANK: KeyFields = { name: '', scopes: [], expires: '' }
const NAME_MAX = 100
const CONTROL = /[\u0000-\u001f\u007f]/

const fieldsOf = (form: Form): KeyFields => ({
  name: (form.name ?? '').trim(),
  scopes: Object.keys(form).filter((name) => name.startsWith('scope:')).map((name) => name.slice('scope:'.length)),
  expires: (form.expires ?? '').trim(),
})

const when = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())

/**
 * What is wrong with the form, in its words (the service says the same in the CLI's: `--name ...`),
 * and the key's lifetime when nothing is.
 */
function judged(fields: KeyFields): { problems: string[]; lifetimeMs: number | null } {
  const problems: string[] = []
  if (fields.name === '') problems.push('Name: is required.')
  else if (fields.name.length > NAME_MAX) problems.push(`Name: must be at most ${NAME_MAX} characters.`)
  else if (CONTROL.test(fields.name)) problems.push('Name: must not contain control characters.')
  if (fields.scopes.length === 0) problems.push('Scopes: choose at least one.')
  const unknown = fields.scopes.filter((scope) => !(SCOPES as readonly string[]).includes(scope))
  if (unknown.length > 0) problems.push(`Scopes: ${unknown.join(', ')} is not a scope of API keys.`)
  let lifetimeMs: number | null = null
  if (fields.expires !== '') {
    // A lifetime as `portcullis api-keys create --expires` takes it.
    lifetimeMs = durationMs(fields.expires)
    if (!lifetimeMs) problems.push('Expires after: write a duration such as 30m, 24h or 90d, or leave it empty for a key that lasts until revoked.')
  }
  return { problems, lifetimeMs }
}

const stateOf = (key: ApiKeySummary, now: number) =>
  key.revoked_at !== null ? `revoked ${iso(when(key.revoked_at))}` : key.expires_at !== null && key.expires_at <= now ? 'expired' : 'active'

/**
 * API keys (docs/console.md): every key (ApiKeyService, as the CLI uses it), creating one (the key
 * shown once, on the page that answers: only its hash is stored) and revoking (asked first). A key
 * holds admin API scopes, never `console:*`: the console is for people, keys for programs.
 */
export function apiKeyRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { apiKeys, clock } = c.services

  const listPage = async (request: FastifyRequest, reply: FastifyReply, status: number, fields: KeyFields, problems: string[]) => {
    const now = clock.now()
    const write = c.page(request).operator.canWrite
    const rows = (await apiKeys.list()).map((key) => [
      html`<code>${key.id}</code>`, key.name, key.scopes.join(' '), iso(when(key.created_at)), iso(when(key.last_used_at)), iso(when(key.expires_at)), stateOf(key, now),
      write && key.revoked_at === null ? actionButton(`${c.base}/api-keys/${key.id}/revoke`, 'Revoke…', {}, { danger: true, inline: true }) : '',
    ])
    const create = write
      ? html`<h2>Create a key</h2>
${problemList(problems, 'No key was made:')}<form method="post" action="${c.base}/api-keys">
<div class="field"><label for="name">Name (who or what uses it)</label><input id="name" name="name" type="text" autocomplete="off" value="${fields.name}"></div>
<fieldset><legend>Scopes</legend>
${SCOPES.map((scope) => html`<div><input type="checkbox" id="scope:${scope}" name="scope:${scope}" value="on"${fields.scopes.includes(scope) ? html` checked` : ''}> <label for="scope:${scope}" class="inline-label">${scope}</label></div>\n`)}</fieldset>
<div class="field"><label for="expires">Expires after (30m, 24h, 90d; empty: until revoked)</label><input id="expires" name="expires" type="text" autocomplete="off" value="${fields.expires}"></div>
<button type="submit">Create the key</button>
</form>`
      : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'api-keys', 'API keys', html`${notice((request.query as { notice?: string }).notice)}
${table('Every key, oldest first', ['Id', 'Name', 'Scopes', 'Created', 'Last used', 'Expires', 'State', ''], rows, 'No API key.')}
${create}`))
  }

  app.get<{ Querystring: { notice?: string } }>(`${c.base}/api-keys`, async (request, reply) => listPage(request, reply, 200, BLANK, []))

  app.post(`${c.base}/api-keys`, async (request, reply) => {
    const fields = fieldsOf(c.form(request))
    const { problems, lifetimeMs } = judged(fields)
    if (problems.length > 0) return listPage(request, reply, 400, fields, problems)
    let created: Awaited<ReturnType<typeof apiKeys.create>>
    try {
      created = await apiKeys.create({ name: fields.name, scopes: fields.scopes as Scope[], expiresAt: lifetimeMs === null ? null : clock.now() + lifetimeMs }, c.context(request))
    } catch (error) {
      // The form was judged above by the same rules; this is the service's word should they differ.
      if (error instanceof ApiKeyError) return listPage(request, reply, 400, fields, [error.message.replace(/--(\w+)/g, '$1')])
      throw error
    }
    const { key, summary } = created
    return c.send(reply, 200, consoleLayout(c.page(request), 'api-keys', `API key ${summary.name} created`, html`<dl>
<dt>Id</dt><dd><code>${summary.id}</code></dd>
<dt>Scopes</dt><dd>${summary.scopes.join(' ')}</dd>
<dt>Expires</dt><dd>${iso(when(summary.expires_at))}</dd>
</dl>
<p>The key, shown only on this page: copy it now. Only a hash of it is stored, so it can never be shown again; if it is lost, revoke it and create another.</p>
<p class="secret">${key}</p>
<p><a href="${c.base}/api-keys">Back to the API keys</a></p>`))
  })

  app.post<{ Params: { id: string } }>(`${c.base}/api-keys/:id/revoke`, async (request, reply) => {
    const id = request.params.id
    const key = (await apiKeys.list()).find((candidate) => candidate.id === id && candidate.revoked_at === null)
    if (!key) {
      return c.send(reply, 404, consoleLayout(c.page(request), 'api-keys', 'No such key to revoke', html`<p>There is no live API key with this id: it does not exist, or it is revoked already. Nothing was changed.</p><p><a href="${c.base}/api-keys">Back to the API keys</a></p>`))
    }
    if (c.form(request).confirm !== 'yes') {
      return c.send(reply, 200, confirmPage(c.page(request), 'api-keys', `Revoke the key ${key.name}?`, html`<p>Every program using <code>${key.id}</code> (${key.scopes.join(' ')}) is refused from now on, on every instance. This cannot be undone: a new key would have to be created and given to it.</p>`, `${c.base}/api-keys/${id}/revoke`, 'Revoke the key', `${c.base}/api-keys`))
    }
    await apiKeys.revoke(id, c.context(request))
    return c.redirect(reply, '/api-keys', 'revoked')
  })
}

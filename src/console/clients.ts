import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../errors.ts'
import { html, type Html } from '../html.ts'
import { CONSOLE_CLIENT_ID, type RegisteredClient } from '../provider/clients.ts'
import { CLIENT_SCOPES, CLIENT_TYPES, DEFAULT_CLIENT_SCOPES, GRANT_TYPES, type ClientCreate, type ClientPatch } from '../provider/schemas.ts'
import type { Form } from '../pages/routes.ts'
import type { ConsoleContext } from './routes.ts'
import { actionButton, confirmPage, consoleLayout, iso, notice, problemList, table } from './views.ts'

/** What the client form holds, as typed: the lists one entry a line (URIs) or a checkbox each (`scope:NAME`, `grant:NAME`). */
interface ClientFields {
  name: string
  type: string
  redirect_uris: string[]
  post_logout_redirect_uris: string[]
  backchannel_logout_uri: string
  first_party: boolean
  scopes: string[]
  grant_types: string[]
}

const LABELS: Record<string, string> = {
  name: 'Name', type: 'Type', redirect_uris: 'Redirect URIs', post_logout_redirect_uris: 'Post-logout redirect URIs',
  backchannel_logout_uri: 'Back-channel logout URI', first_party: 'First-party', scopes: 'Scopes', grant_types: 'Grant types',
  pkce_required: 'PKCE', token_endpoint_auth_method: 'Token endpoint authentication', jwks: 'Keys (jwks)', jwks_uri: 'Keys URI (jwks_uri)',
  id_token_signed_response_alg: 'ID token algorithm', client_id: 'Client',
}

const lines = (text: string | undefined) => (text ?? '').split(/\r?\n/).map((line) => line.trim()).filter((line) => line !== '')
const checked = (form: Form, prefix: string) => Object.keys(form).filter((name) => name.startsWith(prefix)).map((name) => name.slice(prefix.length))

function fieldsOf(form: Form): ClientFields {
  return {
    name: form.name ?? '',
    type: form.type ?? '',
    redirect_uris: lines(form.redirect_uris),
    post_logout_redirect_uris: lines(form.post_logout_redirect_uris),
    backchannel_logout_uri: (form.backchannel_logout_uri ?? '').trim(),
    first_party: form.first_party === 'on',
    scopes: checked(form, 'scope:'),
    grant_types: checked(form, 'grant:'),
  }
}

function fieldsFrom(client: RegisteredClient): ClientFields {
  return {
    name: client.name, type: client.type, redirect_uris: client.redirect_uris, post_logout_redirect_uris: client.post_logout_redirect_uris,
    backchannel_logout_uri: client.backchannel_logout_uri ?? '', first_party: client.first_party, scopes: client.scopes, grant_types: client.grant_types,
  }
}

const BLANK: ClientFields = { name: '', type: 'confidential', redirect_uris: [], post_logout_redirect_uris: [], backchannel_logout_uri: '', first_party: false, scopes: [...DEFAULT_CLIENT_SCOPES], grant_types: ['authorization_code', 'refresh_token'] }

/**
 * A refused registration's problems in the form's words: the registry names a list's entry by its
 * index (`redirect_uris.2`), shown here with the entry itself. Null for any other error.
 */
function problemsOf(error: unknown, fields: ClientFields): string[] | null {
  if (!(error instanceof AppError) || error.code !== 'VALIDATION_ERROR') return null
  return (error.details ?? [{ field: 'client_id', message: error.message }]).map(({ field, message }) => {
    const [key = '', index] = field.split('.')
    const list = (fields as unknown as Record<string, unknown>)[key]
    const entry = index !== undefined && Array.isArray(list) ? list[Number(index)] : undefined
    return `${LABELS[key] ?? key}${typeof entry === 'string' ? ` (${entry})` : ''}: ${message}.`
  })
}

/** The checkboxes of one list, one name each (`scope:openid`): a repeated field name would keep only its first value. */
function checkboxes(legend: string, prefix: string, options: readonly string[], chosen: string[]): Html {
  return html`<fieldset><legend>${legend}</legend>
${options.map((option) => html`<div><input type="checkbox" id="${prefix}${option}" name="${prefix}${option}" value="on"${chosen.includes(option) ? html` checked` : ''}> <label for="${prefix}${option}" class="inline-label">${option}</label></div>\n`)}</fieldset>`
}

/** The registration form: for a new client (with its type) or an existing one (whose type cannot change). */
function clientForm(action: string, fields: ClientFields, problems: string[], creating: boolean): Html {
  return html`${problemList(problems)}<form method="post" action="${action}">
<div class="field"><label for="name">Name</label><input id="name" name="name" type="text" autocomplete="off" value="${fields.name}"></div>
${creating
  ? html`<div class="field"><label for="type">Type</label><select id="type" name="type">${CLIENT_TYPES.map((type) => html`<option value="${type}"${type === fields.type ? html` selected` : ''}>${type === 'confidential' ? 'confidential (a server that keeps a secret)' : 'public (a browser or native app: no secret, PKCE)'}</option>`)}</select></div>`
  : ''}
<div class="field"><label for="redirect_uris">Redirect URIs, one a line (matched exactly)</label><textarea id="redirect_uris" name="redirect_uris">${fields.redirect_uris.join('\n')}</textarea></div>
<div class="field"><label for="post_logout_redirect_uris">Post-logout redirect URIs, one a line</label><textarea id="post_logout_redirect_uris" name="post_logout_redirect_uris">${fields.post_logout_redirect_uris.join('\n')}</textarea></div>
<div class="field"><label for="backchannel_logout_uri">Back-channel logout URI (optional)</label><input id="backchannel_logout_uri" name="backchannel_logout_uri" type="text" autocomplete="off" value="${fields.backchannel_logout_uri}"></div>
<div class="field"><input type="checkbox" id="first_party" name="first_party" value="on"${fields.first_party ? html` checked` : ''}> <label for="first_party" class="inline-label">First-party (no consent page)</label></div>
${checkboxes('Scopes it may ask for', 'scope:', CLIENT_SCOPES, fields.scopes)}
${checkboxes('Grant types', 'grant:', GRANT_TYPES, fields.grant_types)}
<button type="submit">${creating ? 'Register the client' : 'Save the client'}</button>
</form>`
}

const yesNo = (value: boolean) => (value ? 'yes' : 'no')
const listed = (list: string[]) => (list.length === 0 ? '—' : html`${list.map((entry, i) => html`${i > 0 ? html`<br>` : ''}<code>${entry}</code>`)}`)

/**
 * OAuth clients (docs/console.md): every client of the provider (ClientRegistry, as the admin API
 * and the CLI use it), one client's whole registration, registering, editing, rotating a
 * confidential client's secret (shown once, on the page that answers) and removing (asked first).
 *
 * The console's own client (`portcullis-console`) is listed and shown but not changed here: it is
 * written again at every start (an edit would last until the next one), and editing or removing it
 * would stop the console's own sign-in until then. The admin API and the CLI still can.
 */
export function clientRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { clients } = c.services
  const builtIn = (id: string) => id === CONSOLE_CLIENT_ID

  const listPage = async (request: FastifyRequest, reply: FastifyReply, status: number, fields: ClientFields, problems: string[]) => {
    const all = await clients.list()
    const rows = all.map((client) => [
      html`<a href="${c.base}/clients/${client.client_id}">${client.name}</a>${builtIn(client.client_id) ? html` <span class="muted">(built-in)</span>` : ''}`,
      html`<code>${client.client_id}</code>`, client.type, yesNo(client.first_party), yesNo(client.dynamic), iso(client.created_at), iso(client.last_used_at),
    ])
    const create = c.page(request).operator.canWrite ? html`<h2>Register a client</h2>\n${clientForm(`${c.base}/clients`, fields, problems, true)}` : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'clients', 'OAuth clients', html`${notice((request.query as { notice?: string }).notice)}
${table('Every client of the provider, oldest first', ['Name', 'Client id', 'Type', 'First-party', 'Dynamic', 'Created', 'Last used'], rows, 'No client is registered.')}
${create}`))
  }

  const clientPage = async (request: FastifyRequest, reply: FastifyReply, id: string, status: number, edit?: { fields: ClientFields; problems: string[] }) => {
    const client = await clients.get(id)
    const path = `${c.base}/clients/${client.client_id}`
    const write = c.page(request).operator.canWrite
    let changes: Html | '' = ''
    if (builtIn(client.client_id)) {
      changes = html`<p class="muted">This is the console's own client: the console signs operators in through it. It is written again at every start, so it is not edited or removed here.</p>`
    } else if (write) {
      changes = html`<div class="actions">
${client.type === 'confidential' ? actionButton(`${path}/rotate-secret`, 'Rotate the secret…', {}, { danger: true }) : ''}
${actionButton(`${path}/remove`, 'Remove…', {}, { danger: true })}
</div>
<h2>Edit</h2>
${clientForm(path, edit?.fields ?? fieldsFrom(client), edit?.problems ?? [], false)}`
    }
    return c.send(reply, status, consoleLayout(c.page(request), 'clients', client.name, html`${notice((request.query as { notice?: string }).notice)}
<dl>
<dt>Client id</dt><dd><code>${client.client_id}</code></dd>
<dt>Type</dt><dd>${client.type}</dd>
<dt>First-party</dt><dd>${yesNo(client.first_party)}</dd>
<dt>Redirect URIs</dt><dd>${listed(client.redirect_uris)}</dd>
<dt>Post-logout redirect URIs</dt><dd>${listed(client.post_logout_redirect_uris)}</dd>
<dt>Scopes</dt><dd>${client.scopes.join(' ')}</dd>
<dt>Grant types</dt><dd>${listed(client.grant_types)}</dd>
<dt>Back-channel logout URI</dt><dd>${client.backchannel_logout_uri ?? '—'}</dd>
<dt>PKCE required</dt><dd>${yesNo(client.pkce_required)}</dd>
<dt>Token endpoint authentication</dt><dd>${client.token_endpoint_auth_method}</dd>
<dt>Keys (jwks)</dt><dd>${client.jwks === null ? '—' : html`<pre><code>${JSON.stringify(client.jwks, null, 2)}</code></pre>`}</dd>
<dt>Keys URI (jwks_uri)</dt><dd>${client.jwks_uri ?? '—'}</dd>
<dt>ID token algorithm</dt><dd>${client.id_token_signed_response_alg}</dd>
<dt>Registered itself (dynamic)</dt><dd>${yesNo(client.dynamic)}</dd>
<dt>Created</dt><dd>${iso(client.created_at)}</dd>
<dt>Updated</dt><dd>${iso(client.updated_at)}</dd>
<dt>Last used</dt><dd>${iso(client.last_used_at)}</dd>
</dl>
${changes}`))
  }

  /** The console's own client is not changed here (see above): a clear page, nothing done. */
  const refuseBuiltIn = (request: FastifyRequest, reply: FastifyReply, what: string) =>
    c.send(reply, 409, consoleLayout(c.page(request), 'clients', `The console's own client is not ${what} here`, html`<p>The console signs operators in through <code>${CONSOLE_CLIENT_ID}</code>, and Portcullis writes it again at every start: a change would last only until then, and meanwhile could stop the console's own sign-in. Nothing was changed.</p>
<p><a href="${c.base}/clients/${CONSOLE_CLIENT_ID}">Back to the client</a></p>`))

  /** The page answering a new secret: the only place it is ever shown. */
  const secretPage = (request: FastifyRequest, reply: FastifyReply, title: string, client: RegisteredClient, secret: string | undefined) =>
    c.send(reply, 200, consoleLayout(c.page(request), 'clients', title, html`<dl>
<dt>Client id</dt><dd><code>${client.client_id}</code></dd>
</dl>
${secret === undefined
  ? html`<p>A public client has no secret: it proves itself with PKCE.</p>`
  : html`<p>The client secret, shown only on this page: copy it now. It is stored sealed and never shown again; if it is lost, rotate it.</p>
<p class="secret">${secret}</p>`}
<p><a href="${c.base}/clients/${client.client_id}">Go to the client</a></p>`))

  app.get<{ Querystring: { notice?: string } }>(`${c.base}/clients`, async (request, reply) => listPage(request, reply, 200, BLANK, []))

  app.get<{ Params: { id: string }; Querystring: { notice?: string } }>(`${c.base}/clients/:id`, async (request, reply) => clientPage(request, reply, request.params.id, 200))

  app.post(`${c.base}/clients`, async (request, reply) => {
    const fields = fieldsOf(c.form(request))
    const input = {
      name: fields.name, type: fields.type, redirect_uris: fields.redirect_uris, post_logout_redirect_uris: fields.post_logout_redirect_uris,
      first_party: fields.first_party, scopes: fields.scopes, grant_types: fields.grant_types,
      ...(fields.backchannel_logout_uri ? { backchannel_logout_uri: fields.backchannel_logout_uri } : {}),
    } as ClientCreate
    try {
      const { client, client_secret } = await clients.create(input, c.context(request))
      return secretPage(request, reply, `Client ${client.name} registered`, client, client_secret)
    } catch (error) {
      const problems = problemsOf(error, fields)
      if (problems) return listPage(request, reply, 400, fields, problems)
      throw error
    }
  })

  app.post<{ Params: { id: string } }>(`${c.base}/clients/:id`, async (request, reply) => {
    const id = request.params.id
    if (builtIn(id)) return refuseBuiltIn(request, reply, 'edited')
    const fields = fieldsOf(c.form(request))
    const patch: ClientPatch = {
      name: fields.name, redirect_uris: fields.redirect_uris, post_logout_redirect_uris: fields.post_logout_redirect_uris,
      backchannel_logout_uri: fields.backchannel_logout_uri || null, first_party: fields.first_party,
      scopes: fields.scopes as ClientPatch['scopes'], grant_types: fields.grant_types as ClientPatch['grant_types'],
    }
    try {
      await clients.update(id, patch, c.context(request))
    } catch (error) {
      const problems = problemsOf(error, fields)
      if (problems) return clientPage(request, reply, id, 400, { fields, problems })
      throw error
    }
    return c.redirect(reply, `/clients/${id}`, 'saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/clients/:id/rotate-secret`, async (request, reply) => {
    const id = request.params.id
    const client = await clients.get(id)
    if (client.type !== 'confidential') {
      return c.send(reply, 400, consoleLayout(c.page(request), 'clients', 'A public client has no secret', html`<p>${client.name} is a public client: it proves itself with PKCE, and has no secret to rotate. Nothing was changed.</p><p><a href="${c.base}/clients/${id}">Back to the client</a></p>`))
    }
    if (c.form(request).confirm !== 'yes') {
      return c.send(reply, 200, confirmPage(c.page(request), 'clients', `Rotate the secret of ${client.name}?`, html`<p>A new secret is made and shown once. The current one stops working at once: the client fails to get tokens until it is given the new one.</p>`, `${c.base}/clients/${id}/rotate-secret`, 'Rotate the secret', `${c.base}/clients/${id}`))
    }
    const rotated = await clients.rotateSecret(id, c.context(request))
    return secretPage(request, reply, `New secret for ${rotated.client.name}`, rotated.client, rotated.client_secret)
  })

  app.post<{ Params: { id: string } }>(`${c.base}/clients/:id/remove`, async (request, reply) => {
    const id = request.params.id
    if (builtIn(id)) return refuseBuiltIn(request, reply, 'removed')
    const client = await clients.get(id)
    if (c.form(request).confirm !== 'yes') {
      return c.send(reply, 200, confirmPage(c.page(request), 'clients', `Remove ${client.name}?`, html`<p>The client is removed with every grant, code and token it holds: its users are signed out of it, and it cannot get tokens again. This cannot be undone.</p>`, `${c.base}/clients/${id}/remove`, 'Remove the client', `${c.base}/clients/${id}`))
    }
    await clients.remove(id, c.context(request))
    return c.redirect(reply, '/clients', 'removed')
  })
}

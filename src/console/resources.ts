import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../errors.ts'
import { html, type Html } from '../html.ts'
import type { Form } from '../pages/routes.ts'
import type { RegisteredResource, ResourceScope } from '../provider/resources.ts'
import type { ConsoleContext } from './routes.ts'
import { actionButton, confirmPage, consoleLayout, iso, notice, problemList, table } from './views.ts'

/** The resource form as typed: the scopes one `name=description` a line. */
interface ResourceFields {
  uri: string
  name: string
  scopes: string
}

const BLANK: ResourceFields = { uri: '', name: '', scopes: '' }

const fieldsOf = (form: Form): ResourceFields => ({ uri: form.uri ?? '', name: form.name ?? '', scopes: form.scopes ?? '' })
const fieldsFrom = (resource: RegisteredResource): ResourceFields => ({
  uri: resource.uri, name: resource.name, scopes: resource.scopes.map((scope) => `${scope.name}=${scope.description}`).join('\n'),
})

/**
 * The scopes of the textarea, and the line each came from (the registry names a scope by its index,
 * the page by its line). A line without `=` is a problem of its own; blank lines are skipped.
 */
function scopesOf(text: string): { scopes: ResourceScope[]; lineOf: number[]; problems: string[] } {
  const scopes: ResourceScope[] = []
  const lineOf: number[] = []
  const problems: string[] = []
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.trim()
    if (line === '') return
    const at = line.indexOf('=')
    if (at < 0) {
      problems.push(`Scopes, line ${index + 1}: write it as name=description.`)
      return
    }
    scopes.push({ name: line.slice(0, at).trim(), description: line.slice(at + 1).trim() })
    lineOf.push(index + 1)
  })
  return { scopes, lineOf, problems }
}

/** A refused change's problems in the form's words (`scopes.2.name` is a line of the textarea), or null for any other error. */
function problemsOf(error: unknown, lineOf: number[]): string[] | null {
  if (!(error instanceof AppError)) return null
  if (error.code === 'LIMIT_EXCEEDED') return [error.message]
  if (error.code !== 'VALIDATION_ERROR') return null
  return (error.details ?? []).map(({ field, message }) => {
    const [key, index, part] = field.split('.')
    if (key === 'scopes' && index !== undefined) return `Scopes, line ${lineOf[Number(index)] ?? Number(index) + 1}: the ${part === 'description' ? 'description' : 'name'} ${message}.`
    return `${key === 'uri' ? 'URI' : key === 'name' ? 'Name' : 'Scopes'}: ${message}.`
  })
}

function resourceForm(action: string, fields: ResourceFields, problems: string[], creating: boolean): Html {
  return html`${problemList(problems)}<form method="post" action="${action}">
${creating ? html`<div class="field"><label for="uri">URI (the audience its tokens name; exactly as clients will ask for it)</label><input id="uri" name="uri" type="text" autocomplete="off" value="${fields.uri}"></div>` : ''}
<div class="field"><label for="name">Name (shown on the consent page)</label><input id="name" name="name" type="text" autocomplete="off" value="${fields.name}"></div>
<div class="field"><label for="scopes">Scopes, one a line as name=description (the consent page shows the description)</label><textarea id="scopes" name="scopes">${fields.scopes}</textarea></div>
<button type="submit">${creating ? 'Register the resource' : 'Save the resource'}</button>
</form>`
}

/**
 * Resources (docs/console.md): the APIs registered with the provider (ResourceRegistry, as the
 * admin API and the CLI use it): the list, one resource with its scopes, registering, editing the
 * name and scopes (the URI is the resource's identity: a new URI is a new resource), and removing
 * (asked first).
 */
export function resourceRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { resources } = c.services

  const listPage = async (request: FastifyRequest, reply: FastifyReply, status: number, fields: ResourceFields, problems: string[]) => {
    const rows = (await resources.list()).map((resource) => [
      html`<a href="${c.base}/resources/${resource.id}">${resource.name}</a>`, html`<code>${resource.uri}</code>`,
      resource.scopes.map((scope) => scope.name).join(' '), iso(resource.created_at), iso(resource.updated_at),
    ])
    const create = c.page(request).operator.canWrite ? html`<h2>Register a resource</h2>\n${resourceForm(`${c.base}/resources`, fields, problems, true)}` : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'resources', 'Resources', html`${notice((request.query as { notice?: string }).notice)}
<p class="muted">Besides this service's own API, which is always a resource.</p>
${table('Registered resources, oldest first', ['Name', 'URI', 'Scopes', 'Created', 'Updated'], rows, 'No resource is registered.')}
${create}`))
  }

  const resourcePage = async (request: FastifyRequest, reply: FastifyReply, id: string, status: number, edit?: { fields: ResourceFields; problems: string[] }) => {
    const resource = await resources.get(id)
    const path = `${c.base}/resources/${resource.id}`
    const changes = c.page(request).operator.canWrite
      ? html`<div class="actions">${actionButton(`${path}/remove`, 'Remove…', {}, { danger: true })}</div>
<h2>Edit</h2>
${resourceForm(path, edit?.fields ?? fieldsFrom(resource), edit?.problems ?? [], false)}`
      : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'resources', resource.name, html`${notice((request.query as { notice?: string }).notice)}
<dl>
<dt>URI</dt><dd><code>${resource.uri}</code></dd>
<dt>Id</dt><dd><code>${resource.id}</code></dd>
<dt>Created</dt><dd>${iso(resource.created_at)}</dd>
<dt>Updated</dt><dd>${iso(resource.updated_at)}</dd>
</dl>
<h2>Scopes</h2>
${table('Its scopes', ['Scope', 'Description'], resource.scopes.map((scope) => [html`<code>${scope.name}</code>`, scope.description]), 'None.')}
${changes}`))
  }

  app.get<{ Querystring: { notice?: string } }>(`${c.base}/resources`, async (request, reply) => listPage(request, reply, 200, BLANK, []))

  app.get<{ Params: { id: string }; Querystring: { notice?: string } }>(`${c.base}/resources/:id`, async (request, reply) => resourcePage(request, reply, request.params.id, 200))

  app.post(`${c.base}/resources`, async (request, reply) => {
    const fields = fieldsOf(c.form(request))
    const { scopes, lineOf, problems } = scopesOf(fields.scopes)
    if (problems.length > 0) return listPage(request, reply, 400, fields, problems)
    let created: RegisteredResource
    try {
      created = await resources.create({ uri: fields.uri, name: fields.name, scopes }, c.context(request))
    } catch (error) {
      const refused = problemsOf(error, lineOf)
      if (refused) return listPage(request, reply, 400, fields, refused)
      throw error
    }
    return c.redirect(reply, `/resources/${created.id}`, 'saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/resources/:id`, async (request, reply) => {
    const id = request.params.id
    const fields = fieldsOf(c.form(request))
    const { scopes, lineOf, problems } = scopesOf(fields.scopes)
    if (problems.length > 0) return resourcePage(request, reply, id, 400, { fields, problems })
    try {
      await resources.update(id, { name: fields.name, scopes }, c.context(request))
    } catch (error) {
      const refused = problemsOf(error, lineOf)
      if (refused) return resourcePage(request, reply, id, 400, { fields, problems: refused })
      throw error
    }
    return c.redirect(reply, `/resources/${id}`, 'saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/resources/:id/remove`, async (request, reply) => {
    const id = request.params.id
    const resource = await resources.get(id)
    if (c.form(request).confirm !== 'yes') {
      return c.send(reply, 200, confirmPage(c.page(request), 'resources', `Remove ${resource.name}?`, html`<p>No new token is issued for <code>${resource.uri}</code> from now on, and refreshing one fails. Access tokens already issued for it live out their 15 minutes.</p>`, `${c.base}/resources/${id}/remove`, 'Remove the resource', `${c.base}/resources/${id}`))
    }
    await resources.remove(id, c.context(request))
    return c.redirect(reply, '/resources', 'removed')
  })
}

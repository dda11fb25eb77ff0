import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ROLE_DESCRIPTION_MAX, type RoleView } from '../authz/roles.ts'
import { AppError } from '../errors.ts'
import { html, type Html } from '../html.ts'
import type { ConsoleContext } from './routes.ts'
import { actionButton, confirmPage, consoleLayout, iso, notice, table } from './views.ts'

type Problems = Record<string, string>
type Typed = { name?: string; description?: string; permissions?: string }

/** The permissions box: one permission a line, or separated by spaces or commas. */
const permissionsOf = (text: string) => text.split(/[\s,]+/).filter((word) => word !== '')

/**
 * What the service said was wrong with a role form, by field: its VALIDATION_ERROR details (a
 * permission named by its index is quoted back as typed), or null for any other error.
 */
function problemsOf(error: unknown, permissions: string[]): Problems | null {
  if (!(error instanceof AppError)) return null
  if (error.code === 'LIMIT_EXCEEDED') return { permissions: error.message }
  if (error.code !== 'VALIDATION_ERROR' || !error.details) return null
  const problems: Problems = {}
  for (const { field, message } of error.details) {
    const index = /^permissions\.(\d+)$/.exec(field)
    if (index) problems.permissions ??= `“${permissions[Number(index[1])] ?? ''}” is not a permission: write each as resource:action in lower case (users:read, reports:*).`
    else if (field === 'name') problems.name = message.startsWith('must match') ? 'A role\'s name is 2 to 40 lower-case letters, digits, - or _, starting with a letter.' : `The name ${message}.`
    else if (field === 'description') problems.description = `The description ${message}.`
    else problems.permissions = `The permissions ${message}.`
  }
  return problems
}

/**
 * Roles (docs/console.md): the catalogue (RolesService, as the admin API's /admin/roles), a role's
 * page, and the changes: a new role, a role's description and permissions (built-in roles too), and
 * removal (not of a built-in role), asked first on a page of its own; a role someone holds is
 * refused by the service (409), and the page that says so offers to remove it anyway (`force`),
 * taking it from its holders. A form the service refuses is shown again with what is wrong.
 */
export function roleRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { roles } = c.services

  const field = (problems: Problems, name: string) => (problems[name] ? html`<p class="error" id="${name}-error">${problems[name]}</p>` : '')
  const invalid = (problems: Problems, name: string) => (problems[name] ? html` aria-invalid="true" aria-describedby="${name}-error"` : '')

  /** The description and permissions fields, for a new role and for a role's edit. */
  const roleFields = (problems: Problems, typed: Typed): Html => html`<div class="field"><label for="description">Description (optional, at most ${ROLE_DESCRIPTION_MAX} characters)</label><input id="description" name="description" type="text" maxlength="${ROLE_DESCRIPTION_MAX}" autocomplete="off" value="${typed.description ?? ''}"${invalid(problems, 'description')}>${field(problems, 'description')}</div>
<div class="field"><label for="permissions">Permissions (resource:action, one a line)</label><textarea id="permissions" name="permissions"${invalid(problems, 'permissions')}>${typed.permissions ?? ''}</textarea>${field(problems, 'permissions')}</div>`

  /** The role of a path, or null when none has its name. */
  async function found(name: string): Promise<RoleView | null> {
    try {
      return await roles.get(name)
    } catch (error) {
      if (error instanceof AppError && error.code === 'NOT_FOUND') return null
      throw error
    }
  }

  const missing = (request: FastifyRequest, reply: FastifyReply) =>
    c.send(reply, 404, consoleLayout(c.page(request), 'roles', 'Role not found', html`<p class="error" role="alert">No role has this name: it may have been removed.</p>
<p><a href="${c.base}/roles">The catalogue</a></p>`))

  async function listPage(request: FastifyRequest<{ Querystring: { notice?: string } }>, reply: FastifyReply, status: number, problems: Problems = {}, typed: Typed = {}) {
    const catalogue = await roles.list()
    const rows = catalogue.map((role) => [
      html`<a href="${c.base}/roles/${role.name}">${role.name}</a>`, role.description, html`<code>${role.permissions.join(' ')}</code>`, role.builtin ? 'yes' : 'no',
    ])
    const create = c.page(request).operator.canWrite
      ? html`<h2>New role</h2>
<form method="post" action="${c.base}/roles">
<div class="field"><label for="name">Name</label><input id="name" name="name" type="text" maxlength="40" autocomplete="off" value="${typed.name ?? ''}"${invalid(problems, 'name')}>${field(problems, 'name')}</div>
${roleFields(problems, typed)}
<button type="submit">Create the role</button>
</form>`
      : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'roles', 'Roles', html`${notice(request.query.notice)}
${table('The catalogue, by name', ['Name', 'Description', 'Permissions', 'Built-in'], rows, 'No role.')}
${create}`))
  }

  async function rolePage(request: FastifyRequest<{ Params: { name: string }; Querystring: { notice?: string } }>, reply: FastifyReply, status: number, problems: Problems = {}, typed?: Typed) {
    const role = await found(request.params.name)
    if (!role) return missing(request, reply)
    const path = `${c.base}/roles/${role.name}`
    const write = c.page(request).operator.canWrite
    const shown = typed ?? { description: role.description ?? '', permissions: role.permissions.join('\n') }
    const edit = write
      ? html`<h2>Edit</h2>
${problems.form ? html`<p class="error" role="alert">${problems.form}</p>` : ''}
<form method="post" action="${path}">
${roleFields(problems, shown)}
<button type="submit">Save the role</button>
</form>
${role.builtin ? html`<p class="muted">A built-in role can be changed, not removed.</p>` : html`<div class="actions">${actionButton(`${path}/remove`, 'Remove the role…', {}, { danger: true })}</div>`}`
      : ''
    return c.send(reply, status, consoleLayout(c.page(request), 'roles', `Role ${role.name}`, html`${notice(request.query.notice)}
<dl>
<dt>Description</dt><dd>${role.description ?? '—'}</dd>
<dt>Permissions</dt><dd>${role.permissions.length > 0 ? html`<code>${role.permissions.join(' ')}</code>` : 'None.'}</dd>
<dt>Built-in</dt><dd>${role.builtin ? 'yes' : 'no'}</dd>
<dt>Created</dt><dd>${iso(role.created_at)}</dd>
<dt>Changed</dt><dd>${iso(role.updated_at)}</dd>
</dl>
${edit}
<p><a href="${c.base}/events?type=role.updated">Changes to roles in the audit trail</a></p>`))
  }

  app.get<{ Querystring: { notice?: string } }>(`${c.base}/roles`, (request, reply) => listPage(request, reply, 200))

  app.post<{ Querystring: { notice?: string } }>(`${c.base}/roles`, async (request, reply) => {
    const form = c.form(request)
    const typed = { name: (form.name ?? '').trim().slice(0, 64), description: form.description ?? '', permissions: form.permissions ?? '' }
    const permissions = permissionsOf(typed.permissions)
    try {
      const role = await roles.create({ name: typed.name, description: typed.description, permissions }, c.context(request))
      return c.redirect(reply, `/roles/${role.name}`, 'saved')
    } catch (error) {
      const problems = problemsOf(error, permissions)
      if (!problems) throw error
      return listPage(request, reply, 400, problems, typed)
    }
  })

  app.get<{ Params: { name: string }; Querystring: { notice?: string } }>(`${c.base}/roles/:name`, (request, reply) => rolePage(request, reply, 200))

  app.post<{ Params: { name: string }; Querystring: { notice?: string } }>(`${c.base}/roles/:name`, async (request, reply) => {
    const form = c.form(request)
    const typed = { description: form.description ?? '', permissions: form.permissions ?? '' }
    const permissions = permissionsOf(typed.permissions)
    try {
      await roles.update(request.params.name, { description: typed.description, permissions }, c.context(request))
      return c.redirect(reply, `/roles/${request.params.name}`, 'saved')
    } catch (error) {
      if (error instanceof AppError && error.code === 'NOT_FOUND') return missing(request, reply)
      const problems = problemsOf(error, permissions)
      if (!problems) throw error
      return rolePage(request, reply, error instanceof AppError ? error.status : 400, problems, typed)
    }
  })

  app.post<{ Params: { name: string } }>(`${c.base}/roles/:name/remove`, async (request, reply) => {
    const role = await found(request.params.name)
    if (!role) return missing(request, reply)
    const path = `${c.base}/roles/${role.name}`
    const form = c.form(request)
    const force = form.force === 'yes'
    const ask = (status: number, what: Html, button: string, hidden: Record<string, string> = {}) =>
      c.send(reply, status, confirmPage(c.page(request), 'roles', `Remove the role ${role.name}?`, what, `${path}/remove`, button, path, hidden))
    if (role.builtin) {
      return c.send(reply, 400, consoleLayout(c.page(request), 'roles', `Role ${role.name}`, html`<p class="error" role="alert">A built-in role can be changed, not removed.</p>
<p><a href="${path}">Back to the role</a></p>`))
    }
    if (form.confirm !== 'yes') {
      return ask(200, html`<p>The role leaves the catalogue for good. If anyone holds it, you will be told, and asked again.</p>`, 'Remove the role', force ? { force: 'yes' } : {})
    }
    try {
      await roles.remove(role.name, force, c.context(request))
    } catch (error) {
      if (!(error instanceof AppError && error.code === 'LIMIT_EXCEEDED') || force) throw error
      // The service's 409: the role is held. Asked again, and only then taken from its holders.
      return ask(409, html`<p class="error" role="alert">The role is in use: held by ${heldBy(error.message)}.</p>
<p>Removing it anyway takes it from every user and membership holding it first (a membership left with no role stays, with none); their access tokens stop working and they are told (webhook user.roles_changed).</p>`, 'Remove anyway (force)', { force: 'yes' })
    }
    return c.redirect(reply, '/roles', 'removed')
  })
}

/** "N user(s) and M membership(s)", from the service's 409 message; the message itself otherwise. */
function heldBy(message: string): string {
  const match = /held by (\d+) user\(s\) and (\d+) membership\(s\)/.exec(message)
  return match ? `${match[1]} user(s) and ${match[2]} membership(s)` : message
}

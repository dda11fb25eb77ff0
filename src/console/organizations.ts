import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ORGANIZATION_NAME_MAX } from '../authz/org-schemas.ts'
import { AppError } from '../errors.ts'
import { html } from '../html.ts'
import { userNamed } from './events.ts'
import type { ConsoleContext } from './routes.ts'
import { consoleLayout, iso, notice, table } from './views.ts'

const PAGE_SIZE = 50

type Query = { cursor?: string; notice?: string }
type Problems = Record<string, string>

/** A page link's cursor: one plain string, bounded (a repeated parameter arrives as an array). */
const cursorOf = (value: unknown) => (typeof value === 'string' && value.length > 0 && value.length <= 512 ? value : undefined)

/**
 * Organisations (docs/console.md): every organisation, oldest first, 50 a page, keyset pages
 * (OrganizationService.listAll), and one organisation's page: its name, its members with their
 * roles, keyset pages (OrganizationService.inspect). What an operator may change here is what the
 * admin API lets them: make an organisation for an account (POST /admin/organizations,
 * OrganizationService.createByOperator), the account named by its address or its id. Renaming,
 * members' roles, removing members and deleting an organisation are its members' own acts (they need
 * a permission in it), so the console shows them and does not do them. A form the service refuses
 * is shown again with what is wrong.
 */
export function organizationRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { organizations, admin } = c.services

  async function listPage(request: FastifyRequest<{ Querystring: Query }>, reply: FastifyReply, status: number, problems: Problems = {}, typed: { name?: string; owner?: string } = {}) {
    const cursor = cursorOf(request.query.cursor)
    let page: Awaited<ReturnType<typeof organizations.listAll>>
    try {
      page = await organizations.listAll({ limit: PAGE_SIZE, ...(cursor ? { cursor } : {}) })
    } catch (error) {
      if (!(error instanceof AppError && error.code === 'VALIDATION_ERROR')) throw error
      return c.send(reply, 400, consoleLayout(c.page(request), 'organizations', 'Organisations', html`<p class="error" role="alert">This page link is not one the console made.</p>
<p><a href="${c.base}/organizations">The first page</a></p>`))
    }
    const off = organizations.mode === 'off'
    const field = (name: string) => (problems[name] ? html`<p class="error" id="${name}-error">${problems[name]}</p>` : '')
    const invalid = (name: string) => (problems[name] ? html` aria-invalid="true" aria-describedby="${name}-error"` : '')
    const create = c.page(request).operator.canWrite && !off
      ? html`<h2>New organisation</h2>
${problems.form ? html`<p class="error" role="alert">${problems.form}</p>` : ''}
<form method="post" action="${c.base}/organizations">
<div class="field"><label for="name">Name</label><input id="name" name="name" type="text" maxlength="${ORGANIZATION_NAME_MAX}" autocomplete="off" value="${typed.name ?? ''}"${invalid('name')}>${field('name')}</div>
<div class="field"><label for="owner">Owner (an address or a user id: an active account with a confirmed address)</label><input id="owner" name="owner" type="text" autocomplete="off" value="${typed.owner ?? ''}"${invalid('owner')}>${field('owner')}</div>
<button type="submit">Create the organisation</button>
</form>`
      : ''
    const next = page.next_cursor ? `${c.base}/organizations?${new URLSearchParams({ cursor: page.next_cursor })}` : null
    const rows = page.organizations.map((organization) => [
      html`<a href="${c.base}/organizations/${organization.id}">${organization.name}</a>`, organization.members, iso(organization.created_at), html`<code>${organization.id}</code>`,
    ])
    return c.send(reply, status, consoleLayout(c.page(request), 'organizations', 'Organisations', html`${notice(request.query.notice)}
${off ? html`<p class="muted">Organisations are turned off (ORGANIZATIONS=off): none can be made, and those listed are out of use.</p>` : ''}
${table('Organisations, oldest first', ['Name', 'Members', 'Created', 'Id'], rows, 'No organisation yet.')}
${next ? html`<p><a href="${next}">Next page</a></p>` : ''}
${create}`))
  }

  app.get<{ Querystring: Query }>(`${c.base}/organizations`, (request, reply) => listPage(request, reply, 200))

  app.post<{ Querystring: Query }>(`${c.base}/organizations`, async (request, reply) => {
    if (organizations.mode === 'off') throw new AppError('NOT_FOUND')
    const form = c.form(request)
    const typed = { name: (form.name ?? '').slice(0, 1024), owner: (form.owner ?? '').trim().slice(0, 254) }
    const problems: Problems = {}
    if (typed.name.trim() === '') problems.name = 'Give the organisation a name.'
    const owner = typed.owner === '' ? { problem: 'Name the account that will own it.' } : await userNamed(admin, typed.owner)
    if ('problem' in owner) problems.owner = owner.problem
    else if (!owner.exists) problems.owner = 'No account has this id.'
    if (Object.keys(problems).length > 0 || 'problem' in owner) return listPage(request, reply, 400, problems, typed)
    try {
      const created = await organizations.createByOperator(owner.id, typed.name, c.context(request))
      return c.redirect(reply, `/organizations/${created.id}`, 'saved')
    } catch (error) {
      if (!(error instanceof AppError)) throw error
      if (error.code === 'VALIDATION_ERROR' && error.details) {
        for (const detail of error.details) problems[detail.field === 'owner_user_id' ? 'owner' : detail.field === 'name' ? 'name' : 'form'] = `${detail.field === 'owner_user_id' ? 'The owner' : 'The name'} ${detail.message}.`
      } else if (error.code === 'NOT_FOUND') {
        problems.owner = 'No account has this id.'
      } else if (error.code === 'LIMIT_EXCEEDED') {
        problems.owner = error.message
      } else {
        throw error
      }
      return listPage(request, reply, 400, problems, typed)
    }
  })

  app.get<{ Params: { id: string }; Querystring: Query }>(`${c.base}/organizations/:id`, async (request, reply) => {
    const cursor = cursorOf(request.query.cursor)
    let view: Awaited<ReturnType<typeof organizations.inspect>>
    try {
      view = await organizations.inspect(request.params.id, { limit: PAGE_SIZE, ...(cursor ? { cursor } : {}) })
    } catch (error) {
      if (!(error instanceof AppError) || (error.code !== 'NOT_FOUND' && error.code !== 'VALIDATION_ERROR')) throw error
      const [status, text] = error.code === 'NOT_FOUND' ? [404, 'No organisation has this id: it may have been deleted.'] : [400, 'This page link is not one the console made.']
      return c.send(reply, status, consoleLayout(c.page(request), 'organizations', 'Organisation not found', html`<p class="error" role="alert">${text}</p>
<p><a href="${c.base}/organizations">Every organisation</a></p>`))
    }
    const { organization, members, member_count, next_cursor } = view
    const path = `${c.base}/organizations/${organization.id}`
    const next = next_cursor ? `${path}?${new URLSearchParams({ cursor: next_cursor })}` : null
    return c.send(reply, 200, consoleLayout(c.page(request), 'organizations', organization.name, html`${notice(request.query.notice)}
<dl>
<dt>Id</dt><dd><code>${organization.id}</code></dd>
<dt>Created</dt><dd>${iso(organization.created_at)}</dd>
<dt>Members</dt><dd>${member_count}</dd>
</dl>
<p class="muted">Its name, its members and their roles are changed by its owners and admins (the API's /auth/organizations routes).</p>
<h2>Members</h2>
${table('Members, by user id', ['Address', 'Name', 'Roles', 'Joined'], members.map((member) => [
  html`<a href="${c.base}/users/${member.user_id}">${member.email}</a>`, member.full_name, member.roles.join(', ') || null, iso(member.joined_at),
]), 'No member.')}
${next ? html`<p><a href="${next}">Next page</a></p>` : ''}`))
  })
}

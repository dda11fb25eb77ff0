import type { FastifyInstance } from 'fastify'
import { DISABLE_REASONS, type DisableReason } from '../accounts/service.ts'
import type { UserFilter } from '../accounts/store.ts'
import { AppError } from '../errors.ts'
import { html } from '../html.ts'
import type { ConsoleContext } from './routes.ts'
import { actionButton, confirmPage, consoleLayout, iso, notice, table } from './views.ts'

const STATUSES = ['active', 'unverified', 'disabled'] as const
const PAGE_SIZE = 50

type Query = { email?: string; status?: string; cursor?: string; notice?: string }

/**
 * Users (docs/console.md): the list (an address prefix, a status, keyset pages: the admin API's
 * listing, AdminService.listUsers) and one user's page with everything the admin API and the CLI
 * can say and do about them. A destructive action (disable, delete, reset the second factors, end
 * every session) posts once to be asked, and again with `confirm=yes` to be done.
 */
export function userRoutes(app: FastifyInstance, c: ConsoleContext): void {
  const { admin, lifecycle, organizations, roles } = c.services

  app.get<{ Querystring: Query }>(`${c.base}/users`, async (request, reply) => {
    const email = typeof request.query.email === 'string' ? request.query.email.slice(0, 254) : ''
    const status = STATUSES.includes(request.query.status as (typeof STATUSES)[number]) ? (request.query.status as UserFilter['status']) : undefined
    const { users, next_cursor } = await admin.listUsers({
      ...(email ? { email } : {}), ...(status ? { status } : {}), limit: PAGE_SIZE,
      ...(typeof request.query.cursor === 'string' ? { cursor: request.query.cursor } : {}),
    })
    const next = next_cursor ? `${c.base}/users?${new URLSearchParams({ ...(email ? { email } : {}), ...(status ? { status } : {}), cursor: next_cursor })}` : null
    const rows = users.map((user) => [
      html`<a href="${c.base}/users/${user.user_id}">${user.email}</a>`, user.full_name, user.status, user.email_verified ? 'yes' : 'no', iso(user.created_at), iso(user.last_login_at), user.active_sessions,
    ])
    return c.send(reply, 200, consoleLayout(c.page(request), 'users', 'Users', html`${notice(request.query.notice)}
<form method="get" action="${c.base}/users" class="filters" role="search">
<div class="field"><label for="email">Address starts with</label><input id="email" name="email" type="text" autocomplete="off" value="${email}"></div>
<div class="field"><label for="status">Status</label><select id="status" name="status">
<option value="">Any</option>
${STATUSES.map((value) => html`<option value="${value}"${value === status ? html` selected` : ''}>${value}</option>\n`)}</select></div>
<button type="submit">Search</button>
</form>
${table(email ? 'Users, in address order' : 'Users, oldest first', ['Address', 'Name', 'Status', 'Verified', 'Created', 'Last sign-in', 'Sessions'], rows, 'No user matches.')}
${next ? html`<p><a href="${next}">Next page</a></p>` : ''}`))
  })

  app.get<{ Params: { id: string }; Querystring: Query }>(`${c.base}/users/:id`, async (request, reply) => {
    const id = request.params.id
    const user = await admin.getUser(id)
    const [sessionList, memberships, events, held, catalogue] = await Promise.all([
      lifecycle.listSessions({ userId: id, sessionId: '' }),
      organizations.membershipsOf(id),
      admin.events({ user_id: id, limit: 20 }),
      roles.rolesOf(id),
      roles.list(),
    ])
    const path = `${c.base}/users/${id}`
    const write = c.page(request).operator.canWrite
    const actions = write
      ? html`<div class="actions">
${user.status === 'disabled' ? actionButton(`${path}/enable`, 'Enable') : actionButton(`${path}/disable`, 'Disable…', {}, { danger: true })}
${user.email_verified ? '' : actionButton(`${path}/verify`, 'Mark verified')}
${actionButton(`${path}/reset-mail`, 'Send a password reset mail')}
${actionButton(`${path}/revoke-sessions`, 'End every session…', {}, { danger: true })}
${user.mfa.enabled ? actionButton(`${path}/mfa-reset`, 'Reset second factors…', {}, { danger: true }) : ''}
${actionButton(`${path}/delete`, 'Delete…', {}, { danger: true })}
</div>`
      : ''
    const roleForm = write
      ? html`<form method="post" action="${path}/roles">
<fieldset><legend>Global roles</legend>
${catalogue.map((role) => html`<div><input type="checkbox" id="role-${role.name}" name="role:${role.name}" value="on"${held.includes(role.name) ? html` checked` : ''}> <label for="role-${role.name}" class="inline-label">${role.name}</label> <span class="muted">${role.permissions.join(' ')}</span></div>\n`)}</fieldset>
<button type="submit">Save roles</button>
</form>`
      : html`<p>${held.length > 0 ? held.join(', ') : 'None.'}</p>`
    const metadata = JSON.stringify(user.app_metadata ?? {}, null, 2)
    const metadataForm = write
      ? html`<form method="post" action="${path}/app-metadata">
<div class="field"><label for="app_metadata">app_metadata (a JSON object, carried in the user's access tokens; empty clears it)</label>
<textarea id="app_metadata" name="app_metadata">${user.app_metadata === null ? '' : metadata}</textarea></div>
<button type="submit">Save app_metadata</button>
</form>`
      : html`<pre><code>${user.app_metadata === null ? 'None.' : metadata}</code></pre>`
    return c.send(reply, 200, consoleLayout(c.page(request), 'users', user.email, html`${notice(request.query.notice)}
<dl>
<dt>Name</dt><dd>${user.full_name}</dd>
<dt>User id</dt><dd><code>${user.user_id}</code></dd>
<dt>Status</dt><dd>${user.status}${user.disabled_reason ? ` (${user.disabled_reason})` : ''}</dd>
<dt>Address verified</dt><dd>${user.email_verified ? 'yes' : 'no'}</dd>
<dt>Created</dt><dd>${iso(user.created_at)}</dd>
<dt>Last sign-in</dt><dd>${iso(user.last_login_at)}</dd>
</dl>
${actions}
<h2>Sessions</h2>
${table('Live sessions, newest first', ['Started', 'Last used', 'Device', 'Through', ''], sessionList.map((session) => [
  iso(session.created_at), iso(session.last_used_at), session.user_agent, session.client,
  write ? actionButton(`${path}/sessions/${session.id}/revoke`, 'End', {}, { inline: true }) : '',
]), 'No live session.')}
<h2>Second factors</h2>
${table('Confirmed second factors', ['Kind', 'Name', 'Added', 'Last used'], user.mfa.factors.map((factor) => [factor.type, factor.name, iso(factor.created_at), iso(factor.last_used_at)]), 'None.')}
<h2>Provider identities</h2>
${table('Linked identities', ['Provider', 'Address there', 'Linked'], user.identities.map((identity) => [identity.provider, identity.email, iso(identity.created_at)]), 'None.')}
<h2>Organisations</h2>
${table('Memberships', ['Organisation', 'Roles', 'Joined'], memberships.map((membership) => [html`<a href="${c.base}/organizations/${membership.id}">${membership.name}</a>`, membership.roles.join(', '), iso(membership.joined_at)]), 'None.')}
<h2>Roles</h2>
${roleForm}
<h2>app_metadata</h2>
${metadataForm}
<h2>Approved apps</h2>
${table('Apps the user approved', ['App', 'Scopes', 'Approved', 'Last used'], user.apps.map((approved) => [approved.name, approved.scopes.join(' '), iso(approved.granted_at), iso(approved.last_used_at)]), 'None.')}
<h2>Audit events</h2>
${table('The newest 20', ['When', 'What', 'Why', 'By', 'From'], events.events.map((event) => [iso(event.at), event.type, event.reason, event.actor, event.ip]), 'None.')}
<p><a href="${c.base}/events?user_id=${user.user_id}">Every event of this user</a></p>`))
  })

  /** A destructive action: asked first on a page of its own, done when posted again with confirm=yes. */
  const confirmed = (form: Record<string, string>) => form.confirm === 'yes'

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/disable`, async (request, reply) => {
    const id = request.params.id
    const form = c.form(request)
    const user = await c.services.admin.getUser(id)
    if (!confirmed(form)) {
      return c.send(reply, 200, confirmPage(c.page(request), 'users', `Disable ${user.email}?`, html`<p>Every session ends at once and the account cannot sign in until it is enabled again.</p>`, `${c.base}/users/${id}/disable`, 'Disable', `${c.base}/users/${id}`, {},
        html`<div class="field"><label for="reason">Reason</label><select id="reason" name="reason">${DISABLE_REASONS.map((reason) => html`<option value="${reason}">${reason}</option>`)}</select></div>`))
    }
    const reason = DISABLE_REASONS.includes(form.reason as DisableReason) ? (form.reason as DisableReason) : 'suspended'
    await admin.disable(id, reason, c.context(request))
    return c.redirect(reply, `/users/${id}`, 'disabled')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/enable`, async (request, reply) => {
    await admin.enable(request.params.id, c.context(request))
    return c.redirect(reply, `/users/${request.params.id}`, 'enabled')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/verify`, async (request, reply) => {
    await admin.verify(request.params.id, c.context(request))
    return c.redirect(reply, `/users/${request.params.id}`, 'verified')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/reset-mail`, async (request, reply) => {
    const user = await admin.getUser(request.params.id)
    lifecycle.forgotPassword(user.email, c.context(request))
    return c.redirect(reply, `/users/${request.params.id}`, 'reset_sent')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/revoke-sessions`, async (request, reply) => {
    const id = request.params.id
    const user = await admin.getUser(id)
    if (!confirmed(c.form(request))) {
      return c.send(reply, 200, confirmPage(c.page(request), 'users', `End every session of ${user.email}?`, html`<p>The user is signed out everywhere, and the apps they approved lose their tokens. They can sign in again.</p>`, `${c.base}/users/${id}/revoke-sessions`, 'End every session', `${c.base}/users/${id}`))
    }
    await admin.revokeSessions(id, c.context(request))
    return c.redirect(reply, `/users/${id}`, 'sessions_revoked')
  })

  app.post<{ Params: { id: string; session: string } }>(`${c.base}/users/:id/sessions/:session/revoke`, async (request, reply) => {
    const { id, session } = request.params
    await admin.getUser(id)
    await lifecycle.revokeSession({ userId: id, sessionId: '' }, session, c.context(request))
    return c.redirect(reply, `/users/${id}`, 'session_revoked')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/mfa-reset`, async (request, reply) => {
    const id = request.params.id
    const user = await admin.getUser(id)
    if (!confirmed(c.form(request))) {
      return c.send(reply, 200, confirmPage(c.page(request), 'users', `Reset the second factors of ${user.email}?`, html`<p>Every authenticator, passkey used as a second factor and recovery code is removed, and every session ends. The user is told by mail and sets up a new factor after signing in with their password.</p>`, `${c.base}/users/${id}/mfa-reset`, 'Reset second factors', `${c.base}/users/${id}`))
    }
    await admin.resetMfa(id, c.context(request))
    return c.redirect(reply, `/users/${id}`, 'mfa_reset')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/delete`, async (request, reply) => {
    const id = request.params.id
    const user = await admin.getUser(id)
    if (!confirmed(c.form(request))) {
      return c.send(reply, 200, confirmPage(c.page(request), 'users', `Delete ${user.email}?`, html`<p>The account and everything stored for it are deleted for good: sessions, second factors, identities, watchlists, memberships. Its audit events stay, without the address. This cannot be undone.</p>`, `${c.base}/users/${id}/delete`, 'Delete the account', `${c.base}/users/${id}`))
    }
    await admin.deleteUser(id, c.context(request))
    return c.redirect(reply, '/users', 'deleted')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/roles`, async (request, reply) => {
    // One checkbox a role (`role:NAME`): a form field repeated under one name would keep only its first value.
    const wanted = Object.keys(c.form(request)).filter((name) => name.startsWith('role:')).map((name) => name.slice('role:'.length))
    await roles.setUserRoles(request.params.id, wanted, c.context(request))
    return c.redirect(reply, `/users/${request.params.id}`, 'roles_saved')
  })

  app.post<{ Params: { id: string } }>(`${c.base}/users/:id/app-metadata`, async (request, reply) => {
    const text = (c.form(request).app_metadata ?? '').trim()
    let value: unknown = null
    if (text !== '') {
      try {
        value = JSON.parse(text)
      } catch {
        throw new AppError('VALIDATION_ERROR', { details: [{ field: 'app_metadata', message: 'must be JSON' }] })
      }
    }
    await roles.setAppMetadata(request.params.id, value, c.context(request))
    return c.redirect(reply, `/users/${request.params.id}`, 'metadata_saved')
  })
}

import assert from 'node:assert/strict'
import bcrypt from 'bcryptjs'
import { createHash, randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, test } from 'node:test'
import { CompiledQuery, sql } from 'kysely'
import pg from 'pg'
import { migrate, openDatabase } from '../../src/db/index.ts'
import { createStorage, ENGINES } from '../helpers/db.ts'
import { mailText, tokenFromMail } from '../helpers/mail.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { oathtool } from '../helpers/totp.ts'
import { SoftAuthenticator } from '../helpers/webauthn.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'

/** The service's PUBLIC_URL here (it is reached with inject; the identity provider sends the browser back to it). */
const PLANS_URL = 'http://localhost:4000'

/** The tables that grow with users: a statement may reach them only through an index range. */
const GROWING = new Set(['users', 'sessions', 'one_time_tokens', 'audit_events', 'watchlists', 'mail_outbox', 'change_feed', 'mfa_factors', 'mfa_recovery_codes', 'mfa_challenges', 'op_records', 'op_logout_deliveries', 'email_sign_ins', 'login_codes', 'email_changes', 'webhook_deliveries', 'webhook_sequences', 'user_roles', 'organizations', 'memberships', 'invitations'])

/**
 * Keys whose leading column has a handful of values (op_records' key is (model, id_hash), and a
 * model is one of the library's eight or so): a range on that column alone walks every row of a
 * model, a scan in all but name.
 */
const FEW_VALUES = [
  { sqlite: /USING (COVERING )?INDEX sqlite_autoindex_op_records_1 \(model=\?\)$/, postgres: { index: 'op_records_pkey', cond: /^\(model = [^()]*\)$/ }, what: 'op_records by model alone' },
]

/**
 * Statements allowed to walk a growing table, each with why. A membership's roles are one
 * space-separated column, so finding everyone who holds a role (a role's permissions changed or
 * the role removed: an operator's action, never a user's request) walks the memberships. Known
 * debt (docs/authorization.md): a table of (membership, role) rows would make it an index range.
 */
const ALLOWED_SCANS: { pattern: RegExp; why: string }[] = [
  { pattern: /\(' ' \|\| "memberships"\."roles" \|\| ' '\) like/, why: 'the holders of a role, on an operator\'s change of the catalogue' },
  { pattern: /users_imported_hash_idx.*limit/, why: 'one entry of a partial index that holds only the accounts still on an imported hash (src/imports/timing.ts), once a minute' },
]

/**
 * Drives every operation of the published API (checked against /openapi.json, so a new route that
 * this flow forgets fails the test), the pages, and every background job, so that the service
 * prepares every statement it has.
 */
async function exerciseEverything(t: TestApp, provider: TestProvider): Promise<void> {
  const called = new Set<string>()
  const call = async (method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', template: string, options: { params?: Record<string, string>; token?: string; body?: unknown; query?: string; status?: number } = {}) => {
    let path = template
    for (const [name, value] of Object.entries(options.params ?? {})) path = path.replace(`{${name}}`, encodeURIComponent(value))
    const url = `${path}${options.query ? `?${options.query}` : ''}`
    const response = await t.app.inject({
      method,
      url,
      headers: { ...(options.token ? { authorization: `Bearer ${options.token}` } : {}), ...(options.body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(options.body === undefined ? {} : { payload: JSON.stringify(options.body) }),
    })
    assert.equal(response.statusCode, options.status ?? 200, `${method} ${url}: ${response.body}`)
    called.add(`${method.toLowerCase()} ${template}`)
    return (response.headers['content-type']?.toString().startsWith('application/json') ? response.json() : { data: {} }) as { data: Record<string, any> }
  }
  const api = t.base

  // Webhooks first, so that every change below writes its event: one endpoint that takes them all
  // (a receiver that refuses at first, then accepts), one that never answers well (it is disabled).
  let receiverStatus = 500
  const receiver = createServer((request, response) => {
    request.resume()
    request.on('end', () => response.writeHead(request.url === '/down' ? 503 : receiverStatus).end())
  })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  // Closed at the end of the flow; unreferenced so that a failure part way does not keep the test's process alive.
  receiver.unref()
  const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`
  const { key: hooksKey } = await t.app.services.apiKeys.create({ name: 'plans-webhooks', scopes: ['webhooks:read', 'webhooks:write'], expiresAt: null })
  const hook = (await call('POST', `${api}/admin/webhooks`, { token: hooksKey, status: 201, body: { url: `${receiverUrl}/hook`, events: ['*'] } })).data.webhook
  const down = (await call('POST', `${api}/admin/webhooks`, { token: hooksKey, status: 201, body: { url: `${receiverUrl}/down`, events: ['user.created'] } })).data.webhook

  // A user's whole life through the API.
  const email = uniqueEmail('plans')
  await call('POST', `${api}/auth/register`, { body: { email, password: PASSWORD, full_name: 'Plan' }, status: 201 })
  await call('POST', `${api}/auth/resend-verification`, { body: { email }, status: 202 })
  await t.app.services.background.drain()
  await t.mail.next(email)
  // The resent link retired the first one.
  const verifyToken = tokenFromMail(await t.mail.next(email))
  assert.equal((await t.app.inject({ method: 'GET', url: `/verify-email?token=${verifyToken}` })).statusCode, 200)
  await call('POST', `${api}/auth/verify-email`, { body: { token: verifyToken } })
  await call('POST', `${api}/auth/login`, { body: { email, password: 'not the password' }, status: 401 })
  const login = (await call('POST', `${api}/auth/login`, { body: { email, password: PASSWORD } })).data
  const token = login.access_token as string
  await call('POST', `${api}/auth/refresh`, { body: { refresh_token: login.refresh_token } })
  await call('GET', `${api}/auth/me`, { token })
  const other = (await t.post('/auth/login', { email, password: PASSWORD })).json().data
  const sessions = (await call('GET', `${api}/auth/sessions`, { token })).data.sessions as { id: string; current: boolean }[]
  await call('DELETE', `${api}/auth/sessions/{id}`, { params: { id: sessions.find((s) => !s.current)!.id }, token })
  await call('POST', `${api}/auth/logout`, { body: { refresh_token: other.refresh_token } })
  const list = (await call('POST', `${api}/watchlists`, { token, body: { name: 'Plans', symbols: ['AAPL'] }, status: 201 })).data.watchlist
  await call('POST', `${api}/watchlists`, { token, body: { name: 'More' }, status: 201 })
  const page = (await call('GET', `${api}/watchlists`, { token, query: 'limit=1' })).data
  await call('GET', `${api}/watchlists`, { token, query: `limit=1&cursor=${encodeURIComponent(page.next_cursor)}` })
  await call('GET', `${api}/watchlists/{id}`, { params: { id: list.id }, token })
  await call('PATCH', `${api}/watchlists/{id}`, { params: { id: list.id }, token, body: { name: 'Renamed' } })
  await call('POST', `${api}/watchlists/{id}/symbols`, { params: { id: list.id }, token, body: { symbol: 'MSFT' } })
  await call('DELETE', `${api}/watchlists/{id}/symbols/{symbol}`, { params: { id: list.id, symbol: 'MSFT' }, token })
  await call('DELETE', `${api}/watchlists/{id}`, { params: { id: list.id }, token })
  await call('POST', `${api}/auth/forgot-password`, { body: { email }, status: 202 })
  await t.app.services.background.drain()
  const resetToken = tokenFromMail(await t.mail.next(email))
  assert.equal((await t.app.inject({ method: 'GET', url: `/reset-password?token=${resetToken}` })).statusCode, 200)
  await call('POST', `${api}/auth/reset-password`, { body: { token: resetToken, password: 'a second passphrase' } })
  const again = (await t.post('/auth/login', { email, password: 'a second passphrase' })).json().data
  await call('POST', `${api}/auth/change-password`, { token: again.access_token, body: { current_password: 'a second passphrase', new_password: PASSWORD } })
  await call('PATCH', `${api}/auth/me`, { token: again.access_token, body: { full_name: 'Plan B' } })
  const moved = uniqueEmail('plans-moved')
  await call('POST', `${api}/auth/me/email`, { token: again.access_token, body: { new_email: moved, password: PASSWORD }, status: 202 })
  const changeToken = tokenFromMail(await t.mail.next(moved))
  assert.equal((await t.app.inject({ method: 'GET', url: `/confirm-email-change?token=${changeToken}` })).statusCode, 200)
  assert.equal((await t.app.inject({ method: 'POST', url: '/confirm-email-change', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `token=${changeToken}` })).statusCode, 200)
  await call('GET', `${api}/auth/me/export`, { token: again.access_token })
  await call('POST', `${api}/auth/logout-all`, { token: again.access_token })
  const leaving = await registerVerifyLogin(t, uniqueEmail('leaving'))
  await call('DELETE', `${api}/auth/me`, { token: leaving.access_token, body: { password: PASSWORD } })

  // Second factors: enrolment, the login's second step, step-up, recovery codes, removal.
  const second = await registerVerifyLogin(t, uniqueEmail('plans-mfa'))
  const enrolment = (await call('POST', `${api}/auth/mfa/totp`, { token: second.access_token, body: {}, status: 201 })).data
  await call('POST', `${api}/auth/mfa/totp/{id}/confirm`, { params: { id: enrolment.factor_id }, token: second.access_token, body: { code: oathtool(enrolment.secret, t.clock.now()) } })
  await call('GET', `${api}/auth/mfa`, { token: second.access_token })
  const mfaLogin = async () => (await t.post('/auth/login', { email: second.email, password: PASSWORD })).json().error.mfa.mfa_token as string
  t.clock.advance(30)
  const verified = (await call('POST', `${api}/auth/mfa/verify`, { body: { mfa_token: await mfaLogin(), method: 'totp', code: oathtool(enrolment.secret, t.clock.now()) } })).data
  t.clock.advance(30)
  await call('POST', `${api}/auth/mfa/step-up`, { token: verified.access_token, body: { method: 'totp', code: oathtool(enrolment.secret, t.clock.now()) } })
  const codes = (await call('POST', `${api}/auth/mfa/recovery-codes`, { token: verified.access_token })).data.recovery_codes as string[]
  await call('POST', `${api}/auth/mfa/verify`, { body: { mfa_token: await mfaLogin(), method: 'recovery_code', code: codes[0] } })
  // Passkeys: registration, rename, the login's second step, step-up, a passwordless login.
  const device = new SoftAuthenticator()
  const origin = t.config.webauthn.origins[0]!
  const creation = (await call('POST', `${api}/auth/passkeys/register/options`, { token: verified.access_token })).data.options
  const passkey = (await call('POST', `${api}/auth/passkeys/register`, { token: verified.access_token, body: { credential: device.register(creation, { origin }) }, status: 201 })).data.factor
  await call('PATCH', `${api}/auth/mfa/factors/{id}`, { params: { id: passkey.id }, token: verified.access_token, body: { name: 'Plans key' } })
  const mfaToken = await mfaLogin()
  const secondStep = (await call('POST', `${api}/auth/mfa/passkey/options`, { body: { mfa_token: mfaToken } })).data.options
  await call('POST', `${api}/auth/mfa/verify`, { body: { mfa_token: mfaToken, method: 'passkey', credential: device.authenticate(secondStep, { origin }) } })
  const stepUp = (await call('POST', `${api}/auth/mfa/passkey/options`, { token: verified.access_token, body: {} })).data.options
  await call('POST', `${api}/auth/mfa/step-up`, { token: verified.access_token, body: { method: 'passkey', credential: device.authenticate(stepUp, { origin }) } })
  const passwordless = (await call('POST', `${api}/auth/passkeys/login/options`)).data
  await call('POST', `${api}/auth/passkeys/login`, { body: { challenge_id: passwordless.challenge_id, credential: device.authenticate(passwordless.options, { origin }) } })
  await call('DELETE', `${api}/auth/mfa/factors/{id}`, { params: { id: enrolment.factor_id }, token: verified.access_token })

  // An identity provider (a real one on loopback): a sign-in that makes an account, the exchange,
  // a link from a signed-in account, the list and an unlink.
  const federated = { sub: 'plans-sub', email: uniqueEmail('plans-oidc'), email_verified: true as const, name: 'Plans' }
  provider.addAccount(federated)
  await call('GET', `${api}/auth/oidc/providers`)
  const browserHop = async (location: string, cookie: string) => {
    const back = new URL(await provider.signIn(location, federated.sub))
    const response = await t.app.inject({ method: 'GET', url: `${back.pathname}${back.search}`, headers: { cookie: `portcullis_oidc=${cookie}` } })
    assert.equal(response.statusCode, 302, response.body)
    called.add(`get ${api}/auth/oidc/{name}/callback`)
    return new URL(String(response.headers.location))
  }
  const cookieOf = (set: unknown) => /portcullis_oidc=([^;]+)/.exec(String(set))![1]!
  // The application's PKCE pair for the login code (docs/oidc.md: the exchange must carry its proof).
  const verifier = randomBytes(32).toString('base64url')
  const challenge = createHash('sha256').update(verifier).digest('base64url')
  const started = await t.app.inject({ method: 'GET', url: `${api}/auth/oidc/test/start?redirect_to=${encodeURIComponent(`${PLANS_URL}/back`)}&code_challenge=${challenge}&code_challenge_method=S256` })
  assert.equal(started.statusCode, 302, started.body)
  called.add(`get ${api}/auth/oidc/{name}/start`)
  const returned = await browserHop(String(started.headers.location), cookieOf(started.headers['set-cookie']))
  const fedToken = (await call('POST', `${api}/auth/oidc/exchange`, { body: { code: returned.searchParams.get('code'), code_verifier: verifier } })).data.access_token as string
  await call('GET', `${api}/auth/me/identities`, { token: fedToken })
  const linker = await registerVerifyLogin(t, uniqueEmail('plans-linker'))
  const linking = await t.app.inject({ method: 'POST', url: `${api}/auth/oidc/test/link`, headers: { authorization: `Bearer ${linker.access_token}`, 'content-type': 'application/json' }, payload: JSON.stringify({ redirect_to: `${PLANS_URL}/settings` }) })
  called.add(`post ${api}/auth/oidc/{name}/link`)
  federated.sub = 'plans-sub-2'
  provider.addAccount(federated)
  assert.equal((await browserHop(linking.json().data.authorization_url, cookieOf(linking.headers['set-cookie']))).searchParams.get('linked'), 'test')
  const linked = (await call('GET', `${api}/auth/me/identities`, { token: linker.access_token })).data.identities as { id: string }[]
  await call('DELETE', `${api}/auth/me/identities/{id}`, { params: { id: linked[0]!.id }, token: linker.access_token })

  // The e-mailed sign-in: start, the code, the link's page and its login code's exchange.
  const mailed = await registerVerifyLogin(t, uniqueEmail('plans-mailed'))
  const startMailed = async () => {
    const answer = await t.app.inject({ method: 'POST', url: `${api}/auth/email/start`, headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ email: mailed.email, redirect_to: `${PLANS_URL}/back` }) })
    assert.equal(answer.statusCode, 202, answer.body)
    called.add(`post ${api}/auth/email/start`)
    await t.app.services.background.drain()
    let text = mailText(await t.mail.next(mailed.email))
    while (!text.includes('/sign-in/email?token=')) text = mailText(await t.mail.next(mailed.email))
    return { cookie: /portcullis_email=([^;]+)/.exec(String(answer.headers['set-cookie']))![1]!, code: /^(\d{6})$/m.exec(text)![1]!, token: /token=([A-Za-z0-9_-]+)/.exec(text)![1]! }
  }
  const typed = await startMailed()
  await call('POST', `${api}/auth/email/verify`, { body: { email: mailed.email, code: typed.code } })
  const byLink = await startMailed()
  assert.equal((await t.app.inject({ method: 'GET', url: `/sign-in/email?token=${byLink.token}` })).statusCode, 200)
  const pressed = await t.app.inject({ method: 'POST', url: '/sign-in/email', headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin', cookie: `portcullis_email=${byLink.cookie}` }, payload: `token=${byLink.token}` })
  assert.equal(pressed.statusCode, 303, pressed.body)
  const exchanged = await t.app.inject({ method: 'POST', url: `${api}/auth/email/exchange`, headers: { 'content-type': 'application/json', cookie: `portcullis_email=${byLink.cookie}` }, payload: JSON.stringify({ code: new URL(String(pressed.headers.location)).searchParams.get('code') }) })
  assert.equal(exchanged.statusCode, 200, exchanged.body)
  called.add(`post ${api}/auth/email/exchange`)

  // Roles, organisations, their invitations (the API and the link's page) and watchlists, an
  // organisation chosen at refresh and login, and the deletions that release memberships.
  const { key: rolesKey } = await t.app.services.apiKeys.create({ name: 'plans-roles', scopes: ['roles:read', 'roles:write', 'users:read', 'users:write'], expiresAt: null })
  await call('POST', `${api}/admin/roles`, { token: rolesKey, status: 201, body: { name: 'plans-analyst', description: 'Plans', permissions: ['reports:read'] } })
  await call('GET', `${api}/admin/roles`, { token: rolesKey })
  await call('GET', `${api}/admin/roles/{name}`, { params: { name: 'plans-analyst' }, token: rolesKey })
  const owner = await registerVerifyLogin(t, uniqueEmail('plans-owner'))
  const invited = await registerVerifyLogin(t, uniqueEmail('plans-invited'))
  const joiner = await registerVerifyLogin(t, uniqueEmail('plans-joiner'))
  // Every change to a user's memberships or roles makes their older access tokens answer TOKEN_EXPIRED: they sign in again.
  const signIn = async (who: { email: string }) => (await t.post('/auth/login', { email: who.email, password: PASSWORD })).json().data as { access_token: string; refresh_token: string }
  const org = (await call('POST', `${api}/auth/organizations`, { token: owner.access_token, status: 201, body: { name: 'Plans org' } })).data.organization
  Object.assign(owner, await signIn(owner))
  await call('GET', `${api}/auth/organizations`, { token: owner.access_token })
  await call('GET', `${api}/auth/organizations/{id}`, { params: { id: org.id }, token: owner.access_token })
  await call('PATCH', `${api}/auth/organizations/{id}`, { params: { id: org.id }, token: owner.access_token, body: { name: 'Plans org 2' } })
  const invite = async (to: string, roles: string[]) => {
    const invitation = (await call('POST', `${api}/auth/organizations/{id}/invitations`, { params: { id: org.id }, token: owner.access_token, status: 201, body: { email: to, roles } })).data.invitation
    return { id: invitation.id as string, token: tokenFromMail(await t.mail.next(to)) }
  }
  await call('POST', `${api}/auth/invitations/accept`, { token: invited.access_token, body: { token: (await invite(invited.email, ['member'])).token } })
  Object.assign(invited, await signIn(invited))
  const byPage = await invite(joiner.email, ['admin'])
  assert.equal((await t.app.inject({ method: 'GET', url: `/accept-invitation?token=${byPage.token}` })).statusCode, 200)
  const accepted = await t.app.inject({ method: 'POST', url: '/accept-invitation', headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' }, payload: `token=${byPage.token}` })
  assert.equal(accepted.statusCode, 200, accepted.body)
  const withdrawn = await invite(uniqueEmail('plans-nobody'), ['member'])
  await call('GET', `${api}/auth/organizations/{id}/invitations`, { params: { id: org.id }, token: owner.access_token })
  await call('DELETE', `${api}/auth/organizations/{id}/invitations/{invitation_id}`, { params: { id: org.id, invitation_id: withdrawn.id }, token: owner.access_token })
  const members = (await call('GET', `${api}/auth/organizations/{id}/members`, { params: { id: org.id }, token: owner.access_token, query: 'limit=1' })).data
  await call('GET', `${api}/auth/organizations/{id}/members`, { params: { id: org.id }, token: owner.access_token, query: `limit=1&cursor=${encodeURIComponent(members.next_cursor)}` })
  // The operators' console's own reads and writes of organisations (src/console/organizations.ts
  // calls these; no API route does): every organisation a page at a time, one organisation's members.
  const organizations = t.app.services.organizations
  // A user of their own: founding changes the owner's claims (their older tokens answer TOKEN_EXPIRED).
  const founder = await registerVerifyLogin(t, uniqueEmail('plans-founder'))
  await organizations.createByOperator(founder.userId, 'Plans org by an operator', { ip: null, userAgent: null, requestId: null, actor: 'cli' })
  const everyOrg = await organizations.listAll({ limit: 1 })
  assert.ok(everyOrg.next_cursor, 'a second page of organisations')
  await organizations.listAll({ limit: 1, cursor: everyOrg.next_cursor })
  const inspected = await organizations.inspect(org.id, { limit: 1 })
  if (inspected.next_cursor) await organizations.inspect(org.id, { limit: 1, cursor: inspected.next_cursor })
  await organizations.membershipsOf(founder.userId)
  const shared = (await call('POST', `${api}/watchlists`, { token: owner.access_token, status: 201, body: { name: 'Team', symbols: ['AAPL'], organization_id: org.id } })).data.watchlist
  await call('POST', `${api}/watchlists`, { token: owner.access_token, status: 201, body: { name: 'Team 2', organization_id: org.id } })
  const teamPage = (await call('GET', `${api}/watchlists`, { token: owner.access_token, query: `limit=1&organization_id=${org.id}` })).data
  await call('GET', `${api}/watchlists`, { token: owner.access_token, query: `limit=1&organization_id=${org.id}&cursor=${encodeURIComponent(teamPage.next_cursor)}` })
  await call('GET', `${api}/watchlists/{id}`, { params: { id: shared.id }, token: invited.access_token })
  await call('PATCH', `${api}/watchlists/{id}`, { params: { id: shared.id }, token: owner.access_token, body: { name: 'Team renamed' } })
  await call('POST', `${api}/watchlists/{id}/symbols`, { params: { id: shared.id }, token: owner.access_token, body: { symbol: 'MSFT' } })
  await call('DELETE', `${api}/watchlists/{id}/symbols/{symbol}`, { params: { id: shared.id, symbol: 'MSFT' }, token: owner.access_token })
  await call('DELETE', `${api}/watchlists/{id}`, { params: { id: shared.id }, token: owner.access_token })
  const inOrg = (await call('POST', `${api}/auth/refresh`, { body: { refresh_token: owner.refresh_token, organization_id: org.id } })).data
  await call('GET', `${api}/watchlists`, { token: inOrg.access_token, query: `organization_id=${org.id}` })
  await call('POST', `${api}/auth/login`, { body: { email: owner.email, password: PASSWORD, organization_id: org.id } })
  await call('POST', `${api}/auth/refresh`, { body: { refresh_token: owner.refresh_token, organization_id: null } })
  await call('PATCH', `${api}/auth/me`, { token: owner.access_token, body: { user_metadata: { theme: 'dark' } } })
  await call('PUT', `${api}/auth/organizations/{id}/members/{user_id}`, { params: { id: org.id, user_id: invited.userId }, token: owner.access_token, body: { roles: ['member', 'plans-analyst'] } })
  await call('PATCH', `${api}/admin/roles/{name}`, { params: { name: 'plans-analyst' }, token: rolesKey, body: { permissions: ['reports:read', 'reports:export'] } })
  await call('PUT', `${api}/admin/users/{id}/roles`, { params: { id: owner.userId }, token: rolesKey, body: { roles: ['plans-analyst', 'viewer'] } })
  await call('PATCH', `${api}/admin/users/{id}`, { params: { id: owner.userId }, token: rolesKey, body: { app_metadata: { plan: 'pro' } } })
  const ownerAgain = await signIn(owner)
  await call('DELETE', `${api}/auth/organizations/{id}/members/{user_id}`, { params: { id: org.id, user_id: invited.userId }, token: ownerAgain.access_token })
  // A resource registered, read, changed and removed (its lookup is exercised by every provider flow).
  const { key: resourcesKey } = await t.app.services.apiKeys.create({ name: 'plans-resources', scopes: ['clients:read', 'clients:write'], expiresAt: null })
  const resource = await call('POST', `${api}/admin/resources`, { token: resourcesKey, status: 201, body: { uri: 'https://plans.example.com/mcp', name: 'Plans MCP', scopes: [{ name: 'tools:read', description: 'Read' }] } })
  const resourceId = resource.data.resource.id as string
  await call('GET', `${api}/admin/resources`, { token: resourcesKey })
  await call('GET', `${api}/admin/resources/{id}`, { params: { id: resourceId }, token: resourcesKey })
  await call('PATCH', `${api}/admin/resources/{id}`, { params: { id: resourceId }, token: resourcesKey, body: { name: 'Plans MCP server' } })
  await call('DELETE', `${api}/admin/resources/{id}`, { params: { id: resourceId }, token: resourcesKey })
  // Moving in: an import with roles, app_metadata, a TOTP secret and an identity; the first sign-in rehashes.
  const movedIn = uniqueEmail('plans-moved-in')
  await call('POST', `${api}/admin/users/import`, {
    token: rolesKey,
    body: { users: [
      { email: movedIn, email_verified: true, password_hash: bcrypt.hashSync('a moved password', 4), roles: ['plans-analyst'], app_metadata: { plan: 'moved' } },
      { email: uniqueEmail('plans-moved-factor'), email_verified: true, totp_secret: 'JBSWY3DPEHPK3PXPJBSWY3DP', identities: [{ provider: 'test', subject: `plans-moved-${Date.now()}` }] },
    ] },
  })
  await t.app.services.importedHashes.refresh()
  assert.equal((await t.post('/auth/login', { email: movedIn, password: 'a moved password' })).statusCode, 200)
  await call('DELETE', `${api}/admin/roles/{name}`, { params: { name: 'plans-analyst' }, token: rolesKey, status: 409 })
  await call('DELETE', `${api}/admin/roles/{name}`, { params: { name: 'plans-analyst' }, token: rolesKey, query: 'force=true' })
  await call('POST', `${api}/admin/organizations`, { token: rolesKey, status: 201, body: { name: 'Plans operated', owner_user_id: joiner.userId } })
  // An operator deletes the last owner: the admin becomes the owner and keeps the lists.
  await call('DELETE', `${api}/admin/users/{id}`, { params: { id: owner.userId }, token: rolesKey })
  const heir = await signIn(joiner)
  await call('DELETE', `${api}/auth/organizations/{id}`, { params: { id: org.id }, token: heir.access_token })
  // The last member's own deletion takes the organisation made for them.
  await call('DELETE', `${api}/auth/me`, { token: (await signIn(joiner)).access_token, body: { password: PASSWORD } })
  await t.app.services.apiKeys.revoke(rolesKey.split('_')[1]!)

  // The operators' side.
  const { key } = await t.app.services.apiKeys.create({ name: 'plans', scopes: ['users:read', 'users:write', 'audit:read'], expiresAt: null })
  const subject = await registerVerifyLogin(t, uniqueEmail('subject'))
  for (const query of ['limit=1', `email=${encodeURIComponent(subject.email)}`, 'email=plans', 'status=active', 'status=unverified', 'status=disabled', 'email=plans&status=active']) {
    const users = (await call('GET', `${api}/admin/users`, { token: key, query })).data
    if (users.next_cursor) await call('GET', `${api}/admin/users`, { token: key, query: `${query}&cursor=${encodeURIComponent(users.next_cursor)}` })
  }
  await call('GET', `${api}/admin/users/{id}`, { params: { id: subject.userId }, token: key })
  await call('POST', `${api}/admin/users/{id}/disable`, { params: { id: subject.userId }, token: key, body: { reason: 'suspended' } })
  await call('POST', `${api}/admin/users/{id}/enable`, { params: { id: subject.userId }, token: key })
  await call('POST', `${api}/admin/users/{id}/verify`, { params: { id: subject.userId }, token: key })
  await call('POST', `${api}/admin/users/{id}/revoke-sessions`, { params: { id: subject.userId }, token: key })
  await call('POST', `${api}/admin/users/{id}/mfa/reset`, { params: { id: subject.userId }, token: key })
  const since = new Date(t.clock.now() - 3600_000).toISOString()
  for (const query of ['limit=1', `user_id=${subject.userId}&limit=1`, 'type=login.succeeded&limit=1', `since=${since}&limit=1`, `until=${new Date(t.clock.now() + 1000).toISOString()}&limit=1`, `type=login.failed&since=${since}`]) {
    const events = (await call('GET', `${api}/admin/events`, { token: key, query })).data
    if (events.next_cursor) await call('GET', `${api}/admin/events`, { token: key, query: `${query}&cursor=${encodeURIComponent(events.next_cursor)}` })
  }
  await call('DELETE', `${api}/admin/users/{id}`, { params: { id: subject.userId }, token: key })
  await t.app.services.apiKeys.revoke(key.split('_')[1]!)
  // The OpenID provider's clients, and a user's approved apps.
  const { key: clientsKey } = await t.app.services.apiKeys.create({ name: 'plans-clients', scopes: ['clients:read', 'clients:write'], expiresAt: null })
  const created = (await call('POST', `${api}/admin/clients`, { token: clientsKey, status: 201, body: { name: 'Plans app', type: 'confidential', redirect_uris: [`${PLANS_URL}/cb`] } })).data.client
  await call('GET', `${api}/admin/clients`, { token: clientsKey })
  await call('GET', `${api}/admin/clients/{client_id}`, { params: { client_id: created.client_id }, token: clientsKey })
  await call('PATCH', `${api}/admin/clients/{client_id}`, { params: { client_id: created.client_id }, token: clientsKey, body: { name: 'Plans app 2' } })
  await call('POST', `${api}/admin/clients/{client_id}/secret`, { params: { client_id: created.client_id }, token: clientsKey })
  await call('GET', `${api}/auth/me/apps`, { token: second.access_token })
  await call('DELETE', `${api}/auth/me/apps/{client_id}`, { params: { client_id: created.client_id }, token: verified.access_token, status: 404 })
  await exerciseProvider(t, clientsKey)
  await call('DELETE', `${api}/admin/clients/{client_id}`, { params: { client_id: created.client_id }, token: clientsKey })

  // Webhooks: the deliveries failed once, are retried and then delivered; the endpoint that never
  // answers well is disabled after three days; the operators' routes.
  await t.app.services.webhooks.flush()
  receiverStatus = 204
  t.clock.advance(60)
  await t.app.services.webhooks.flush()
  t.clock.advance(3 * 86_400 + 60)
  await t.app.services.webhooks.flush()
  await call('GET', `${api}/admin/webhooks`, { token: hooksKey })
  await call('GET', `${api}/admin/webhooks/{id}`, { params: { id: down.id }, token: hooksKey })
  await call('PATCH', `${api}/admin/webhooks/{id}`, { params: { id: hook.id }, token: hooksKey, body: { description: 'Plans' } })
  await call('POST', `${api}/admin/webhooks/{id}/secret`, { params: { id: hook.id }, token: hooksKey })
  const log = (await call('GET', `${api}/admin/webhooks/{id}/deliveries`, { params: { id: hook.id }, token: hooksKey, query: 'limit=2' })).data
  await call('GET', `${api}/admin/webhooks/{id}/deliveries`, { params: { id: hook.id }, token: hooksKey, query: `limit=2&cursor=${encodeURIComponent(log.next_cursor)}` })
  await call('POST', `${api}/admin/webhooks/{id}/deliveries/{delivery_id}/retry`, { params: { id: hook.id, delivery_id: log.deliveries[0].id }, token: hooksKey, status: 202 })
  await t.app.services.webhooks.flush()
  await call('DELETE', `${api}/admin/webhooks/{id}`, { params: { id: down.id }, token: hooksKey })
  receiver.close()

  // Operations and the background jobs.
  for (const path of ['/healthz', '/readyz', '/metrics', '/.well-known/jwks.json']) await call('GET', path)
  await t.app.services.mailQueue.flush()
  await t.app.services.feed.poll()
  await t.app.services.keys.reload()
  t.clock.advance(400 * 86_400)
  await t.app.services.retention.runOnce()

  const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json() as { paths: Record<string, Record<string, unknown>> }
  const operations = Object.entries(doc.paths).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method} ${path}`))
  assert.deepEqual(operations.filter((operation) => !called.has(operation)), [], 'every operation in /openapi.json was exercised')
}

/**
 * Portcullis as an OpenID provider, through inject: a confidential client with a back-channel URI,
 * a sign-in on the pages, consent, the code exchange, userinfo, a refresh for the API's JWT, a read
 * with it, introspection, revocation, a device authorization, logout-all (which ends the grant and
 * queues a logout notice), so that its storage statements are prepared too.
 */
async function exerciseProvider(t: TestApp, clientsKey: string): Promise<void> {
  const jar = new Map<string, string>()
  const hop = async (method: 'GET' | 'POST', url: string, form?: Record<string, string>, headers: Record<string, string> = {}) => {
    const target = new URL(url, PLANS_URL)
    const response = await t.app.inject({
      method,
      url: `${target.pathname}${target.search}`,
      headers: { cookie: [...jar].map(([name, value]) => `${name}=${value}`).join('; '), 'sec-fetch-site': 'same-origin', ...(form ? { 'content-type': 'application/x-www-form-urlencoded' } : {}), ...headers },
      ...(form ? { payload: new URLSearchParams(form).toString() } : {}),
    })
    const cookies = response.headers['set-cookie']
    for (const cookie of Array.isArray(cookies) ? cookies : cookies ? [cookies] : []) {
      const [pair] = cookie.split(';')
      const at = pair!.indexOf('=')
      jar.set(pair!.slice(0, at), pair!.slice(at + 1))
    }
    return response
  }
  const created = await t.app.inject({
    method: 'POST',
    url: `${t.base}/admin/clients`,
    headers: { authorization: `Bearer ${clientsKey}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ name: 'Plans partner', type: 'confidential', redirect_uris: [`${PLANS_URL}/partner/cb`], backchannel_logout_uri: 'http://127.0.0.1:9/logout' }),
  })
  assert.equal(created.statusCode, 201, created.body)
  const { client, client_secret: secret } = created.json().data as { client: { client_id: string }; client_secret: string }
  const basic = { authorization: `Basic ${Buffer.from(`${client.client_id}:${secret}`).toString('base64')}` }
  const user = await registerVerifyLogin(t, uniqueEmail('plans-op'))
  const verifier = randomBytes(32).toString('base64url')
  const query = new URLSearchParams({ client_id: client.client_id, response_type: 'code', redirect_uri: `${PLANS_URL}/partner/cb`, scope: 'openid email offline_access watchlists:read', prompt: 'consent', state: 's', nonce: 'n', code_challenge: createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256' })
  let response = await hop('GET', `/oauth/authorize?${query}`)
  const interaction = String(response.headers.location)
  assert.equal((await hop('GET', interaction)).statusCode, 200)
  response = await hop('POST', `${interaction}/login`, { email: user.email, password: PASSWORD })
  response = await hop('GET', String(response.headers.location))
  response = await hop('POST', `${String(response.headers.location)}/consent`, {})
  response = await hop('GET', String(response.headers.location))
  const code = new URL(String(response.headers.location)).searchParams.get('code')
  assert.ok(code, `a code: ${response.statusCode} ${response.headers.location}`)
  const token = async (form: Record<string, string>) => {
    const answer = await hop('POST', '/oauth/token', form, basic)
    assert.equal(answer.statusCode, 200, answer.body)
    return answer.json() as { access_token: string; refresh_token: string }
  }
  const tokens = await token({ grant_type: 'authorization_code', code, redirect_uri: `${PLANS_URL}/partner/cb`, code_verifier: verifier })
  assert.equal((await hop('GET', '/oauth/userinfo', undefined, { authorization: `Bearer ${tokens.access_token}` })).statusCode, 200)
  const jwt = await token({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token, resource: `${PLANS_URL}${t.base}` })
  assert.equal((await t.get('/watchlists', jwt.access_token)).statusCode, 200)
  assert.equal((await hop('POST', '/oauth/introspect', { token: jwt.access_token }, basic)).json().active, true)
  assert.equal((await hop('POST', '/oauth/revoke', { token: tokens.access_token }, basic)).statusCode, 200)
  assert.equal((await hop('POST', '/oauth/device/auth', { client_id: client.client_id, scope: 'openid' }, basic)).statusCode, 400, 'the client did not register the device grant')
  assert.equal((await t.post('/auth/logout-all', undefined, user.access_token)).statusCode, 200)
  await t.app.services.provider.logouts.flush()
}

/** SQLite: a plan line `SCAN <table>` (with or without an index) walks the whole table or index. */
async function sqliteScans(t: TestApp, text: string): Promise<string[]> {
  const parameters = (text.match(/\?/g) ?? []).map(() => null)
  const rows = (await t.app.services.db.kysely.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${text}`, parameters))).rows
  return rows.map((row) => row.detail).filter((detail) => {
    const scanned = /^SCAN (\w+)/.exec(detail)?.[1]
    return (scanned !== undefined && GROWING.has(scanned)) || FEW_VALUES.some((key) => key.sqlite.test(detail))
  })
}

interface PgPlanNode {
  'Node Type': string
  'Relation Name'?: string
  'Index Name'?: string
  'Index Cond'?: string
  Plans?: PgPlanNode[]
}

/**
 * PostgreSQL: the generic plan (as a prepared statement gets) with sequential scans priced out, so
 * a remaining `Seq Scan` means no index can serve the statement, and an index scan without an
 * `Index Cond` means it walks a whole index.
 */
async function postgresScans(client: pg.Client, text: string): Promise<string[]> {
  const count = Math.max(0, ...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])))
  await client.query(`prepare plan_probe as ${text}`)
  try {
    const explained = await client.query(`explain (format json) execute plan_probe${count ? `(${Array(count).fill('null').join(', ')})` : ''}`)
    const found: string[] = []
    const walk = (node: PgPlanNode) => {
      const relation = node['Relation Name']
      if (relation && GROWING.has(relation)) {
        if (node['Node Type'] === 'Seq Scan') found.push(`Seq Scan on ${relation}`)
        if (/^Index (Only )?Scan$/.test(node['Node Type']) && !node['Index Cond']) found.push(`${node['Node Type']} of all of ${node['Index Name']} on ${relation}`)
        const few = FEW_VALUES.find((key) => key.postgres.index === node['Index Name'] && key.postgres.cond.test(node['Index Cond'] ?? ''))
        if (few) found.push(`${node['Node Type']} of ${few.what}`)
      }
      for (const child of node.Plans ?? []) walk(child)
    }
    walk((explained.rows[0]['QUERY PLAN'] as { Plan: PgPlanNode }[])[0]!.Plan)
    return found
  } finally {
    await client.query('deallocate plan_probe')
  }
}

for (const engine of ENGINES) {
  describe(`query plans on ${engine}`, () => {
    test('no statement the service prepares scans a table that grows with users', async () => {
      // Migrated beforehand through a connection of its own: one-off migration statements are not
      // the service's, and the app's statement list starts with what the service itself runs.
      const storage = await createStorage(engine)
      const setup = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
      await migrate(setup)
      if (engine === 'postgres') {
        // The plans are judged as an empty, unanalysed database's: autovacuum analysing a table part
        // way through the flow (it now writes enough rows to trigger it) would change the generic
        // plans from run to run.
        const tables = (await sql<{ tablename: string }>`select tablename from pg_tables where schemaname = 'public'`.execute(setup.kysely)).rows
        for (const { tablename } of tables) await sql`alter table ${sql.table(tablename)} set (autovacuum_enabled = false)`.execute(setup.kysely)
      }
      await setup.close()
      const provider = await startTestProvider({ redirectUris: [`${PLANS_URL}/api/v1/auth/oidc/test/callback`] })
      const t = await startTestApp(engine, {
        storage,
        env: { AUDIT_RETENTION_DAYS: '30', PUBLIC_URL: PLANS_URL, OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: provider.issuer, OIDC_TEST_CLIENT_ID: provider.clientId, OIDC_TEST_CLIENT_SECRET: provider.clientSecret },
      })
      try {
        await exerciseEverything(t, provider)
        const texts = t.app.services.db.statementTexts!().filter((text) => !/kysely_migration/.test(text))
        assert.ok(texts.length > 60, `the flow prepared ${texts.length} statements`)
        const problems: string[] = []
        if (engine === 'sqlite') {
          for (const text of texts) for (const scan of await sqliteScans(t, text)) problems.push(`${scan}: ${text}`)
        } else {
          const client = new pg.Client({ connectionString: t.storage.databaseUrl })
          await client.connect()
          try {
            await client.query('set plan_cache_mode = force_generic_plan')
            await client.query('set enable_seqscan = off')
            for (const text of texts) for (const scan of await postgresScans(client, text)) problems.push(`${scan}: ${text}`)
          } finally {
            await client.end()
          }
        }
        assert.deepEqual(problems.filter((problem) => !ALLOWED_SCANS.some((allowed) => allowed.pattern.test(problem))), [])
      } finally {
        await t.close()
        await provider.close()
        await storage.drop()
      }
    })
  })
}

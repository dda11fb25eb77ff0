// How the page draws things. The DOM work lives here so that app.js reads as the client calls it
// makes. Every value that comes from the service goes in as text or as an attribute, never as HTML.

export const $ = (id) => document.getElementById(id)

/** An element with attributes and children (strings become text nodes). */
function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value)
  element.append(...children)
  return element
}

/** Says what happened in the live region (role="status"), which screen readers read out. */
export function announce(text, { error = false } = {}) {
  const status = $('status')
  status.textContent = text
  status.classList.toggle('error', error)
}

/** Shows the signed-in or the signed-out view, and takes keyboard focus to its first heading. */
export function showView(signedIn) {
  $('signed-in').hidden = !signedIn
  $('signed-out').hidden = signedIn
  $(signedIn ? 'account-heading' : 'sign-in-heading').focus()
}

/** Swaps the password form for the second step's form, or back. */
export function showSecondStep(methods) {
  $('login-form').hidden = Boolean(methods)
  $('mfa-form').hidden = !methods
  $('mfa-form').reset()
  if (!methods) return
  $('mfa-passkey').hidden = !methods.includes('passkey')
  $('mfa-code').focus()
}

const when = (iso) => (iso ? new Date(iso).toLocaleString() : 'never')

/** "Firefox on Windows", near enough, from a User-Agent header; what a person recognises. */
function device(userAgent) {
  if (!userAgent) return 'An unknown browser'
  const browser = [['Edg/', 'Edge'], ['Firefox/', 'Firefox'], ['Chrome/', 'Chrome'], ['Safari/', 'Safari']].find(([mark]) => userAgent.includes(mark))?.[1] ?? 'A browser'
  const system = [['Android', 'Android'], ['iPhone', 'iOS'], ['iPad', 'iPadOS'], ['Windows', 'Windows'], ['Mac OS', 'macOS'], ['Linux', 'Linux']].find(([mark]) => userAgent.includes(mark))?.[1]
  return system ? `${browser} on ${system}` : browser
}

export function renderMe(me) {
  const facts = [
    ['Name', me.full_name || '(none given)'],
    ['E-mail address', me.email],
    ['Address confirmed', me.email_verified ? 'yes' : 'no'],
    ['Account created', when(me.created_at)],
  ]
  $('me').replaceChildren(...facts.flatMap(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]))
}

/** The sessions, this browser's first, each with a Revoke button that calls onRevoke(session). */
export function renderSessions(sessions, onRevoke) {
  const sorted = [...sessions].sort((a, b) => Number(b.current) - Number(a.current))
  $('sessions').replaceChildren(
    ...sorted.map((session) => {
      const name = `${device(session.user_agent)}${session.client ? ` (through ${session.client})` : ''}`
      const revoke = h('button', { type: 'button', class: 'quiet' }, 'Revoke', h('span', { class: 'visually-hidden' }, ` the session of ${name}, signed in ${when(session.created_at)}`))
      revoke.addEventListener('click', () => onRevoke(session, revoke))
      return h(
        'li',
        { 'data-session': session.id },
        h('div', {}, h('strong', {}, name), session.current ? h('span', { class: 'badge' }, 'This browser') : '', h('br'), h('small', {}, `Signed in ${when(session.created_at)}, last active ${when(session.last_used_at)}`)),
        revoke,
      )
    }),
  )
}

const FACTOR_TYPES = { totp: 'Authenticator app', passkey: 'Passkey' }

/** The confirmed second factors, each with a Remove button that calls onRemove(factor). */
export function renderFactors({ factors, recovery_codes_remaining }, onRemove) {
  $('factors-summary').textContent =
    factors.length === 0
      ? 'None yet: a password alone signs in. Add an authenticator app or a passkey to ask for a second step.'
      : `Signing in with a password also asks for one of these. Recovery codes left: ${recovery_codes_remaining}.`
  $('factors').replaceChildren(
    ...factors.map((factor) => {
      const remove = h('button', { type: 'button', class: 'quiet' }, 'Remove', h('span', { class: 'visually-hidden' }, ` ${factor.name}`))
      remove.addEventListener('click', () => onRemove(factor, remove))
      return h(
        'li',
        { 'data-factor': factor.id },
        h('div', {}, h('strong', {}, factor.name), h('br'), h('small', {}, `${FACTOR_TYPES[factor.type] ?? factor.type}, added ${when(factor.created_at)}, last used ${when(factor.last_used_at)}`)),
        remove,
      )
    }),
  )
}

/**
 * The authenticator app's setup: the QR code, the key and the otpauth: link. The QR code is the
 * service's SVG shown as an image (a data: URL), where no script inside it could run.
 */
export function showTotpSetup(enrolment) {
  $('totp-qr').src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(enrolment.qr_svg)}`
  $('totp-secret').textContent = enrolment.secret
  $('totp-uri').href = enrolment.otpauth_uri
  $('totp-form').reset()
  $('totp-setup').hidden = false
  $('totp-heading').focus()
}

export function hideTotpSetup() {
  $('totp-setup').hidden = true
  $('totp-secret').textContent = ''
  $('totp-qr').removeAttribute('src')
}

/** The recovery codes the first factor brings, shown this once. */
export function showRecoveryCodes(codes) {
  $('recovery-codes').replaceChildren(...codes.map((code) => h('li', {}, h('code', {}, code))))
  $('recovery').hidden = false
  $('recovery-heading').focus()
}

export function hideRecoveryCodes() {
  $('recovery').hidden = true
  $('recovery-codes').replaceChildren()
}

/** One "Continue with {label}" button per identity provider; one that is down is shown disabled. */
export function renderProviders(providers, onChoose) {
  $('no-providers').hidden = providers.length > 0
  $('providers').replaceChildren(
    ...providers.map((provider) => {
      const button = h('button', { type: 'button' }, `Continue with ${provider.label}`)
      if (!provider.available) {
        button.disabled = true
        button.append(h('span', { class: 'hint' }, ' (not reachable right now)'))
      }
      button.addEventListener('click', () => onChoose(provider, button))
      return button
    }),
  )
}

const ROLE_NAMES = { owner: 'Owner', admin: 'Admin', member: 'Member' }
const rolesText = (roles) => roles.map((role) => ROLE_NAMES[role] ?? role).join(', ')

/**
 * The user's organisations, each with a Switch button that calls onSwitch(organization), except
 * the active one, which is marked; and a line saying where the session works now.
 */
export function renderOrganizations(organizations, active, onSwitch) {
  $('active-organization').textContent = active
    ? `This session works in ${active.name}, as ${rolesText(active.roles)}.`
    : organizations.length === 0
      ? 'You belong to no organisation yet: create one, or accept an invitation.'
      : 'This session works in your own account. Switch to an organisation to see its shared watchlists.'
  $('leave-organization-view').hidden = !active
  $('organizations').replaceChildren(
    ...organizations.map((organization) => {
      const current = active?.id === organization.id
      const control = current ? h('span', { class: 'badge' }, 'Active') : h('button', { type: 'button', class: 'quiet' }, 'Switch to ', organization.name)
      if (!current) control.addEventListener('click', () => onSwitch(organization, control))
      return h('li', { 'data-organization': organization.id }, h('div', {}, h('strong', {}, organization.name), h('br'), h('small', {}, rolesText(organization.roles))), control)
    }),
  )
}

/**
 * The active organisation's panel: its shared watchlists, members and pending invitations, and the
 * forms the user's permissions there allow (from the token: client.can()).
 */
export function showOrganization(organization, { mayWrite, mayInvite }) {
  $('organization').hidden = !organization
  if (!organization) return
  $('organization-heading').textContent = `Shared watchlists of ${organization.name}`
  $('shared-watchlist-form').hidden = !mayWrite
  $('invite-form').hidden = !mayInvite
  $('invitations').hidden = !mayInvite
}

export function renderSharedWatchlists(watchlists) {
  $('shared-watchlists').replaceChildren(
    ...(watchlists.length === 0
      ? [h('li', {}, h('span', { class: 'hint' }, 'No shared watchlist yet.'))]
      : watchlists.map((list) => h('li', { 'data-watchlist': list.id }, h('div', {}, h('strong', {}, list.name), h('br'), h('small', {}, list.symbols.join(' · ') || 'No symbols yet'))))),
  )
}

/**
 * The members. With `manage` (the user may manage members), each other member has a role to choose
 * and a button that calls manage.onChange(member, role, button).
 */
export function renderMembers(members, manage) {
  $('members').replaceChildren(
    ...members.map((member) => {
      const name = member.full_name || member.email
      const facts = h('div', {}, h('strong', {}, name), h('br'), h('small', {}, `${member.email}, ${rolesText(member.roles)}`))
      if (!manage || member.user_id === manage.selfId) return h('li', { 'data-member': member.user_id }, facts)
      const choice = h('select', { 'aria-label': `Role of ${name}` }, ...Object.entries(ROLE_NAMES).map(([role, label]) => h('option', { value: role }, label)))
      choice.value = member.roles[0] ?? 'member'
      const change = h('button', { type: 'button', class: 'quiet' }, 'Change role', h('span', { class: 'visually-hidden' }, ` of ${name}`))
      change.addEventListener('click', () => manage.onChange(member, choice.value, change))
      return h('li', { 'data-member': member.user_id }, facts, h('div', { class: 'actions' }, choice, change))
    }),
  )
}

/** The invitations not yet accepted, each with a Withdraw button that calls onRevoke(invitation). */
export function renderInvitations(invitations, onRevoke) {
  $('invitations').replaceChildren(
    ...invitations.map((invitation) => {
      const revoke = h('button', { type: 'button', class: 'quiet' }, 'Withdraw', h('span', { class: 'visually-hidden' }, ` the invitation of ${invitation.email}`))
      revoke.addEventListener('click', () => onRevoke(invitation, revoke))
      return h('li', { 'data-invitation': invitation.id }, h('div', {}, h('strong', {}, invitation.email), h('br'), h('small', {}, `Invited as ${rolesText(invitation.roles)}, until ${when(invitation.expires_at)}`)), revoke)
    }),
  )
}

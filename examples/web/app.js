// The sample app: every sign-in and account screen, and organisations sharing watchlists, through
// the typed client (docs/client.md).
// The client is served by serve.mjs from its compiled ES modules; config.js is written by serve.mjs
// too, with the service's address for this run.
import { PortcullisClient, PortcullisError } from '/client/index.js'
import { API_BASE, CAPTCHA, OUTBOX } from '/config.js'
import {
  $, announce, hideRecoveryCodes, hideTotpSetup, renderFactors, renderInvitations, renderMe, renderMembers, renderOrganizations,
  renderProviders, renderSessions, renderSharedWatchlists, showOrganization, showRecoveryCodes, showSecondStep, showTotpSetup, showView,
} from '/view.js'

const SESSION_ENDED = {
  revoked: 'Your session was ended elsewhere (revoked, or the password changed). Sign in again.',
  refresh_failed: 'Your session has expired. Sign in again.',
  ended_in_another_tab: 'You logged out in another tab.',
}

// In a browser the client uses the cookie transport by default: the refresh token is an HttpOnly
// cookie no script can read, the access token lives only in this object.
const client = new PortcullisClient({
  baseUrl: API_BASE,
  // Called when the session ends without this page asking: revoked from another browser, expired,
  // or logged out in another tab.
  onSessionEnd: ({ reason }) => signedOut(SESSION_ENDED[reason], { error: true }),
})

/**
 * Bot protection (docs/SECURITY.md, "Bot protection"): a service with CAPTCHA_PROVIDER set refuses a
 * sign-up without the token of the provider's widget. The widget's script is loaded from the
 * provider and renders into `container`; its token goes with the call as `captchaToken`. A token is
 * good for one call, so the widget starts again after each.
 */
const WIDGET_SCRIPTS = {
  turnstile: { src: 'https://challenges.cloudflare.com/turnstile/v0/api.js?render=explicit', api: 'turnstile' },
  hcaptcha: { src: 'https://js.hcaptcha.com/1/api.js?render=explicit', api: 'hcaptcha' },
}

function captchaWidget(container) {
  if (!CAPTCHA) return { token: async () => undefined, reset() {} }
  const { src, api } = WIDGET_SCRIPTS[CAPTCHA.provider]
  let widgetId = null
  const loaded = new Promise((resolve, reject) => {
    const script = document.createElement('script')
    script.src = src
    script.async = true
    script.onload = () => {
      widgetId = window[api].render(container, { sitekey: CAPTCHA.siteKey })
      resolve()
    }
    script.onerror = () => reject(new Error(`The ${CAPTCHA.provider} check could not be loaded, so the service will refuse a sign-up.`))
    document.head.append(script)
  })
  loaded.catch((error) => announce(error.message, { error: true }))
  container.hidden = false
  return {
    async token() {
      await loaded
      return window[api].getResponse(widgetId) || undefined
    },
    reset() {
      if (widgetId !== null) window[api].reset(widgetId)
    },
  }
}

const registerCaptcha = captchaWidget($('register-captcha'))

/** The second step of a sign-in under way: the mfa_token login() (or a provider) answered. */
let mfaToken = null
/** The authenticator app being added: its factor id, until a code confirms it. */
let totpFactorId = null
/** The signed-in user's id (from me()): their own row in a member list has no role to change. */
let myUserId = null

/** What went wrong, in words for the person. */
function describe(error) {
  if (error instanceof PortcullisError) {
    if (error.stepUpRequired) return 'This needs a second factor verified in the last few minutes: log out, sign in again with it, and try again.'
    if (error.isNetworkError) return `The service at ${API_BASE} does not answer. Is \`npm run example\` still running?`
    const fields = error.details?.map((detail) => `${detail.field}: ${detail.message}`).join('; ')
    return fields ? `${error.message} (${fields})` : error.message
  }
  // The browser's own passkey dialog: closed, timed out, or no passkey for this site.
  if (error?.name === 'NotAllowedError') return 'No passkey was used (the dialog was closed or timed out). Nothing changed.'
  if (error?.name === 'InvalidStateError') return 'This device already holds a passkey for this account.'
  return error?.message ?? String(error)
}

/**
 * Runs an action started by a control (a button, a form's submit button): the control is disabled
 * meanwhile so a second click cannot start it twice, and a failure is announced.
 */
async function act(control, action) {
  control.disabled = true
  try {
    await action()
  } catch (error) {
    announce(describe(error), { error: true })
  } finally {
    control.disabled = false
  }
}

/** A form's submit handler: its fields by name, the default submission (a page load) stopped. */
function onSubmit(form, action) {
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    const fields = Object.fromEntries(new FormData(form))
    void act(form.querySelector('[type=submit]'), () => action(fields))
  })
}

function onClick(button, action) {
  button.addEventListener('click', () => void act(button, action))
}

// Signed out --------------------------------------------------------------------------------

function signedOut(message, options) {
  mfaToken = null
  showSecondStep(null)
  showView(false)
  if (message) announce(message, options)
}

/** A sign-in's answer: the session, or the second step the account asks for. */
async function completeSignIn(result) {
  if (!result.mfa_required) return signedIn('Signed in.')
  mfaToken = result.mfa_token
  showView(false)
  showSecondStep(result.methods)
  announce('One more step: a code from your authenticator app, a recovery code, or a passkey.')
}

onSubmit($('register-form'), async ({ full_name, email, password }) => {
  let registered
  try {
    registered = await client.register({ full_name, email, password }, { captchaToken: await registerCaptcha.token() })
  } finally {
    registerCaptcha.reset()
  }
  $('register-form').reset()
  $('login-email').value = registered.email
  announce(
    registered.verification_required
      ? `Account created for ${registered.email}. Confirm the address with the link in the mail (in ${OUTBOX}/), then sign in.`
      : `Account created for ${registered.email}. You can sign in now.`,
  )
})

onSubmit($('verify-form'), async ({ token }) => {
  const verified = await client.verifyEmail(token.trim())
  $('verify-form').reset()
  $('login-email').value = verified.email
  announce(`${verified.email} is confirmed. You can sign in now.`)
  $('login-password').focus()
})

onSubmit($('login-form'), async ({ email, password }) => {
  await completeSignIn(await client.login({ email, password }))
  $('login-password').value = ''
})

onSubmit($('mfa-form'), async ({ code }) => {
  const trimmed = code.trim()
  // Six digits are an authenticator app's code; anything else is tried as a recovery code.
  const method = /^\d{6}$/.test(trimmed) ? 'totp' : 'recovery_code'
  await client.verifyMfa({ mfa_token: mfaToken, method, code: trimmed })
  mfaToken = null
  await signedIn('Signed in.')
})

onClick($('mfa-passkey'), async () => {
  await client.verifyMfaWithPasskey(mfaToken)
  mfaToken = null
  await signedIn('Signed in.')
})

$('mfa-cancel').addEventListener('click', () => signedOut('Sign-in cancelled.'))

// Passwordless: the browser offers the passkeys it holds for this site.
onClick($('passkey-login'), async () => {
  await client.loginWithPasskey()
  await signedIn('Signed in with a passkey.')
})

/**
 * "Continue with ...": to the service, which sends the browser on to the provider; the provider
 * sends it back through the service to this page with ?code= (see start()). startOidc() keeps the
 * PKCE verifier in this tab's sessionStorage, so only this tab can use the code that comes back.
 */
async function continueWith(provider) {
  announce(`Going to ${provider.label}…`)
  location.assign(await client.startOidc(provider.name, `${location.origin}/`))
}

const PROVIDER_ERRORS = {
  access_denied: 'The sign-in was cancelled at the provider.',
  account_exists: 'An account with this address exists but its address is not confirmed: sign in with its password instead.',
  email_not_verified: 'The provider did not vouch for the e-mail address, so no account was used or made.',
  account_disabled: 'This account is disabled.',
  provider_unavailable: 'The provider cannot be reached right now.',
}

// Signed in ---------------------------------------------------------------------------------

async function signedIn(message) {
  hideTotpSetup()
  hideRecoveryCodes()
  const me = await client.me()
  myUserId = me.user_id
  renderMe(me)
  // A service with ORGANIZATIONS=off has none to list: the rest of the page works all the same.
  const organizations = refreshOrganizations().catch((error) => {
    $('active-organization').textContent = `Organisations are not available: ${describe(error)}`
  })
  await Promise.all([refreshSessions(), refreshFactors(), organizations])
  showView(true)
  announce(message)
}

async function refreshSessions() {
  renderSessions(await client.listSessions(), (session, button) =>
    act(button, async () => {
      await client.revokeSession(session.id)
      // Revoking this browser's own session ends it here too (the client clears its tokens).
      if (session.current) return signedOut('This session was revoked: you are signed out.')
      await refreshSessions()
      announce('Session revoked.')
    }),
  )
}

async function refreshFactors() {
  renderFactors(await client.listFactors(), (factor, button) =>
    act(button, async () => {
      await client.removeFactor(factor.id)
      await refreshFactors()
      announce(`Removed ${factor.name}.`)
    }),
  )
}

/** After a factor is added: the list again, and the recovery codes if this was the account's first. */
async function factorAdded(confirmation, message) {
  await refreshFactors()
  if (confirmation.recovery_codes) showRecoveryCodes(confirmation.recovery_codes)
  announce(confirmation.recovery_codes ? `${message} Save your recovery codes below.` : message)
}

onClick($('add-totp'), async () => {
  hideRecoveryCodes()
  const enrolment = await client.enrolTotp()
  totpFactorId = enrolment.factor_id
  showTotpSetup(enrolment)
  announce('Scan the QR code or enter the key, then type the code your app shows.')
})

onSubmit($('totp-form'), async ({ code }) => {
  const confirmed = await client.confirmTotp(totpFactorId, code.trim())
  totpFactorId = null
  hideTotpSetup()
  await factorAdded(confirmed, `${confirmed.factor.name} added.`)
})

// An unconfirmed authenticator app counts for nothing; the service lets it lapse.
$('totp-cancel').addEventListener('click', () => {
  totpFactorId = null
  hideTotpSetup()
  announce('No authenticator app was added.')
})

onClick($('add-passkey'), async () => {
  hideRecoveryCodes()
  const added = await client.registerPasskey()
  await factorAdded(added, `Passkey “${added.factor.name}” added.`)
})

$('recovery-done').addEventListener('click', () => {
  hideRecoveryCodes()
  $('factors-heading').focus()
})

// Organisations -------------------------------------------------------------------------------

/**
 * The organisations and, for the active one (the session's, as its access token says: claims()),
 * its shared watchlists, members and invitations. What the forms offer follows from the token's
 * permissions there (client.can()); the service still decides on every call.
 */
async function refreshOrganizations() {
  // Read after the call: a change of the user's roles or memberships makes the next call refresh
  // the token first (TOKEN_EXPIRED, then a refresh the client makes by itself), and claims() follows.
  const organizations = await client.listOrganizations()
  const active = organizations.find((organization) => organization.id === client.claims()?.org_id) ?? null
  renderOrganizations(organizations, active, (organization, button) =>
    act(button, async () => {
      await client.switchOrganization(organization.id)
      await refreshOrganizations()
      announce(`Switched to ${organization.name}.`)
      $('organization-heading').focus()
    }),
  )
  const mayInvite = Boolean(active) && client.can('members:invite')
  showOrganization(active, { mayWrite: Boolean(active) && client.can('watchlists:write'), mayInvite })
  if (!active) return
  const [lists, members, invitations] = await Promise.all([
    client.listWatchlists({ organization_id: active.id }),
    client.listMembers(active.id),
    mayInvite ? client.listInvitations(active.id) : [],
  ])
  renderSharedWatchlists(lists.watchlists)
  const manage = client.can('members:manage')
    ? {
        selfId: myUserId,
        onChange: (member, role, button) =>
          act(button, async () => {
            await client.updateMember(active.id, member.user_id, [role])
            await refreshOrganizations()
            announce(`${member.full_name || member.email} is now ${{ owner: 'an owner', admin: 'an admin', member: 'a member' }[role] ?? role}.`)
          }),
      }
    : null
  renderMembers(members.members, manage)
  renderInvitations(invitations, (invitation, button) =>
    act(button, async () => {
      await client.revokeInvitation(active.id, invitation.id)
      await refreshOrganizations()
      announce(`The invitation of ${invitation.email} is withdrawn.`)
    }),
  )
}

onSubmit($('create-organization-form'), async ({ name }) => {
  const organization = await client.createOrganization(name.trim())
  $('create-organization-form').reset()
  // The creator is its owner; working in it at once is what they came for.
  await client.switchOrganization(organization.id)
  await refreshOrganizations()
  announce(`${organization.name} created. This session works in it now.`)
})

onClick($('leave-organization-view'), async () => {
  await client.switchOrganization(null)
  await refreshOrganizations()
  announce('Back to your own account.')
})

onSubmit($('shared-watchlist-form'), async ({ name, symbols }) => {
  const organizationId = client.claims()?.org_id
  const list = await client.createWatchlist({
    name: name.trim(),
    symbols: symbols.split(/[\s,]+/).filter(Boolean),
    organization_id: organizationId,
  })
  $('shared-watchlist-form').reset()
  await refreshOrganizations()
  announce(`Shared watchlist “${list.name}” created.`)
})

onSubmit($('invite-form'), async ({ email, role }) => {
  const invitation = await client.invite(client.claims()?.org_id, { email: email.trim(), roles: [role] })
  $('invite-form').reset()
  await refreshOrganizations()
  announce(`Invitation sent to ${invitation.email}. Here the mail is a file in ${OUTBOX}/.`)
})

/** The token of an invitation link (`.../accept-invitation?token=...`), or what was pasted as it is. */
function invitationToken(pasted) {
  const text = pasted.trim()
  try {
    return new URL(text).searchParams.get('token') ?? text
  } catch {
    return text
  }
}

onSubmit($('accept-invitation-form'), async ({ token }) => {
  await client.acceptInvitation(invitationToken(token))
  $('accept-invitation-form').reset()
  await refreshOrganizations()
  announce('Invitation accepted: the organisation is in your list. Switch to it to see what it shares.')
})

onClick($('logout'), async () => {
  await client.logout()
  signedOut('Logged out.')
})

// Start -------------------------------------------------------------------------------------

/** The page's first moments: back from a provider, a session to bring back, or signed out. */
async function start() {
  $('outbox').textContent = `${OUTBOX}/`
  const providers = client.oidcProviders().then(
    ({ providers }) => renderProviders(providers, (provider, button) => act(button, () => continueWith(provider))),
    (error) => announce(`The identity providers could not be listed: ${describe(error)}`, { error: true }),
  )
  const back = new URLSearchParams(location.search)
  if (back.has('code') || back.has('error')) {
    // Back from a provider. The one-time code leaves the address bar (and the history) at once.
    history.replaceState(null, '', location.pathname)
    const error = back.get('error')
    if (error) signedOut(PROVIDER_ERRORS[error] ?? `The provider sign-in failed (${error}).`, { error: true })
    else await completeSignIn(await client.exchangeOidcCode(back.get('code')))
  } else if (await client.restore()) {
    // The refresh cookie brought the session back (a reload, a new tab).
    await signedIn('Welcome back.')
  } else {
    signedOut('Not signed in.')
  }
  await providers
}

start().catch((error) => signedOut(describe(error), { error: true }))

import { createHash } from 'node:crypto'
import { widgetHtml, type CaptchaWidget } from '../captcha/widget.ts'
import { html, Html } from '../html.ts'
import { field, form, layout, type FieldErrors, type PageBrand } from './views.ts'
import { PAGE_CSS_HASH } from './style.ts'

/**
 * The passkey button's script: where JavaScript runs and the browser has WebAuthn, it shows the
 * button; a press asks the button's `data-options` for a challenge, runs the ceremony, sends the
 * assertion to `data-submit` and follows the answer's `location`. Without it the page is the plain
 * password form. Inline, allowed by its hash alone (PASSKEY_SCRIPT_HASH in the page's policy).
 */
const PASSKEY_SCRIPT = `(() => {
const button = document.getElementById('passkey')
if (!button || !window.PublicKeyCredential) return
const status = document.getElementById('passkey-status')
const b64 = (buffer) => btoa(String.fromCharCode(...new Uint8Array(buffer))).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '')
const bytes = (text) => Uint8Array.from(atob(text.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0))
const post = async (url, fields) => {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields) })
  return { ok: response.ok, body: await response.json() }
}
button.hidden = false
button.addEventListener('click', async () => {
  status.textContent = ''
  const fields = button.dataset.mfaToken ? { mfa_token: button.dataset.mfaToken } : {}
  try {
    const started = await post(button.dataset.options, fields)
    if (!started.ok) throw new Error(started.body.message)
    const options = started.body.options
    const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON ? PublicKeyCredential.parseRequestOptionsFromJSON(options)
      : { ...options, challenge: bytes(options.challenge), allowCredentials: (options.allowCredentials || []).map((d) => ({ ...d, id: bytes(d.id) })) }
    const credential = await navigator.credentials.get({ publicKey })
    const r = credential.response
    const json = credential.toJSON ? credential.toJSON() : { id: credential.id, rawId: b64(credential.rawId), type: credential.type, clientExtensionResults: credential.getClientExtensionResults(),
      response: { clientDataJSON: b64(r.clientDataJSON), authenticatorData: b64(r.authenticatorData), signature: b64(r.signature), userHandle: r.userHandle ? b64(r.userHandle) : null } }
    const done = await post(button.dataset.submit, { ...fields, ...(started.body.challenge_id ? { challenge_id: started.body.challenge_id } : {}), credential: JSON.stringify(json) })
    if (!done.ok) throw new Error(done.body.message)
    window.location.assign(done.body.location)
  } catch (error) {
    status.textContent = error && error.name === 'NotAllowedError' ? 'The passkey was not used.' : (error && error.message) || 'That did not work.'
  }
})
})()`
const PASSKEY_SCRIPT_HASH = `sha256-${createHash('sha256').update(PASSKEY_SCRIPT).digest('base64')}`

/** The passkey button (hidden until the script shows it) and the line that tells how it went. */
function passkeyButton(uid: string, label: string, mfaToken?: string): Html {
  return html`<button type="button" id="passkey" class="secondary" hidden data-options="/oauth/interaction/${uid}/passkey/options" data-submit="/oauth/interaction/${uid}/passkey"${mfaToken ? html` data-mfa-token="${mfaToken}"` : ''}>${label}</button>
<p class="error" id="passkey-status" role="status" aria-live="polite"></p>
<script>${new Html(PASSKEY_SCRIPT)}</script>`
}

/**
 * The forms post to `/oauth/interaction/{uid}/...`, absolute (the issuer is an origin, never a
 * path): under the interaction's path, where its cookie is sent, whichever page showed them.
 *
 * The pages of Portcullis as an OpenID provider (src/provider/): the sign-in a client sends a
 * person to, its second step, the consent, and the pages the library itself renders (errors,
 * logout, the device flow), all in the style of the mailed-link pages and working without JavaScript.
 */

/** A resource operators registered, as the consent page names it: only the scopes asked for. */
export interface ConsentResource {
  name: string
  host: string
  scopes: { name: string; description: string }[]
}

/** What each scope lets an app do, in words (the consent page). */
const SCOPE_WORDS: Record<string, string> = {
  openid: 'Know who you are when you sign in',
  profile: 'See your name',
  email: 'See your e-mail address',
  offline_access: 'Stay signed in when you are not using it',
  'watchlists:read': 'Read your watchlists',
  'watchlists:write': 'Create, change and delete your watchlists',
  organizations: 'See the organisations you belong to and your roles in them',
}

/**
 * The pages' policy, with the forms allowed to lead on to where the sign-in ends: Chromium checks
 * `form-action` against every redirect a submitted form goes through, and the last one is the
 * client's redirect URI. The one page that shows the bot check's widget (the e-mailed code's
 * address form) also allows the provider's script, frames and what it lists for styles and
 * connections (src/captcha/widget.ts); every other page is left without them.
 */
export function providerPageCsp(formTargets: string[] = [], widget?: { script: string[]; frame: string[]; style: string[]; connect: string[] }): string {
  const plus = (sources: string[] | undefined) => (sources ?? []).map((source) => ` ${source}`).join('')
  return [
    "default-src 'none'",
    `style-src '${PAGE_CSS_HASH}'${plus(widget?.style)}`,
    `script-src '${PASSKEY_SCRIPT_HASH}'${plus(widget?.script)}`,
    ...(widget ? [`frame-src${plus(widget.frame)}`] : []),
    `connect-src 'self'${plus(widget?.connect)}`,
    `form-action 'self'${plus(formTargets)}`,
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ')
}

/**
 * The policy of the pages the library renders (logout, device, errors): their forms post to this
 * origin and are then redirected to a registered URI, so no `form-action`; the library adds the
 * hash of its one self-submitting script to `script-src`.
 */
export const LIBRARY_PAGE_CSP = ["default-src 'none'", `style-src '${PAGE_CSS_HASH}'`, "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"].join('; ')

export const providerPages = {
  signIn(brand: PageBrand, uid: string, clientName: string, options: { email?: string; errors?: FieldErrors; message?: string; providers?: { name: string; label: string }[] } = {}): Html {
    const focus = { done: false }
    const errors = options.errors ?? {}
    const fields = [
      field({ name: 'email', label: 'E-mail address', type: 'email', autocomplete: 'username', ...(options.email ? { value: options.email } : {}) }, errors, focus),
      field({ name: 'password', label: 'Password', type: 'password', autocomplete: 'current-password' }, errors, focus),
    ]
    return layout(brand, `Sign in to continue to ${clientName}`, html`${options.message ? html`<p class="error alert" role="alert" tabindex="-1" autofocus>${options.message}</p>` : ''}
<p>${clientName} uses your ${brand.appName} account. It never sees your password.</p>
${form(`/oauth/interaction/${uid}/login`, fields, {}, 'Sign in')}
${passkeyButton(uid, 'Sign in with a passkey')}
<form method="post" action="/oauth/interaction/${uid}/email"><button type="submit" class="secondary">E-mail me a code instead</button></form>
${(options.providers ?? []).map((provider) => html`<form method="post" action="/oauth/interaction/${uid}/federated/${provider.name}"><button type="submit" class="secondary">Continue with ${provider.label}</button></form>
`)}<form method="post" action="/oauth/interaction/${uid}/abort"><button type="submit" class="secondary">Cancel</button></form>`)
  },

  /**
   * The e-mailed code instead of a password: the address first, then the code. With bot protection
   * on, the provider's widget sits under the address and `captcha` says why it must be done again.
   */
  emailAddress(brand: PageBrand, uid: string, clientName: string, widget: CaptchaWidget | null, options: { email?: string; message?: string; captcha?: string } = {}): Html {
    const focus = { done: false }
    const address = field({ name: 'email', label: 'E-mail address', type: 'email', autocomplete: 'username', ...(options.email ? { value: options.email } : {}) }, options.message ? { email: options.message } : {}, focus)
    return layout(brand, `Sign in to continue to ${clientName}`, html`<p>We will mail you a 6-digit code. It works once, for 10 minutes.</p>
${form(`/oauth/interaction/${uid}/email`, widget ? [address, widgetHtml(widget, options.captcha)] : [address], { step: 'send' }, 'Send me a code')}`)
  },

  emailCode(brand: PageBrand, uid: string, email: string, message?: string): Html {
    const focus = { done: false }
    const code = field({ name: 'code', label: 'Code', type: 'text', autocomplete: 'one-time-code', hint: `The 6-digit code we mailed to ${email}.` }, message ? { code: message } : {}, focus)
    return layout(brand, 'Enter the code from the mail', html`<p>If an account exists for ${email}, a mail with a code is on its way. It can take a minute to arrive.</p>
${form(`/oauth/interaction/${uid}/email-code`, [code], { email }, 'Sign in')}`)
  },

  secondFactor(brand: PageBrand, uid: string, mfaToken: string, methods: string[], message?: string): Html {
    const focus = { done: false }
    const errors: FieldErrors = message ? { code: message } : {}
    const hint = methods.includes('recovery_code') ? 'The 6-digit code from your authenticator app, or one of your recovery codes.' : 'The 6-digit code from your authenticator app.'
    const code = field({ name: 'code', label: 'Code', type: 'text', autocomplete: 'one-time-code', hint }, errors, focus)
    return layout(brand, 'Enter your code', html`<p>Your account has a second factor. Enter a code to finish signing in.</p>
${form(`/oauth/interaction/${uid}/mfa`, [code], { mfa_token: mfaToken }, 'Continue')}
${methods.includes('passkey') ? passkeyButton(uid, 'Use a passkey instead', mfaToken) : ''}`)
  },

  consent(brand: PageBrand, uid: string, clientName: string, scopes: string[], accountEmail: string, resources: ConsentResource[] = [], document: { host: string; loopbackOnly: boolean } | null = null): Html {
    const items = scopes.filter((scope) => SCOPE_WORDS[scope]).map((scope) => html`<li>${SCOPE_WORDS[scope]!}</li>\n`)
    // A registered resource (an API or an MCP server) is named with its host, and its scopes in its own words.
    const elsewhere = resources.map((resource) => html`<p>On <strong>${resource.name}</strong> (${resource.host}):</p>
<ul>
${resource.scopes.map((scope) => html`<li>${scope.description}</li>\n`)}</ul>
`)
    // An app that described itself (a client ID metadata document) is not one the operators registered:
    // where it sends you back is named, and one that can only send you back to this computer is flagged.
    const described = document
      ? html`<p class="note">${clientName} is not registered with ${brand.appName}: it describes itself. After you answer, you go back to <strong>${document.host}</strong>.</p>
${document.loopbackOnly ? html`<p class="error" role="alert">This app sends you back to a program on this computer (${document.host}). Allow it only if you started it yourself, just now.</p>
` : ''}`
      : ''
    return layout(brand, `Allow ${clientName} to use your account?`, html`<p>Signed in as <strong>${accountEmail}</strong>. ${clientName} asks to:</p>
<ul>
${items}</ul>
${elsewhere}${described}
<p class="note">You can take this back at any time in your account's list of apps.</p>
${form(`/oauth/interaction/${uid}/consent`, [], {}, 'Allow')}
<form method="post" action="/oauth/interaction/${uid}/abort"><button type="submit" class="secondary">Deny</button></form>`)
  },

  error(brand: PageBrand, error: string, description: string | undefined): Html {
    return layout(brand, 'This sign-in cannot continue', html`<p>The app that sent you here made a request that cannot be used, so nothing was sent back to it.</p>
<p class="note">${error}${description ? html`: ${description}` : ''}</p>`)
  },

  /** The library's logout confirmation: its form (hidden fields) is given as HTML by the library. */
  logout(brand: PageBrand, libraryForm: string): Html {
    return layout(brand, 'Sign out?', html`<p>Do you want to sign out of ${brand.appName}?</p>
${new Html(libraryForm)}
<button type="submit" form="op.logoutForm" name="logout" value="yes">Sign out</button>
<button type="submit" form="op.logoutForm" class="secondary">Stay signed in</button>`)
  },

  loggedOut(brand: PageBrand): Html {
    return layout(brand, 'Signed out', html`<p>You are signed out of ${brand.appName}.</p>`)
  },

  deviceInput(brand: PageBrand, libraryForm: string, message?: string): Html {
    return layout(brand, 'Connect a device', html`${message ? html`<p class="error" role="alert">${message}</p>` : ''}
<p>Enter the code the device shows.</p>
${new Html(libraryForm)}
<div class="field"><label for="user_code">Code</label>
<input id="user_code" name="user_code" form="op.deviceInputForm" type="text" autocomplete="off" autocapitalize="characters" required></div>
<button type="submit" form="op.deviceInputForm">Continue</button>`)
  },

  deviceConfirm(brand: PageBrand, libraryForm: string, clientName: string, userCode: string): Html {
    return layout(brand, `Connect ${clientName}?`, html`<p>Check that the device shows <strong>${userCode}</strong>, then allow it.</p>
${new Html(libraryForm)}
<button type="submit" form="op.deviceConfirmForm">Allow</button>
<button type="submit" form="op.deviceConfirmForm" name="abort" value="yes" class="secondary">Deny</button>`)
  },

  deviceDone(brand: PageBrand): Html {
    return layout(brand, 'Device connected', html`<p>You can close this page and go back to your device.</p>`)
  },
}

/** The pages the library renders itself, bound to the deployment's brand (src/provider/configuration.ts). */
export function libraryPages(brand: PageBrand) {
  return {
    error: (_ctx: unknown, out: { error: string; error_description?: string }) => providerPages.error(brand, out.error, out.error_description),
    logout: (_ctx: unknown, form: string) => providerPages.logout(brand, form),
    loggedOut: () => providerPages.loggedOut(brand),
    deviceInput: (_ctx: unknown, form: string, out?: { error_description?: string }, error?: unknown) =>
      providerPages.deviceInput(brand, form, error || out?.error_description ? 'That code is wrong or has expired.' : undefined),
    deviceConfirm: (_ctx: unknown, form: string, clientName: string, userCode: string) => providerPages.deviceConfirm(brand, form, clientName, userCode),
    deviceDone: () => providerPages.deviceDone(brand),
  }
}

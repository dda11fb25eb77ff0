import { widgetHtml, type CaptchaWidget } from '../captcha/widget.ts'
import { html, Html } from '../html.ts'
import { PAGE_CSS } from './style.ts'

/** What every page of one deployment shows: the product's name and where to go afterwards. */
export interface PageBrand {
  appName: string
  /** APP_URL: the success pages link back to it. Never taken from a request. */
  appUrl: string | undefined
}

export interface FieldErrors {
  [field: string]: string | undefined
}

export function layout(brand: PageBrand, title: string, body: Html): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>${title} · ${brand.appName}</title>
<style>${new Html(PAGE_CSS)}</style>
</head>
<body>
<main>
<p class="brand">${brand.appName}</p>
<h1>${title}</h1>
${body}
</main>
</body>
</html>
`
}

export interface FieldSpec {
  name: string
  label: string
  type: 'email' | 'password' | 'text'
  autocomplete: string
  value?: string
  hint?: string
  readonly?: boolean
}

/**
 * A labelled input; its hint and its error are tied to it with aria-describedby, so a screen
 * reader announces them with the field, and the first field in error takes the focus.
 */
export function field(spec: FieldSpec, errors: FieldErrors, focusFirstError: { done: boolean }): Html {
  const error = errors[spec.name]
  const described = [spec.hint ? `${spec.name}-hint` : '', error ? `${spec.name}-error` : ''].filter(Boolean).join(' ')
  const autofocus = error !== undefined && !focusFirstError.done
  if (autofocus) focusFirstError.done = true
  return html`<div class="field">
<label for="${spec.name}">${spec.label}</label>
<input id="${spec.name}" name="${spec.name}" type="${spec.type}" autocomplete="${spec.autocomplete}"${spec.value !== undefined ? html` value="${spec.value}"` : ''}${spec.readonly ? html` readonly` : html` required`}${described ? html` aria-describedby="${described}"` : ''}${error ? html` aria-invalid="true"` : ''}${autofocus ? html` autofocus` : ''}>
${spec.hint ? html`<p class="hint" id="${spec.name}-hint">${spec.hint}</p>` : ''}
${error ? html`<p class="error" id="${spec.name}-error">${error}</p>` : ''}
</div>`
}

export function form(action: string, fields: Html[], hidden: Record<string, string>, button: string): Html {
  // Relative actions, so the pages also work when PUBLIC_URL has a path in front of them.
  return html`<form method="post" action="${action}" novalidate>
${Object.entries(hidden).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">\n`)}${fields}
<button type="submit">${button}</button>
</form>`
}

export function continueLink(brand: PageBrand): Html | '' {
  return brand.appUrl ? html`<p><a class="continue" href="${brand.appUrl}">Continue to ${brand.appName}</a></p>` : ''
}

/**
 * The forms that mail an address (resend-verification, forgot-password); with bot protection on,
 * the provider's widget sits in them and `errors.captcha` says why it must be done again.
 */
function emailForm(action: string, button: string, widget: CaptchaWidget | null, errors: FieldErrors, value?: string): Html {
  const focus = { done: false }
  const email = field({ name: 'email', label: 'E-mail address', type: 'email', autocomplete: 'email', ...(value === undefined ? {} : { value }) }, errors, focus)
  return form(action, widget ? [email, widgetHtml(widget, errors.captcha)] : [email], {}, button)
}

export const pages = {
  verifyConfirm(brand: PageBrand, token: string): Html {
    return layout(brand, 'Confirm your e-mail address', html`<p>Press the button to confirm that this address belongs to you.</p>
${form('verify-email', [], { token }, 'Confirm my address')}`)
  },

  verified(brand: PageBrand, email: string): Html {
    return layout(brand, 'Address confirmed', html`<p>Thank you. <strong>${email}</strong> is confirmed, and you can now sign in.</p>
${continueLink(brand)}`)
  },

  verifyLinkDead(brand: PageBrand, widget: CaptchaWidget | null, errors: FieldErrors = {}, value?: string): Html {
    return layout(brand, 'This link no longer works', html`<p>The confirmation link is unknown, has been used already, or has expired. Enter your address and we will send a new one.</p>
${emailForm('resend-verification', 'Send a new link', widget, errors, value)}`)
  },

  resendForm(brand: PageBrand, widget: CaptchaWidget | null, errors: FieldErrors, value: string): Html {
    return layout(brand, 'Send a new confirmation link', emailForm('resend-verification', 'Send a new link', widget, errors, value))
  },

  mailOnItsWay(brand: PageBrand): Html {
    return layout(brand, 'Check your mail', html`<p>If an account exists for the address you entered, a mail with a link is on its way. It can take a few minutes to arrive; check your spam folder too.</p>
<p class="note">You can close this page.</p>`)
  },

  resetForm(brand: PageBrand, token: string, email: string, errors: FieldErrors = {}): Html {
    const focus = { done: false }
    const fields = [
      field({ name: 'username', label: 'Account', type: 'email', autocomplete: 'username', value: email, readonly: true }, errors, focus),
      field({ name: 'password', label: 'New password', type: 'password', autocomplete: 'new-password', hint: 'At least 8 characters. A few unrelated words make a strong one.' }, errors, focus),
      field({ name: 'password_confirmation', label: 'Repeat the new password', type: 'password', autocomplete: 'new-password' }, errors, focus),
    ]
    return layout(brand, 'Choose a new password', html`<p>Every device signed in to your account will be signed out.</p>
${form('reset-password', fields, { token }, 'Change password')}`)
  },

  passwordChanged(brand: PageBrand): Html {
    return layout(brand, 'Password changed', html`<p>Your password has been changed and every session has been signed out. Sign in again with the new password.</p>
${continueLink(brand)}`)
  },

  resetLinkDead(brand: PageBrand, widget: CaptchaWidget | null): Html {
    return layout(brand, 'This link no longer works', html`<p>The reset link is unknown, has been used already, or has expired. Enter your address and we will send a new one.</p>
${emailForm('forgot-password', 'Send a reset link', widget, {})}`)
  },

  forgotForm(brand: PageBrand, widget: CaptchaWidget | null, errors: FieldErrors = {}, value?: string): Html {
    return layout(brand, 'Reset your password', html`<p>Enter the address of your account and we will mail you a link to choose a new password.</p>
${emailForm('forgot-password', 'Send a reset link', widget, errors, value)}`)
  },

  problem(brand: PageBrand, title: string, message: string, reference?: string): Html {
    return layout(brand, title, html`<p>${message}</p>
${reference ? html`<p class="note">Reference: ${reference}</p>` : ''}`)
  },
}

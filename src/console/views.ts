import { createHash } from 'node:crypto'
import { html, Html } from '../html.ts'
import { PAGE_CSS } from '../pages/style.ts'
import type { PageBrand } from '../pages/views.ts'
import type { Operator } from './sessions.ts'

/**
 * The console's pages (docs/console.md): the mailed-link pages' style (src/pages/style.ts) widened
 * for tables and a menu, in one stylesheet allowed by its hash, no script, forms that post only to
 * this origin, no framing. Everything interpolated is escaped by `html` (src/html.ts).
 */
const CONSOLE_CSS = `${PAGE_CSS}
main{max-width:72rem}
nav.console{display:flex;flex-wrap:wrap;gap:.25rem 1rem;margin:0 0 1.5rem;padding:0 0 .75rem;border-bottom:1px solid #d1d5db}
nav.console a{text-decoration:none;font-weight:600}
nav.console a[aria-current=page]{color:#1c1f24;text-decoration:underline}
.who{margin:0 0 1rem;font-size:.875rem;color:#4b5563}
.who form{display:inline;margin:0}
.who button{display:inline;width:auto;padding:0;background:none;color:#1d4ed8;font-weight:600;text-decoration:underline}
table{width:100%;border-collapse:collapse;margin:0 0 1.5rem;font-size:.9375rem}
th,td{padding:.5rem .5rem;border-bottom:1px solid #e5e7eb;text-align:left;vertical-align:top}
th{font-weight:700;background:#f9fafb}
h2{margin:2rem 0 .75rem;font-size:1.25rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0 0 1.5rem}
dt{font-weight:600}
dd{margin:0}
.actions{display:flex;flex-wrap:wrap;gap:.5rem;align-items:flex-end;margin:0 0 1.5rem}
.actions form{margin:0}
.actions button,.actions a.button{width:auto}
a.button{display:inline-block;padding:.75rem 1rem;border-radius:.375rem;background:#1d4ed8;color:#fff;font-weight:700;text-decoration:none}
button.danger,a.button.danger{background:#b91c1c}
button.danger:hover{background:#991b1b}
form.inline{display:inline;margin:0}
form.inline button{width:auto;padding:.25rem .75rem}
form.filters{display:flex;flex-wrap:wrap;gap:.75rem;align-items:flex-end;margin:0 0 1.5rem}
form.filters .field{margin:0}
form.filters button{width:auto}
input[type=date],input[type=url],input[type=number]{display:block;width:100%;padding:.625rem .75rem;border:1px solid #6b7280;border-radius:.375rem;font:inherit;color:inherit;background:#fff}
select,textarea{display:block;width:100%;padding:.625rem .75rem;border:1px solid #6b7280;border-radius:.375rem;font:inherit;color:inherit;background:#fff}
textarea{min-height:8rem;font-family:ui-monospace,Menlo,Consolas,monospace}
.notice{padding:.75rem 1rem;border-radius:.375rem;background:#ecfdf5;color:#065f46;font-weight:600}
.secret{padding:.75rem 1rem;border-radius:.375rem;background:#fffbeb;color:#78350f;font:600 1rem ui-monospace,Menlo,Consolas,monospace;overflow-wrap:anywhere}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.875rem}
.muted{color:#4b5563}
.inline-label{display:inline}
fieldset{margin:0 0 1rem;padding:.75rem 1rem;border:1px solid #d1d5db;border-radius:.375rem}
legend{font-weight:700;padding:0 .25rem}
pre{margin:0 0 1rem;padding:.75rem;background:#f9fafb;border-radius:.375rem;overflow-x:auto}
caption{text-align:left;padding:0 0 .25rem}
`.trim()

export const CONSOLE_CSP = [
  "default-src 'none'",
  `style-src 'sha256-${createHash('sha256').update(CONSOLE_CSS).digest('base64')}'`,
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ')

/** The console's menu: where each area lives under the console's path. */
export const AREAS = [
  ['users', 'Users'],
  ['events', 'Audit events'],
  ['organizations', 'Organisations'],
  ['roles', 'Roles'],
  ['clients', 'OAuth clients'],
  ['resources', 'Resources'],
  ['webhooks', 'Webhooks'],
  ['api-keys', 'API keys'],
] as const
export type Area = (typeof AREAS)[number][0]

/** What a console page knows of where it is: the brand, the console's path, the operator. */
export interface ConsolePage {
  brand: PageBrand
  /** The console's path under PUBLIC_URL, e.g. `/console`. */
  base: string
  operator: Operator
}

/** The document every console page is: head, style, brand line, then what the page puts under it. */
function consoleDocument(brand: PageBrand, title: string, inner: Html): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>${title} · ${brand.appName} console</title>
<style>${new Html(CONSOLE_CSS)}</style>
</head>
<body>
<main>
<p class="brand">${brand.appName} console</p>
${inner}
</main>
</body>
</html>
`
}

export function consoleLayout(page: ConsolePage, area: Area | null, title: string, body: Html): Html {
  const { brand, base, operator } = page
  return consoleDocument(brand, title, html`<nav class="console" aria-label="Console">
${AREAS.map(([key, label]) => html`<a href="${base}/${key}"${key === area ? html` aria-current="page"` : ''}>${label}</a>\n`)}</nav>
<div class="who">Signed in as ${operator.email} (${operator.canWrite ? 'operator' : 'viewer: reading only'}). <form method="post" action="${base}/sign-out"><button type="submit">Sign out</button></form></div>
<h1>${title}</h1>
${body}`)
}

/** A page outside a session (sign-in problems): the same style, no menu. */
export function consoleMessage(brand: PageBrand, title: string, body: Html): Html {
  return consoleDocument(brand, title, html`<h1>${title}</h1>
${body}`)
}

/** A table: a header row and rows of cells (already escaped values or Html). */
export function table(caption: string, headers: string[], rows: (string | number | Html | null)[][], empty = 'None.'): Html {
  if (rows.length === 0) return html`<p class="muted">${empty}</p>`
  return html`<table>
<caption class="muted">${caption}</caption>
<thead><tr>${headers.map((header) => html`<th scope="col">${header}</th>`)}</tr></thead>
<tbody>
${rows.map((row) => html`<tr>${row.map((cell) => html`<td>${cell === null ? '—' : cell}</td>`)}</tr>\n`)}</tbody>
</table>`
}

/** A form that posts one action; `danger` for one that destroys (it leads to its confirmation page first). */
export function actionButton(action: string, label: string, hidden: Record<string, string> = {}, options: { danger?: boolean; inline?: boolean; fields?: Html } = {}): Html {
  return html`<form method="post" action="${action}"${options.inline ? html` class="inline"` : ''}>
${Object.entries(hidden).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">\n`)}${options.fields ?? ''}<button type="submit"${options.danger ? html` class="danger"` : ''}>${label}</button>
</form>`
}

/**
 * The page a destructive action asks on: what will happen, a button that does it (a POST with
 * `confirm=yes`) and a way back. Nothing is changed by showing it.
 */
export function confirmPage(page: ConsolePage, area: Area, title: string, what: Html, action: string, button: string, back: string, hidden: Record<string, string> = {}, fields?: Html): Html {
  return consoleLayout(page, area, title, html`${what}
<div class="actions">
${actionButton(action, button, { ...hidden, confirm: 'yes' }, { danger: true, ...(fields ? { fields } : {}) })}
<a class="button" href="${back}">Cancel</a>
</div>`)
}

/** The notices a redirect after a change may name (`?notice=`): fixed words, never text from the request. */
export const NOTICES: Record<string, string> = {
  disabled: 'The account is disabled and its sessions are ended.',
  enabled: 'The account is enabled.',
  verified: 'The address is marked verified.',
  deleted: 'The account is deleted.',
  sessions_revoked: 'Every session of the account is ended.',
  session_revoked: 'The session is ended.',
  mfa_reset: 'Every second factor and recovery code is removed, and every session ended; the user is told by mail.',
  reset_sent: 'A password reset mail is on its way.',
  roles_saved: 'The roles are saved.',
  metadata_saved: 'app_metadata is saved.',
  saved: 'Saved.',
  removed: 'Removed.',
  retried: 'The delivery is queued again.',
  revoked: 'Revoked.',
}

/** What a form's post got wrong, above the form again: nothing when nothing did. */
export function problemList(problems: string[], heading = 'Nothing was saved:'): Html | '' {
  return problems.length === 0 ? '' : html`<div class="alert" role="alert"><p class="error">${heading}</p><ul>${problems.map((problem) => html`<li class="error">${problem}</li>`)}</ul></div>`
}

export function notice(key: unknown): Html | '' {
  const text = typeof key === 'string' ? NOTICES[key] : undefined
  return text ? html`<p class="notice" role="status">${text}</p>` : ''
}

export const iso = (value: string | null | undefined): string => (value ? value.replace('T', ' ').replace(/\.\d{3}Z$/, ' UTC') : '—')

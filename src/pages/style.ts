import { createHash } from 'node:crypto'

/**
 * The pages' only styles, inlined in each page and allowed by their hash in the Content-Security-
 * Policy, so no inline style other than exactly this one can apply and no extra request is needed.
 * Colours are chosen for at least 4.5:1 contrast (WCAG AA).
 */
export const PAGE_CSS = `
*,*::before,*::after{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:#f4f5f7;color:#1c1f24;font:16px/1.5 -apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:28rem;margin:2rem auto;padding:2rem 1.5rem;overflow-wrap:anywhere;background:#fff;border-radius:.5rem;box-shadow:0 1px 3px rgba(0,0,0,.12)}
@media (max-width:30rem){main{margin:0;min-height:100vh;border-radius:0;box-shadow:none}}
.brand{margin:0 0 1.5rem;font-weight:700;font-size:1.125rem}
h1{margin:0 0 1rem;font-size:1.5rem;line-height:1.25}
p{margin:0 0 1rem}
form{margin:1.5rem 0 0}
.field{margin:0 0 1.25rem}
label{display:block;margin:0 0 .25rem;font-weight:600}
input[type=email],input[type=password],input[type=text]{display:block;width:100%;padding:.625rem .75rem;border:1px solid #6b7280;border-radius:.375rem;font:inherit;color:inherit;background:#fff}
input[readonly]{background:#f4f5f7}
input:focus{outline:3px solid #93c5fd;outline-offset:1px;border-color:#1d4ed8}
input[aria-invalid=true]{border-color:#b91c1c}
.hint{margin:.25rem 0 0;font-size:.875rem;color:#4b5563}
.error{margin:.25rem 0 0;font-size:.875rem;color:#b91c1c;font-weight:600}
.alert{margin:0 0 1rem}
.code{margin:0 0 1rem;font:700 2rem/1.2 ui-monospace,Menlo,Consolas,monospace;letter-spacing:.25em}
button{display:inline-block;width:100%;padding:.75rem 1rem;border:0;border-radius:.375rem;background:#1d4ed8;color:#fff;font:inherit;font-weight:700;cursor:pointer}
button:hover{background:#1e40af}
button:focus{outline:3px solid #93c5fd;outline-offset:2px}
form:has(> button.secondary:only-child){margin-top:0}
.error:empty{display:none}
button.secondary{margin-top:.75rem;background:#fff;color:#1d4ed8;border:1px solid #1d4ed8}
button.secondary:hover{background:#eff6ff}
ul{margin:0 0 1rem;padding-left:1.25rem}
a{color:#1d4ed8}
.continue{display:inline-block;margin-top:.5rem;font-weight:700}
.note{font-size:.875rem;color:#4b5563}
`.trim()

export const PAGE_CSS_HASH = `sha256-${createHash('sha256').update(PAGE_CSS).digest('base64')}`

/**
 * No script at all, only the one stylesheet above, forms posting back to this origin, and no
 * framing (clickjacking a "confirm" button is the attack this stops).
 */
export const PAGE_CSP = pageCsp()

/**
 * The same policy for a page whose form leads on elsewhere: Chromium checks `form-action` against
 * every redirect a submitted form goes through, so a form answered with a redirect to an allowed
 * application must name that application's origin too. A page showing the bot check's widget
 * (src/captcha/widget.ts) also allows the provider's script, frames and what it lists for styles
 * and connections, and nothing else.
 */
export function pageCsp(formTargets: string[] = [], widget?: { script: string[]; frame: string[]; style: string[]; connect: string[] }): string {
  const plus = (sources: string[] | undefined) => (sources ?? []).map((source) => ` ${source}`).join('')
  return [
    "default-src 'none'",
    `style-src '${PAGE_CSS_HASH}'${plus(widget?.style)}`,
    ...(widget ? [`script-src${plus(widget.script)}`, `frame-src${plus(widget.frame)}`] : []),
    ...(widget && widget.connect.length > 0 ? [`connect-src${plus(widget.connect)}`] : []),
    `form-action 'self'${plus(formTargets)}`,
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ')
}

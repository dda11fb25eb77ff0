import { html, type Html } from '../html.ts'
import { PROVIDERS, type CaptchaProvider } from './providers.ts'

/** What a page needs to show the widget: the provider and the public site key. */
export interface CaptchaWidget {
  provider: CaptchaProvider
  siteKey: string
}

/**
 * The widget inside a form, for the service's own pages. The provider's script renders it into the
 * element with its class and adds a hidden field with the token to the form, so the form posts it
 * with no script of ours (the pages allow no inline script). `error` is shown under it after a
 * refused or missing token.
 */
export function widgetHtml(widget: CaptchaWidget, error?: string): Html {
  const facts = PROVIDERS[widget.provider]
  return html`<div class="field">
<div class="${facts.widgetClass}" data-sitekey="${widget.siteKey}"${error ? html` aria-describedby="captcha-error"` : ''}></div>
${error ? html`<p class="error" id="captcha-error">${error}</p>` : ''}
<noscript><p class="note">This form needs JavaScript for its check against automated sign-ups.</p></noscript>
</div>
<script src="${facts.script}" async defer></script>`
}

/**
 * The page policy's additions for the widget: its script, its frames and what the provider lists
 * for styles and connections, only on the pages that show it (the others keep allowing no script).
 */
export function widgetSources(widget: CaptchaWidget): { script: string[]; frame: string[]; style: string[]; connect: string[] } {
  return PROVIDERS[widget.provider].csp
}

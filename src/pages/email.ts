import { html, type Html } from '../html.ts'
import { form, layout, type PageBrand } from './views.ts'

/**
 * The page behind the e-mailed sign-in link (src/email/), in the mailed-link pages' style: its GET
 * only shows a button (mail scanners fetch links and never submit forms), and the button's POST
 * either goes back to the application or shows the code to type where the sign-in started.
 */
export const emailPages = {
  confirm(brand: PageBrand, token: string): Html {
    return layout(brand, `Sign in to ${brand.appName}`, html`<p>Press the button to finish signing in.</p>
${form('email', [], { token }, 'Sign in')}`)
  },

  code(brand: PageBrand, code: string): Html {
    return layout(brand, 'Type this code', html`<p>This sign-in started on another device or in another browser. Type this code there to finish:</p>
<p class="code" aria-label="${code.split('').join(' ')}">${code}</p>
<p class="note">It works once, for 10 minutes. If you did not ask to sign in, close this page.</p>`)
  },

  dead(brand: PageBrand): Html {
    return layout(brand, 'This link no longer works', html`<p>The sign-in link is unknown, has been used already, or has expired. Go back to ${brand.appName} and ask for a new one.</p>`)
  },
}

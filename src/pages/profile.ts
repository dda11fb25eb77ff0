import { html, type Html } from '../html.ts'
import { continueLink, form, layout, type PageBrand } from './views.ts'

/**
 * The page behind the change-of-address link (src/profile/), in the mailed-link pages' style: its
 * GET only shows a button (mail scanners fetch links and never submit forms), its POST changes the
 * address.
 */
export const profilePages = {
  confirm(brand: PageBrand, token: string, newEmail: string): Html {
    return layout(brand, 'Confirm your new e-mail address', html`<p>Press the button to make <strong>${newEmail}</strong> the address of your ${brand.appName} account. Every other device signed in to the account will be signed out.</p>
${form('confirm-email-change', [], { token }, 'Use this address')}`)
  },

  changed(brand: PageBrand, email: string): Html {
    return layout(brand, 'Address changed', html`<p>The address of your account is now <strong>${email}</strong>. Sign in with it from now on.</p>
${continueLink(brand)}`)
  },

  taken(brand: PageBrand): Html {
    return layout(brand, 'This address is already in use', html`<p>Another ${brand.appName} account uses this address now, so yours keeps its current address. Nothing was changed.</p>`)
  },

  dead(brand: PageBrand): Html {
    return layout(brand, 'This link no longer works', html`<p>The link is unknown, has been used already, or has expired. Sign in and ask for the change again.</p>`)
  },
}

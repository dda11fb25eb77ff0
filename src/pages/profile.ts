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

  cancel(brand: PageBrand, token: string, newEmail: string): Html {
    return layout(brand, 'Cancel the change of address', html`<p>Someone asked to move your ${brand.appName} account to <strong>${newEmail}</strong>. Press the button to cancel the change and sign out the session that asked for it.</p>
${form('cancel-email-change', [], { token }, 'Cancel the change')}`)
  },

  cancelled(brand: PageBrand): Html {
    return layout(brand, 'The change was cancelled', html`<p>Your account keeps its address, and the session that asked for the change was signed out. If you did not ask for it, choose a new password and sign out of every device: someone else may know your password.</p>
${continueLink(brand)}`)
  },

  nothingToCancel(brand: PageBrand): Html {
    return layout(brand, 'Nothing to cancel', html`<p>No change of address is waiting for this link: it was cancelled already, it expired, it ended when the account's sessions were signed out, or the change was made. If your address was changed without you, contact the ${brand.appName} team.</p>`)
  },

  dead(brand: PageBrand): Html {
    return layout(brand, 'This link no longer works', html`<p>The link is unknown, has been used already, or has expired. Sign in and ask for the change again.</p>`)
  },
}

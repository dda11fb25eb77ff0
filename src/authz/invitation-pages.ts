import type { FastifyInstance, FastifyReply } from 'fastify'
import { html, type Html } from '../html.ts'
import { requestContext } from '../http/request.ts'
import { installFormPages, type Form } from '../pages/routes.ts'
import { continueLink, form, layout, type PageBrand } from '../pages/views.ts'
import type { InvitationPreview, InvitationService } from './invitations.ts'
import type { OrganizationsMode } from './organizations.ts'

/**
 * The invitation link's pages, in the mailed-link pages' style: the GET shows what the invitation is
 * and one button, and uses nothing up (mail scanners and link previews fetch links, never submit
 * forms); the POST accepts it.
 */
export const invitationPages = {
  confirm(brand: PageBrand, token: string, invitation: InvitationPreview): Html {
    return layout(brand, `Join ${invitation.organization}`, html`<p>${invitation.inviter} invited <strong>${invitation.email}</strong> to join the organisation <strong>${invitation.organization}</strong> on ${brand.appName}, as ${invitation.roles.join(', ')}.</p>
<p>Press the button to join with the ${brand.appName} account that has this address.</p>
${form('accept-invitation', [], { token }, 'Accept the invitation')}`)
  },

  accepted(brand: PageBrand, organization: string): Html {
    return layout(brand, 'You have joined', html`<p>Your account is now a member of <strong>${organization}</strong>. Sign in, or refresh the app you are signed in to, to work in it.</p>
${continueLink(brand)}`)
  },

  noAccount(brand: PageBrand): Html {
    return layout(brand, 'Create or confirm the account first', html`<p>The invitation is for the ${brand.appName} account with the invited address, and there is no such account with a confirmed address yet. Create the account with this address, or confirm its address with the link mailed to it, then open the invitation's link again. Nothing was accepted, and the invitation still works until it expires.</p>
${continueLink(brand)}`)
  },

  limit(brand: PageBrand): Html {
    return layout(brand, 'The invitation could not be accepted', html`<p>Joining would take your account past a limit: it belongs to as many organisations as an account may, or the roles of the invitation would give it more permissions than a sign-in can carry. Nothing was accepted; leave an organisation, or ask for an invitation with fewer roles.</p>`)
  },

  dead(brand: PageBrand): Html {
    return layout(brand, 'This invitation no longer works', html`<p>The link is unknown, has been used already, was withdrawn or has expired. Ask the person who invited you for a new invitation.</p>`)
  },
}

/** `{PUBLIC_URL}/accept-invitation`, beside the other mailed-link pages; absent with ORGANIZATIONS=off. */
export async function invitationPageRoutes(app: FastifyInstance, deps: { invitations: InvitationService; brand: PageBrand; ownOrigin: string; mode: OrganizationsMode }): Promise<void> {
  const { invitations, brand } = deps
  if (deps.mode === 'off') return
  // Only urlencoded bodies, cross-site POSTs refused with a page, the pages' own policy.
  installFormPages(app, { brand, ownOrigin: deps.ownOrigin })
  const tokenOf = (value: unknown) => (typeof value === 'string' && value.length > 0 && value.length <= 256 ? value : null)
  const send = (reply: FastifyReply, status: number, page: Html) => reply.code(status).type('text/html; charset=utf-8').send(page.value)

  app.get<{ Querystring: { token?: unknown } }>('/accept-invitation', async (request, reply) => {
    const token = tokenOf(request.query.token)
    const preview = token ? await invitations.preview(token) : null
    if (!token || !preview) return send(reply, 400, invitationPages.dead(brand))
    return send(reply, 200, invitationPages.confirm(brand, token, preview))
  })

  // Like the verification page: a 256-bit token is not guessed, so no per-IP budget is spent on it.
  app.post('/accept-invitation', async (request, reply) => {
    const token = tokenOf(((request.body as Form | undefined) ?? {}).token)
    const outcome = token ? await invitations.acceptByLink(token, requestContext(request)) : ({ accepted: false, reason: 'dead' } as const)
    if (outcome.accepted) return send(reply, 200, invitationPages.accepted(brand, outcome.organization.name))
    if (outcome.reason === 'no_account') return send(reply, 409, invitationPages.noAccount(brand))
    return outcome.reason === 'limit' ? send(reply, 409, invitationPages.limit(brand)) : send(reply, 400, invitationPages.dead(brand))
  })
}

import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance, FastifyReply, preHandlerHookHandler } from 'fastify'
import { Accepted, Me } from '../auth/schemas.ts'
import type { AuthService } from '../auth/service.ts'
import { principalOf } from '../http/bearer.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import { ok } from '../http/schemas.ts'
import type { Limits } from '../limits/limits.ts'
import { profilePages } from '../pages/profile.ts'
import { installFormPages, type Form } from '../pages/routes.ts'
import type { PageBrand } from '../pages/views.ts'
import type { Html } from '../html.ts'
import { ChangeEmailBody, UpdateMeBody } from './schemas.ts'
import type { ProfileService } from './service.ts'

const tags = ['account']
const security = [{ bearer: [] }]

/** The user's own profile (bearer): the name at once, the address through a mailed link. */
export async function protectedProfileRoutes(
  fastify: FastifyInstance,
  deps: { profile: ProfileService; auth: Pick<AuthService, 'me'>; limits: Limits; hasher: { saturated(): boolean }; recent: preHandlerHookHandler },
): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  const { profile, auth, limits, hasher, recent } = deps

  app.patch('/auth/me', {
    bodyLimit: AUTH_BODY_LIMIT,
    schema: {
      tags, security, operationId: 'updateMe',
      description: 'Changes the name, the user\'s own user_metadata (a JSON object of at most 2 KB serialised, never put into a token; null clears it), or both.',
      body: UpdateMeBody, response: { 200: Me },
    },
  }, async (request) => {
    const principal = principalOf(request)
    await profile.update(principal, request.body, requestContext(request))
    return ok(await auth.me(principal))
  })

  app.post('/auth/me/email', {
    bodyLimit: AUTH_BODY_LIMIT,
    // Throttled like login: the per-IP login limit here, the per-account delay in the service.
    onRequest: [refuseWhenSaturated(hasher), limitByIp(limits, 'login')],
    preHandler: recent,
    schema: {
      tags, security, operationId: 'changeEmail',
      description: 'Mails a link to the new address and a notice to the old one; the address changes when the link is used (page GET/POST /confirm-email-change). The same 202 whether or not another account has the new address.',
      body: ChangeEmailBody,
      response: { 202: Accepted },
    },
  }, async (request, reply) => {
    await profile.requestEmailChange(principalOf(request), request.body, requestContext(request))
    return reply.code(202).send(ok({}))
  })
}

/** The change-of-address link's page, at the root of PUBLIC_URL beside the other mailed-link pages. */
export async function profilePageRoutes(app: FastifyInstance, deps: { profile: ProfileService; brand: PageBrand; ownOrigin: string }): Promise<void> {
  const { profile, brand } = deps
  installFormPages(app, { brand, ownOrigin: deps.ownOrigin })
  const tokenOf = (value: unknown) => (typeof value === 'string' && value.length > 0 && value.length <= 256 ? value : null)
  const send = (reply: FastifyReply, status: number, page: Html) => reply.code(status).type('text/html; charset=utf-8').send(page.value)

  // GET (and HEAD): the button only. Nothing is used up: scanners and link previews fetch links.
  app.get<{ Querystring: { token?: unknown } }>('/confirm-email-change', async (request, reply) => {
    const token = tokenOf(request.query.token)
    const newEmail = token ? await profile.pendingChange(token) : null
    if (!token || newEmail === null) return send(reply, 400, profilePages.dead(brand))
    return send(reply, 200, profilePages.confirm(brand, token, newEmail))
  })

  // Like the verification page: a 256-bit token is not guessed, so no per-IP budget is spent on it.
  app.post('/confirm-email-change', async (request, reply) => {
    const token = tokenOf(((request.body as Form | undefined) ?? {}).token)
    const outcome = token ? await profile.confirmEmailChange(token, requestContext(request)) : ({ changed: false, reason: 'dead' } as const)
    if (outcome.changed) return send(reply, 200, profilePages.changed(brand, outcome.email))
    return outcome.reason === 'taken' ? send(reply, 409, profilePages.taken(brand)) : send(reply, 400, profilePages.dead(brand))
  })

  // The notice to the old address: GET shows the button, POST cancels (docs/profile.md).
  app.get<{ Querystring: { token?: unknown } }>('/cancel-email-change', async (request, reply) => {
    const token = tokenOf(request.query.token)
    const newEmail = token ? await profile.pendingChange(token, 'cancel') : null
    if (!token || newEmail === null) return send(reply, 400, profilePages.nothingToCancel(brand))
    return send(reply, 200, profilePages.cancel(brand, token, newEmail))
  })

  app.post('/cancel-email-change', async (request, reply) => {
    const token = tokenOf(((request.body as Form | undefined) ?? {}).token)
    const cancelled = token ? await profile.cancelEmailChange(token, requestContext(request)) : false
    return cancelled ? send(reply, 200, profilePages.cancelled(brand)) : send(reply, 400, profilePages.nothingToCancel(brand))
  })
}

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { LifecycleService } from '../accounts/lifecycle.ts'
import { AUTH_BODY_LIMIT, requestContext } from '../http/request.ts'
import type { AuthService } from '../auth/service.ts'
import { AppError } from '../errors.ts'
import type { Html } from '../html.ts'
import { logServerError, toAppError } from '../http/errors.ts'
import { limitByIp, refuseWhenSaturated } from '../http/ratelimit.ts'
import type { Limits } from '../limits/limits.ts'
import type { BotProtection } from '../captcha/verifier.ts'
import { widgetSources } from '../captcha/widget.ts'
import { PAGE_CSP, pageCsp } from './style.ts'
import { pages, type FieldErrors, type PageBrand } from './views.ts'

export interface PageDeps {
  auth: AuthService
  lifecycle: LifecycleService
  limits: Limits
  hasher: { saturated(): boolean }
  brand: PageBrand
  /** Bot protection: the widget in the forms that mail an address, and its check when they are posted. */
  captcha: BotProtection
  /** PUBLIC_URL's origin: the only site whose pages may post these forms. */
  ownOrigin: string
}

/** Tokens are 43 characters; anything much longer is not one and is not worth hashing. */
const TOKEN_MAX = 256

export type Form = Record<string, string>

/**
 * A urlencoded body as a prototype-less object of its first value per name: `__proto__` or
 * `constructor` are ordinary keys here, and a repeated field cannot smuggle a second value past
 * a check made on the first.
 */
export function parseForm(body: string): Form {
  const form: Form = Object.create(null)
  for (const [name, value] of new URLSearchParams(body)) if (!(name in form)) form[name] = value
  return form
}

function formOf(request: FastifyRequest): Form {
  return (request.body as Form | undefined) ?? Object.create(null)
}

/** A repeated query parameter arrives as an array; only one plain string can be a token. */
function tokenFrom(value: unknown): string | null {
  return typeof value === 'string' && value.length > 0 && value.length <= TOKEN_MAX ? value : null
}

function send(reply: FastifyReply, status: number, page: Html): FastifyReply {
  return reply.code(status).type('text/html; charset=utf-8').send(page.value)
}

function fieldErrors(error: unknown, rename: Record<string, string> = {}): FieldErrors | null {
  if (!(error instanceof AppError) || error.code !== 'VALIDATION_ERROR' || !error.details) return null
  const errors: FieldErrors = {}
  for (const detail of error.details) {
    const name = rename[detail.field] ?? detail.field
    errors[name] ??= `This ${detail.field === 'email' ? 'address' : 'password'} ${detail.message}.`
  }
  return errors
}

/** What a person sees when something other than their input went wrong, by status. */
export function problemPage(brand: PageBrand, error: AppError, requestId: string): { status: number; page: Html } {
  const page = (title: string, message: string, reference?: string) => ({ status: error.status, page: pages.problem(brand, title, message, reference) })
  switch (error.status) {
    case 413:
      return page('That was too much', 'The form sent more data than this page accepts. Go back and try again.')
    case 415:
      return page('That form could not be read', 'This page accepts only its own form. Go back, reload the page and try again.')
    case 429: {
      const seconds = Number(error.headers['retry-after'] ?? 60)
      const wait = seconds < 120 ? `${seconds} seconds` : `${Math.ceil(seconds / 60)} minutes`
      return page('Too many attempts', `Too many requests came from your network. Try again in about ${wait}.`)
    }
    case 403:
      if (error.code === 'ORIGIN_NOT_ALLOWED') {
        return page('This form was sent from another site', `For your safety, ${brand.appName} accepts this form only from its own pages, so nothing was sent or changed. Open the link in your mail, or type the page's address yourself, and try again there.`)
      }
      return page('A secure connection is needed', 'Open this page with an https:// address.')
    case 503:
      return page('Busy right now', 'The service is busy or briefly unavailable. Try again in a moment.')
    default:
      if (error.status < 500) return page('That request could not be used', 'Something in the request was not right. Go back to the mail and open the link again.')
      return page('Something went wrong', 'We could not finish this on our side. Try again in a few minutes.', requestId)
  }
}

/**
 * The pages a person reaches from a mailed link, rendered on the server and working without
 * JavaScript. They call the same services as the JSON API, so limits, audit events, revocation
 * and enumeration safety are those of the API. In their own scope: only here are form bodies
 * parsed, and every failure answers as a page rather than the JSON envelope.
 */
/**
 * Cross-site form posts are refused (docs/pages.md): a foreign page must not make a visitor's
 * browser spend a verification or reset token, or send mail in their name. A browser says where a
 * request comes from in Sec-Fetch-Site (trusted first: only same-origin and a typed-in or
 * bookmarked navigation, `none`, pass) and, in older browsers, in Origin. `Origin: null` is what
 * Chromium sends from our own pages, which are no-referrer, so it is no proof of a foreign site.
 * A request with neither header comes from a program (curl), not a browser a site could drive.
 */
export function assertSameSite(request: FastifyRequest, ownOrigin: string): void {
  const site = request.headers['sec-fetch-site']
  if (site !== undefined) {
    if (site !== 'same-origin' && site !== 'none') throw new AppError('ORIGIN_NOT_ALLOWED')
    return
  }
  const origin = request.headers.origin
  if (origin !== undefined && origin !== ownOrigin && origin !== 'null') throw new AppError('ORIGIN_NOT_ALLOWED')
}

/**
 * What every scope of form pages shares (the mailed-link pages here, the provider's and the e-mailed
 * sign-in's): only urlencoded bodies, parsed without prototypes; cross-site POSTs refused before
 * anything is read; the pages' own policy instead of the API's deny-all one (unless `csp` is null:
 * the routes set their own); and every failure answered as a page, never the JSON envelope.
 */
export function installFormPages(app: FastifyInstance, options: { brand: PageBrand; ownOrigin: string; csp?: string | null; answer?: (reply: FastifyReply, status: number, page: Html) => FastifyReply; problem?: (error: AppError, requestId: string) => { status: number; page: Html } }): void {
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: AUTH_BODY_LIMIT }, (_request, body, done) => {
    done(null, parseForm(body as string))
  })
  const csp = options.csp === undefined ? PAGE_CSP : options.csp
  // The common headers (no-store, no-referrer, nosniff, HSTS) are set for every answer already.
  if (csp !== null) {
    app.addHook('onSend', async (_request, reply) => {
      reply.header('content-security-policy', csp)
    })
  }
  // Before the rate limits and the body: a refused cross-site post costs the visitor nothing.
  app.addHook('onRequest', async (request) => {
    if (request.method === 'POST') assertSameSite(request, options.ownOrigin)
  })
  app.setErrorHandler((error, request, reply) => {
    const appError = toAppError(error)
    logServerError(request, appError, error)
    for (const [name, value] of Object.entries(appError.headers)) reply.header(name, value)
    const { status, page } = (options.problem ?? ((e: AppError, id: string) => problemPage(options.brand, e, id)))(appError, request.id)
    return (options.answer ?? send)(reply, status, page)
  })
}

export async function pageRoutes(app: FastifyInstance, deps: PageDeps): Promise<void> {
  const { auth, lifecycle, limits, hasher, brand, ownOrigin, captcha } = deps
  const widget = captcha.widget
  // Only the pages with a form that mails an address show the widget, and only they allow its
  // provider's script and frames; every other page keeps the policy that allows no script at all.
  const formCsp = widget ? pageCsp([], widgetSources(widget)) : PAGE_CSP
  const show = (reply: FastifyReply, status: number, page: Html, csp = PAGE_CSP) => send(reply.header('content-security-policy', csp), status, page)
  const showForm = (reply: FastifyReply, status: number, page: Html) => show(reply, status, page, formCsp)
  installFormPages(app, { brand, ownOrigin, csp: null, answer: show })

  /** The bot check of a posted form that mails an address, before the address is looked at (so the answer never depends on it). */
  const captchaRefusal = async (request: FastifyRequest): Promise<FieldErrors | null> => {
    const refused = await captcha.refuseForm(formOf(request), request.ip)
    return refused === null ? null : { captcha: refused }
  }

  // GET: show the button. The token is checked but never used up here (scanners fetch links);
  // it moves from the URL into a hidden field, and the POST uses it.
  app.get<{ Querystring: { token?: unknown } }>('/verify-email', async (request, reply) => {
    const token = tokenFrom(request.query.token)
    if (!token || !(await auth.verificationTokenIsLive(token))) return showForm(reply, 400, pages.verifyLinkDead(brand, widget))
    return show(reply, 200, pages.verifyConfirm(brand, token))
  })

  app.post('/verify-email', async (request, reply) => {
    const token = tokenFrom(formOf(request).token)
    if (!token) return showForm(reply, 400, pages.verifyLinkDead(brand, widget))
    try {
      const { email } = await auth.verifyEmail(token, requestContext(request))
      return show(reply, 200, pages.verified(brand, email))
    } catch (error) {
      if (error instanceof AppError && error.code === 'INVALID_VERIFICATION_TOKEN') return showForm(reply, 400, pages.verifyLinkDead(brand, widget))
      throw error
    }
  })

  app.post('/resend-verification', { onRequest: limitByIp(limits, 'mail') }, async (request, reply) => {
    const email = formOf(request).email ?? ''
    const refused = await captchaRefusal(request)
    if (refused) return showForm(reply, 400, pages.resendForm(brand, widget, refused, email))
    try {
      await auth.resendVerification(email)
    } catch (error) {
      const errors = fieldErrors(error)
      if (errors) return showForm(reply, 400, pages.resendForm(brand, widget, errors, email))
      throw error
    }
    return show(reply, 200, pages.mailOnItsWay(brand))
  })

  app.get<{ Querystring: { token?: unknown } }>('/reset-password', async (request, reply) => {
    const token = tokenFrom(request.query.token)
    const email = token ? await lifecycle.resetTokenOwner(token) : null
    if (!token || !email) return showForm(reply, 400, pages.resetLinkDead(brand, widget))
    return show(reply, 200, pages.resetForm(brand, token, email))
  })

  app.post('/reset-password', { onRequest: refuseWhenSaturated(hasher) }, async (request, reply) => {
    const form = formOf(request)
    const token = tokenFrom(form.token)
    const email = token ? await lifecycle.resetTokenOwner(token) : null
    if (!token || !email) return showForm(reply, 400, pages.resetLinkDead(brand, widget))
    const password = form.password ?? ''
    // Checked here, before the service sees anything, so a typo consumes nothing.
    if (password !== (form.password_confirmation ?? '')) {
      return show(reply, 400, pages.resetForm(brand, token, email, { password_confirmation: 'The two passwords are not the same.' }))
    }
    try {
      await lifecycle.resetPassword(token, password, requestContext(request))
    } catch (error) {
      const errors = fieldErrors(error)
      if (errors) return show(reply, 400, pages.resetForm(brand, token, email, errors))
      if (error instanceof AppError && error.code === 'INVALID_RESET_TOKEN') return showForm(reply, 400, pages.resetLinkDead(brand, widget))
      throw error
    }
    return show(reply, 200, pages.passwordChanged(brand))
  })

  app.get('/forgot-password', async (_request, reply) => showForm(reply, 200, pages.forgotForm(brand, widget)))

  app.post('/forgot-password', { onRequest: limitByIp(limits, 'mail') }, async (request, reply) => {
    const email = formOf(request).email ?? ''
    const refused = await captchaRefusal(request)
    if (refused) return showForm(reply, 400, pages.forgotForm(brand, widget, refused, email))
    try {
      lifecycle.forgotPassword(email, requestContext(request))
    } catch (error) {
      const errors = fieldErrors(error)
      if (errors) return showForm(reply, 400, pages.forgotForm(brand, widget, errors, email))
      throw error
    }
    return show(reply, 200, pages.mailOnItsWay(brand))
  })
}

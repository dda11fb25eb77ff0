import type { FastifyRequest, preHandlerHookHandler } from 'fastify'
import { AppError, causeChain } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { OncePerWindow } from '../once-per-window.ts'
import { PROVIDERS, type CaptchaProvider } from './providers.ts'
import type { CaptchaWidget } from './widget.ts'

/** CAPTCHA_* (src/config.ts): set only when bot protection is on. */
export interface CaptchaSettings {
  provider: CaptchaProvider
  secret: string
  /** Public: the widget on the pages is rendered with it (and hCaptcha checks it matches the secret). */
  siteKey: string
  verifyUrl: string
  timeoutMs: number
}

/**
 * What became of one check. `unavailable` covers everything that is not the provider's judgement
 * of the token (no answer in time, a refused connection, a 5xx, an answer that is not its JSON, or
 * the provider refusing our own secret): the request is then refused with 503, never let through.
 */
export type CaptchaOutcome = 'missing' | 'refused' | 'passed' | 'unavailable'

/**
 * Error codes by which the provider says the fault is the request we made, not the visitor's token
 * (a wrong or missing secret, a site key of another account, its own failure). Treating them as a
 * refusal would blame every visitor for a misconfiguration; they are a 503 and an error in the log.
 */
const OUR_FAULT = new Set([
  'missing-input-secret', 'invalid-input-secret', 'sitekey-secret-mismatch', 'invalid-sitekey',
  'bad-request', 'missing-remoteip', 'invalid-remoteip', 'internal-error',
])

/** An answer bigger than this is not a siteverify verdict. */
const MAX_ANSWER_BYTES = 64 * 1024

export interface CaptchaCounters {
  inc(labels: { outcome: CaptchaOutcome }): void
}

/**
 * Checks a widget's token with the provider's siteverify API (docs/SECURITY.md, "Bot protection").
 * The check runs before the route does anything that costs (a password hash, a database read, a
 * mail) and before anything about the address is looked at, so its answer (400, 503 or the route's
 * own) never depends on whether an account exists.
 */
export class CaptchaVerifier {
  /** One warning a minute per kind of failure: an outage under load must not flood the log. */
  private readonly warned = new OncePerWindow(60_000, 100)

  constructor(
    readonly settings: CaptchaSettings,
    private readonly logger: Logger,
    private readonly counters?: CaptchaCounters,
  ) {}

  /** The provider's judgement of `token` for a visitor at `remoteIp`; never throws. */
  async judge(token: string | undefined, remoteIp: string): Promise<CaptchaOutcome> {
    const outcome = token === undefined || token === '' ? 'missing' : await this.askProvider(token, remoteIp)
    this.counters?.inc({ outcome })
    return outcome
  }

  /** Passes, or throws the answer: 400 VALIDATION_ERROR on `captcha`, or 503. */
  async check(token: string | undefined, remoteIp: string): Promise<void> {
    const outcome = await this.judge(token, remoteIp)
    if (outcome === 'passed') return
    throw captchaError(outcome)
  }

  private async askProvider(token: string, remoteIp: string): Promise<CaptchaOutcome> {
    const { provider, secret, siteKey, verifyUrl, timeoutMs } = this.settings
    const form = new URLSearchParams({ secret, response: token, remoteip: remoteIp })
    // hCaptcha then also refuses a token solved for another site key of the same account.
    if (provider === 'hcaptcha') form.set('sitekey', siteKey)
    let status: number
    let text: string
    try {
      const answer = await fetch(verifyUrl, {
        method: 'POST',
        headers: { accept: 'application/json' },
        body: form,
        // A redirect would carry the secret to wherever it points (307 and 308 resend the body).
        redirect: 'error',
        // The whole exchange, body included: a provider that stops answering is a 503 in seconds.
        signal: AbortSignal.timeout(timeoutMs),
      })
      status = answer.status
      text = await answer.text()
    } catch (error) {
      const reason = error instanceof Error && error.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : causeChain(error)
      return this.unavailable('unreachable', reason)
    }
    if (status >= 500) return this.unavailable('status', `answered ${status}`)
    const verdict = parseVerdict(text)
    if (!verdict) return this.unavailable('garbage', `answered ${status} with something other than a siteverify verdict`)
    if (verdict.success) {
      // A success under an error status is no verdict we can trust.
      return status === 200 ? 'passed' : this.unavailable('status', `answered ${status} with success`)
    }
    const ours = verdict.codes.filter((code) => OUR_FAULT.has(code))
    if (ours.length > 0) return this.unavailable('configuration', `refused the request: ${ours.join(', ')} (check CAPTCHA_SECRET and CAPTCHA_SITE_KEY)`, 'error')
    return 'refused'
  }

  private unavailable(kind: string, reason: string, level: 'warn' | 'error' = 'warn'): CaptchaOutcome {
    if (this.warned.first(kind, Date.now())) {
      this.logger[level]({ provider: this.settings.provider, reason }, 'captcha check impossible: refusing the request (503)')
    }
    return 'unavailable'
  }
}

/** `{success: boolean, "error-codes"?: string[]}`, or null for anything else. */
function parseVerdict(text: string): { success: boolean; codes: string[] } | null {
  if (text.length > MAX_ANSWER_BYTES) return null
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return null
  }
  if (typeof value !== 'object' || value === null || typeof (value as { success?: unknown }).success !== 'boolean') return null
  const codes = (value as { 'error-codes'?: unknown })['error-codes']
  return { success: (value as { success: boolean }).success, codes: Array.isArray(codes) ? codes.filter((code): code is string => typeof code === 'string') : [] }
}

function captchaError(outcome: Exclude<CaptchaOutcome, 'passed'>): AppError {
  if (outcome === 'unavailable') {
    return new AppError('SERVICE_UNAVAILABLE', { message: 'The bot check cannot be verified right now; try again in a moment.', headers: { 'retry-after': '5' } })
  }
  const message = outcome === 'missing' ? 'is required: complete the check and send its token as captcha_token' : 'was not accepted: complete the check again (a token is used once and expires)'
  return new AppError('VALIDATION_ERROR', { details: [{ field: 'captcha', message }] })
}

/**
 * Bot protection as the routes see it: a guard for the JSON routes and a check for the pages'
 * forms, or nothing at all when CAPTCHA_PROVIDER is unset. Off, `captcha_token` is accepted and
 * ignored, so a client may always send it.
 */
export class BotProtection {
  constructor(readonly verifier: CaptchaVerifier | null) {}

  get enabled(): boolean {
    return this.verifier !== null
  }

  /** What a page needs to render the widget, or null when off. */
  get widget(): CaptchaWidget | null {
    return this.verifier && { provider: this.verifier.settings.provider, siteKey: this.verifier.settings.siteKey }
  }

  /**
   * Route options for a JSON route whose body may carry `captcha_token`: a preHandler, so the body
   * is parsed and validated (a malformed request costs no call to the provider) but the handler
   * has done nothing yet. Spread into the route's options; empty when off.
   */
  guard(): { preHandler?: preHandlerHookHandler } {
    const verifier = this.verifier
    if (!verifier) return {}
    return {
      preHandler: async (request: FastifyRequest) => {
        const token = (request.body as { captcha_token?: string } | undefined)?.captcha_token
        await verifier.check(token, request.ip)
      },
    }
  }

  /** A page's form: the token is in the field the widget added. Nothing to do when off. */
  async judgeForm(form: Record<string, string>, remoteIp: string): Promise<CaptchaOutcome> {
    if (!this.verifier) return 'passed'
    return this.verifier.judge(form[PROVIDERS[this.verifier.settings.provider].formField], remoteIp)
  }

  /**
   * A posted page form that mails an address (the mailed-link pages, the provider's e-mailed code):
   * null when the check passed (or is off), else what to show under the widget when the form comes
   * back. A provider that cannot be asked throws the 503, never a pass.
   */
  async refuseForm(form: Record<string, string>, remoteIp: string): Promise<string | null> {
    const outcome = await this.judgeForm(form, remoteIp)
    if (outcome === 'passed') return null
    if (outcome === 'unavailable') throw new AppError('SERVICE_UNAVAILABLE', { headers: { 'retry-after': '5' } })
    return outcome === 'missing' ? 'Complete the check above, then send the form again.' : 'The check was not accepted. Complete it again, then send the form.'
  }
}

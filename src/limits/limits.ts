import { createHash, randomBytes } from 'node:crypto'
import type { Clock } from '../clock.ts'
import { AppError } from '../errors.ts'
import type { CounterStore, DelayPolicy } from './store.ts'

export interface LimitSettings {
  loginPerIpPerMinute: number
  loginFreeFailures: number
  loginMaxDelaySeconds: number
  registerPerIpPerHour: number
  mailPerIpPerHour: number
  mailPerAddressPerHour: number
  apiKeyFailuresPerIpPerMinute: number
  /** Dynamic client registrations (RFC 7591) per client IP per hour. */
  clientRegistrationsPerIpPerHour: number
}

export type IpRule = 'login' | 'register' | 'mail' | 'client_registration'

/**
 * One attempt counted by claimLoginAttempt, before its credential is judged (docs/SECURITY.md, Abuse
 * limits). Only a credential judged wrong may stay counted: the caller says so with judgedWrong()
 * as soon as it has that verdict, and the attempt is taken back when it is disposed otherwise
 * (`await using attempt = ...`): when the database, the hasher or anything else failed before a
 * verdict (a 503 must never throttle anyone), when the credential proved right without completing
 * a sign-in (the password step of an account with a second factor), or when the sign-in ended for
 * another reason (a dead mfa_token, a disabled account). After a completed sign-in cleared the
 * count the take-back finds nothing to remove. It removes this attempt only, so it can neither undo
 * a concurrent wrong guess nor one made after a success.
 */
export class ClaimedAttempt implements AsyncDisposable {
  private wrong = false
  private taken = false

  constructor(private readonly unclaim: () => Promise<void>) {}

  /** The credential was judged wrong: this attempt stays a failure of the account. */
  judgedWrong(): void {
    this.wrong = true
  }

  /** Takes the attempt back now; once only, and never one judged wrong. */
  async takeBack(): Promise<void> {
    if (this.wrong || this.taken) return
    this.taken = true
    // The stores do not throw (RedisStore answers from this instance's counters while Redis is
    // away); were one to, a failed take-back leaves one failure too many, never an error in place
    // of the answer the request already has.
    await this.unclaim().catch(() => {})
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.takeBack()
  }
}

const MINUTE = 60_000
const HOUR = 3_600_000
const FAILURE_MEMORY_MS = 24 * HOUR

export interface LimitState {
  limit: number
  remaining: number
  resetSeconds: number
}

/** RateLimit-* (draft-ietf-httpapi-ratelimit-headers) and, when refused, Retry-After. */
function limitHeaders(state: LimitState, retryAfterSeconds?: number): Record<string, string> {
  const headers: Record<string, string> = {
    'ratelimit-limit': String(state.limit),
    'ratelimit-remaining': String(Math.max(0, state.remaining)),
    'ratelimit-reset': String(state.resetSeconds),
  }
  if (retryAfterSeconds !== undefined) headers['retry-after'] = String(retryAfterSeconds)
  return headers
}

function rateLimited(state: LimitState, retryAfterSeconds: number): AppError {
  return new AppError('RATE_LIMITED', { headers: limitHeaders(state, retryAfterSeconds) })
}

/** Addresses never reach the counter store in the clear (it may be a shared Redis). */
function addressKey(email: string): string {
  return createHash('sha256').update(email).digest('base64url').slice(0, 32)
}

/**
 * The abuse limits (docs/SECURITY.md): per client IP on the anonymous routes, per target address on the
 * mail-sending routes, and a progressive delay per account on login.
 */
export class Limits {
  constructor(
    private readonly store: CounterStore,
    private readonly clock: Clock,
    private readonly settings: LimitSettings,
  ) {}

  private rule(rule: IpRule): { limit: number; windowMs: number } {
    switch (rule) {
      case 'login':
        return { limit: this.settings.loginPerIpPerMinute, windowMs: MINUTE }
      case 'register':
        return { limit: this.settings.registerPerIpPerHour, windowMs: HOUR }
      case 'mail':
        return { limit: this.settings.mailPerIpPerHour, windowMs: HOUR }
      case 'client_registration':
        return { limit: this.settings.clientRegistrationsPerIpPerHour, windowMs: HOUR }
    }
  }

  /** Fixed windows named by their start, so every instance sharing a store counts in the same one. */
  private async count(name: string, limit: number, windowMs: number): Promise<{ allowed: boolean; state: LimitState }> {
    const now = this.clock.now()
    const window = Math.floor(now / windowMs)
    const count = await this.store.increment(`${name}:${window}`, windowMs * 2)
    const resetSeconds = Math.max(1, Math.ceil(((window + 1) * windowMs - now) / 1000))
    return { allowed: count <= limit, state: { limit, remaining: limit - count, resetSeconds } }
  }

  /** Counts one request from `ip`; over the limit throws RATE_LIMITED. Returns the headers to send. */
  async perIp(rule: IpRule, ip: string): Promise<Record<string, string>> {
    const { limit, windowMs } = this.rule(rule)
    const { allowed, state } = await this.count(`ip:${rule}:${ip}`, limit, windowMs)
    if (!allowed) throw rateLimited(state, state.resetSeconds)
    return limitHeaders(state)
  }

  /**
   * Whether another mail may go to this address this hour. Over the limit nothing is sent, but the
   * answer does not change, so the limit cannot be used to learn which addresses have accounts.
   */
  async mailAllowed(email: string): Promise<boolean> {
    return (await this.count(`mail:${addressKey(email)}`, this.settings.mailPerAddressPerHour, HOUR)).allowed
  }

  /**
   * The same per-address count, for a caller who is signed in and asks for mail to an address of
   * their choosing (a change of address): over the limit, RATE_LIMITED, since that caller learns
   * nothing about other accounts from it and must not wait for a mail that is never sent.
   */
  async assertMailAllowed(email: string): Promise<void> {
    const { allowed, state } = await this.count(`mail:${addressKey(email)}`, this.settings.mailPerAddressPerHour, HOUR)
    if (!allowed) throw rateLimited(state, state.resetSeconds)
  }

  /**
   * Failed API keys per client IP: only failures count (an operator's tool making many good calls
   * is never slowed); past the limit every key is refused until the window ends, good or not.
   */
  async assertApiKeyAllowed(ip: string): Promise<void> {
    const limit = this.settings.apiKeyFailuresPerIpPerMinute
    const now = this.clock.now()
    const window = Math.floor(now / MINUTE)
    const failures = Number((await this.store.get(`apikey:failures:${ip}:${window}`)) ?? 0)
    if (failures >= limit) {
      const resetSeconds = Math.max(1, Math.ceil(((window + 1) * MINUTE - now) / 1000))
      throw rateLimited({ limit, remaining: 0, resetSeconds }, resetSeconds)
    }
  }

  async apiKeyFailed(ip: string): Promise<void> {
    await this.store.increment(`apikey:failures:${ip}:${Math.floor(this.clock.now() / MINUTE)}`, MINUTE * 2)
  }

  private loginKey(email: string): string {
    return `login:attempts:${addressKey(email)}`
  }

  private delayPolicy(): DelayPolicy {
    return { freeFailures: this.settings.loginFreeFailures, maxDelayMs: this.settings.loginMaxDelaySeconds * 1000 }
  }

  /**
   * One attempt to prove the account's credential (a password, a second-factor code, a passkey, an
   * e-mailed code), counted before it is judged (docs/SECURITY.md, Abuse limits; docs/mfa.md): the
   * attempt is recorded as a failure at once, atomically across instances, so N guesses sent at
   * once count N; a later success (loginSucceeded) clears the count, and an attempt that is not
   * judged wrong is taken back (ClaimedAttempt). Keyed by the address whether or not an account has
   * it, so the answer is the same for both. Past the free failures each attempt waits a delay that
   * doubles up to a cap (the owner can always try again after at most that, so nobody can lock an
   * account for good); one refused with RATE_LIMITED is neither judged nor counted.
   */
  async claimLoginAttempt(email: string): Promise<ClaimedAttempt> {
    const key = this.loginKey(email)
    // The attempt's own id in the account's set, so its take-back removes it and nothing else.
    const id = randomBytes(12).toString('base64url')
    const waitMs = await this.store.claimAttempt(key, id, this.clock.now(), this.delayPolicy(), FAILURE_MEMORY_MS)
    if (waitMs > 0) {
      const seconds = Math.ceil(waitMs / 1000)
      throw rateLimited({ limit: this.settings.loginFreeFailures, remaining: 0, resetSeconds: seconds }, seconds)
    }
    return new ClaimedAttempt(() => this.store.unclaimAttempt(key, id, this.clock.now(), FAILURE_MEMORY_MS))
  }

  /**
   * The claimed attempt proved right but is no completed login (the password step of an account
   * with a second factor): it is taken back, neither a failure nor a success that resets the count.
   * Disposing the attempt does the same; this says it where the verdict is.
   */
  async attemptWasRight(attempt: ClaimedAttempt): Promise<void> {
    await attempt.takeBack()
  }

  async loginSucceeded(email: string): Promise<void> {
    await this.store.delete(this.loginKey(email))
  }
}

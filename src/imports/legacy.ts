import { AppError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { Sender, systemResolve, type Resolve } from '../webhooks/sender.ts'

export interface LegacyConfig {
  url: string
  secret: string
}

/** The old system has this long to answer (docs/migrating.md). */
export const LEGACY_TIMEOUT_MS = 5000

/**
 * Lazy migration: the first sign-in of an account imported with `"password": "legacy"` asks the
 * system it came from whether the password is right (docs/migrating.md). Only such accounts ever
 * cause a call, and only until their first success, after which the password is Portcullis's own.
 * The connection is the webhooks' (src/webhooks/sender.ts): in production its address is vetted
 * where the socket is opened, so a name cannot be pointed at an internal service.
 */
export class LegacyVerifier {
  private readonly sender: Sender

  constructor(
    private readonly config: LegacyConfig | null,
    private readonly logger: Logger,
    options: { production: boolean; resolve?: Resolve },
  ) {
    this.sender = new Sender({ production: options.production, resolve: options.resolve ?? systemResolve, timeoutMs: LEGACY_TIMEOUT_MS })
  }

  /**
   * True when the old system says the password is right (200), false when it says it is wrong
   * (401, 403, 404); LEGACY_UNAVAILABLE (503) when it could not say: not configured, unreachable,
   * too slow, or any other answer. That refusal is this account's alone, and the login attempt is
   * taken back (an outage never throttles anyone).
   */
  async verify(email: string, password: string): Promise<boolean> {
    if (!this.config) {
      this.logger.warn({}, 'an account imported for lazy migration signed in, but LEGACY_VERIFY_URL is not set')
      throw new AppError('LEGACY_UNAVAILABLE')
    }
    let status: number
    try {
      status = await this.sender.post(this.config.url, { 'content-type': 'application/json', authorization: `Bearer ${this.config.secret}` }, JSON.stringify({ email, password }))
    } catch (error) {
      this.logger.warn({ err: { message: (error as Error).message } }, 'the legacy system could not be asked')
      throw new AppError('LEGACY_UNAVAILABLE')
    }
    if (status === 200) return true
    if (status === 401 || status === 403 || status === 404) return false
    this.logger.warn({ status }, 'the legacy system answered neither yes nor no')
    throw new AppError('LEGACY_UNAVAILABLE')
  }

  close(): void {
    this.sender.close()
  }
}

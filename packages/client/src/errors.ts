import type { ClientErrorCode, ErrorDetail, MfaChallengeInfo } from './types.ts'

/**
 * Every failure of a client call. `status` is the HTTP status, or 0 when no answer arrived
 * (`code` NETWORK_ERROR, the cause attached); `requestId` joins it to the server's log line.
 */
export class PortcullisError extends Error {
  readonly code: ClientErrorCode
  readonly status: number
  readonly details: ErrorDetail[] | undefined
  readonly requestId: string | undefined
  /** MFA_REQUIRED only: the login's challenge, or `{step_up: true, methods}`. */
  readonly mfa: MfaChallengeInfo | undefined

  constructor(init: { code: ClientErrorCode; status: number; message: string; details?: ErrorDetail[] | undefined; requestId?: string | undefined; mfa?: MfaChallengeInfo | undefined; cause?: unknown }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause })
    this.name = 'PortcullisError'
    this.code = init.code
    this.status = init.status
    this.details = init.details
    this.requestId = init.requestId
    this.mfa = init.mfa
  }

  /** A sensitive action refused until a second factor is verified in this session: call stepUp(), then repeat it. */
  get stepUpRequired(): boolean {
    return this.code === 'MFA_REQUIRED' && this.mfa !== undefined && 'step_up' in this.mfa
  }

  get isNetworkError(): boolean {
    return this.code === 'NETWORK_ERROR'
  }
}

import type { ErrorCode } from './types.generated.ts'

/**
 * The client's types. Those of the server's requests and answers are generated from the schemas
 * that validate and serialise them on the server (types.generated.ts, `npm run client:types`);
 * the ones below are the client's own.
 */
export type {
  RegisterInput, Registration, Verification, LoginInput, LoginResult, RefreshResult, Me, UpdateMeInput, ChangeEmailInput,
  Session, SessionRevocation, ChangePasswordInput, ResetPasswordInput, AccountExport, AccountDeletion,
  Watchlist, WatchlistPage, WatchlistQuery, CreateWatchlistInput, UpdateWatchlistInput, WatchlistDeletion,
  VerifyMfaInput, StepUpInput, StepUpResult, Factor, FactorList, TotpEnrolment, TotpConfirmation, FactorRemoval, RecoveryCodes, FactorRename,
  OidcProviders, OidcLinkStart, Identity, IdentityList, IdentityRemoval,
  AppList, AppRevocation,
} from './types.generated.ts'

/**
 * login() with a second factor on the account: no token yet. Send a code with verifyMfa() (the
 * mfa_token lives expires_in seconds); `methods` says what the account can use.
 */
export interface MfaRequired {
  mfa_required: true
  mfa_token: string
  expires_in: number
  methods: string[]
}
/**
 * The bot check's token, for the calls a service with bot protection (CAPTCHA_PROVIDER) refuses
 * without one: register, resendVerification, forgotPassword and startEmailSignIn. It is the token
 * the Turnstile or hCaptcha widget on the page produced; a service without bot protection ignores
 * it, so an application may always send it.
 */
export interface CaptchaOptions {
  captchaToken?: string
}
/** The server's WebAuthn options, for navigator.credentials.create / get. */
export type PasskeyCreation = { options: Record<string, unknown> }
export type PasskeyRequest = { options: Record<string, unknown> }
export type PasskeyLogin = { challenge_id: string; options: Record<string, unknown> }
/**
 * What an MFA_REQUIRED error carries: a login's challenge, or `step_up` for a sensitive action.
 * The server's MfaChallenge (src/errors.ts) is a TypeScript type, not a schema, so it is written
 * here again; test/client/types-match.ts fails the type-check if the two part.
 */
export type MfaChallengeInfo =
  | { mfa_token: string; expires_in: number; methods: string[] }
  | { step_up: true; methods: string[] }

/**
 * The server's codes, and the client's own: no answer at all, one it cannot read, or a
 * client.fetch() to a URL the access token may not go to (nothing was sent).
 */
export type ClientErrorCode = ErrorCode | 'NETWORK_ERROR' | 'INVALID_RESPONSE' | 'TOKEN_ORIGIN_NOT_ALLOWED'

export interface ErrorDetail {
  field: string
  message: string
}

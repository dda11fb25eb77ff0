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
 * What an access token says about what its user may do, as claims() reads it (docs/authorization.md,
 * "The claims"): absent claims are empty lists or null here. The org_* members are those of the
 * session's active organisation (switchOrganization()).
 */
export interface AccessClaims {
  roles: string[]
  permissions: string[]
  app_metadata: Record<string, unknown> | null
  org_id: string | null
  org_roles: string[]
  org_permissions: string[]
}

/*
 * The organisation routes' requests and answers (src/authz/org-schemas.ts). scripts/client-types.ts
 * does not generate them (yet), so they are written here; test/client/types-match.ts fails the
 * type-check if one parts from its schema's Static<> type.
 */
export type Organization = { id: string; name: string; created_at: string }
/** One of listOrganizations(): an organisation and the user's roles in it. */
export type OrganizationMembership = { id: string; name: string; roles: string[]; joined_at: string }
export type UpdateOrganizationInput = { name: string }
export type OrganizationDeletion = { id: string; deleted: true }
export type Member = { user_id: string; email: string; full_name: string; roles: string[]; joined_at: string }
export type MemberPage = { members: Member[]; next_cursor: string | null }
/** `limit` 1 to 100 (20 by default); `cursor` the previous page's `next_cursor`. */
export type MemberQuery = { limit?: number; cursor?: string }
export type MemberRemoval = { organization_id: string; user_id: string; removed: true }
/** `roles`: 1 to 20 roles of the catalogue; nobody grants a permission they lack. */
export type InvitationInput = { email: string; roles: string[] }
/** `invited_by` is null once the inviter's account is gone. */
export type Invitation = { id: string; email: string; roles: string[]; invited_by: string | null; created_at: string; expires_at: string }
export type InvitationRevocation = { id: string; revoked: true }
/** The organisation joined and the roles the invitation gave. */
export type InvitationAcceptance = { organization: Organization; roles: string[] }

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

import type { Static, TSchema } from 'typebox'
import type * as accounts from '../accounts/schemas.ts'
import type * as auth from '../auth/schemas.ts'
import type { ErrorCode, MfaChallenge } from '../errors.ts'
import type * as mfa from '../mfa/schemas.ts'
import type * as oidc from '../oidc/schemas.ts'
import type * as provider from '../provider/schemas.ts'
import type * as watchlists from '../watchlists/schemas.ts'

/**
 * The client's types, derived from the schemas that validate requests and serialise answers on
 * the server (type-only imports: nothing of the server reaches the compiled client).
 */
type DataOf<Schema extends TSchema> = Static<Schema> extends { data: infer Data } ? Data : never

export type RegisterInput = Static<typeof auth.RegisterBody>
export type Registration = DataOf<typeof auth.Registered>
export type Verification = DataOf<typeof auth.Verified>
export type LoginInput = Static<typeof auth.LoginBody>
/** With the cookie transport, `refresh_token` is absent: it is in an HttpOnly cookie. */
export type LoginResult = DataOf<typeof auth.LoggedIn>
export type RefreshResult = DataOf<typeof auth.Refreshed>
export type Me = DataOf<typeof auth.Me>

export type Session = Static<typeof accounts.Session>
export type SessionRevocation = DataOf<typeof accounts.SessionRevoked>
export type ChangePasswordInput = Static<typeof accounts.ChangePasswordBody>
export type ResetPasswordInput = Static<typeof accounts.ResetPasswordBody>
export type AccountExport = DataOf<typeof accounts.AccountExport>
export type AccountDeletion = DataOf<typeof accounts.AccountDeleted>

export type Watchlist = Static<typeof watchlists.Watchlist>
export type WatchlistPage = DataOf<typeof watchlists.Page>
export type WatchlistQuery = Partial<Static<typeof watchlists.ListQuery>>
export type CreateWatchlistInput = Static<typeof watchlists.CreateBody>
export type UpdateWatchlistInput = Static<typeof watchlists.UpdateBody>
export type WatchlistDeletion = DataOf<typeof watchlists.Deleted>

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
export type VerifyMfaInput = Static<typeof mfa.VerifyBody>
export type StepUpInput = Static<typeof mfa.StepUpBody>
export type StepUpResult = DataOf<typeof mfa.SteppedUp>
export type Factor = Static<typeof mfa.Factor>
export type FactorList = DataOf<typeof mfa.FactorList>
export type TotpEnrolment = DataOf<typeof mfa.TotpEnrolment>
export type TotpConfirmation = DataOf<typeof mfa.Confirmed>
export type FactorRemoval = DataOf<typeof mfa.FactorDeleted>
export type RecoveryCodes = DataOf<typeof mfa.NewRecoveryCodes>
export type FactorRename = DataOf<typeof mfa.Renamed>
/** The server's WebAuthn options, for navigator.credentials.create / get. */
export type PasskeyCreation = { options: Record<string, unknown> }
export type PasskeyRequest = { options: Record<string, unknown> }
export type PasskeyLogin = { challenge_id: string; options: Record<string, unknown> }
export type OidcProviders = DataOf<typeof oidc.ProviderList>
export type OidcLinkStart = DataOf<typeof oidc.LinkStarted>
export type Identity = Static<typeof oidc.Identity>
export type IdentityList = DataOf<typeof oidc.IdentityList>
export type IdentityRemoval = DataOf<typeof oidc.IdentityDeleted>
/** The apps the user approved through Portcullis as an OpenID provider. */
export type AppList = DataOf<typeof provider.AppList>
export type AppRevocation = DataOf<typeof provider.AppRevoked>
/** What an MFA_REQUIRED error carries: a login's challenge, or `step_up` for a sensitive action. */
export type MfaChallengeInfo = MfaChallenge

/**
 * The server's codes, and the client's own: no answer at all, one it cannot read, or a
 * client.fetch() to a URL the access token may not go to (nothing was sent).
 */
export type ClientErrorCode = ErrorCode | 'NETWORK_ERROR' | 'INVALID_RESPONSE' | 'TOKEN_ORIGIN_NOT_ALLOWED'

export interface ErrorDetail {
  field: string
  message: string
}

// Type-checked by `tsc --noEmit -p .` (part of `npm test`), never run: each of the client's
// generated types must be exactly the Static<> type of the server schema it was generated from, so
// a schema changed without `npm run client:types` fails the type-check here, naming the type.
import type { Static, TSchema } from 'typebox'
import type * as accounts from '../../src/accounts/schemas.ts'
import type * as auth from '../../src/auth/schemas.ts'
import type * as organizations from '../../src/authz/org-schemas.ts'
import type * as server from '../../src/errors.ts'
import type * as mfa from '../../src/mfa/schemas.ts'
import type * as oidc from '../../src/oidc/schemas.ts'
import type * as profile from '../../src/profile/schemas.ts'
import type * as provider from '../../src/provider/schemas.ts'
import type * as watchlists from '../../src/watchlists/schemas.ts'
import type * as client from '../../packages/client/src/types.ts'
import type { ErrorCode } from '../../packages/client/src/types.generated.ts'

/**
 * True only when A and B are the same type: not merely assignable either way (an optional member
 * against a required one, `string` against a literal, would pass that).
 */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false
/** A type argument that is not `true` is a type error on its line. */
type Expect<T extends true> = T
type DataOf<Schema extends TSchema> = Static<Schema> extends { data: infer Data } ? Data : never

export type Checks = [
  Expect<Equal<ErrorCode, server.ErrorCode>>,
  Expect<Equal<client.MfaChallengeInfo, server.MfaChallenge>>,
  Expect<Equal<client.ErrorDetail, server.ErrorDetail>>,

  Expect<Equal<client.RegisterInput, Static<typeof auth.RegisterBody>>>,
  Expect<Equal<client.Registration, DataOf<typeof auth.Registered>>>,
  Expect<Equal<client.Verification, DataOf<typeof auth.Verified>>>,
  Expect<Equal<client.LoginInput, Static<typeof auth.LoginBody>>>,
  Expect<Equal<client.LoginResult, DataOf<typeof auth.LoggedIn>>>,
  Expect<Equal<client.RefreshResult, DataOf<typeof auth.Refreshed>>>,
  Expect<Equal<client.Me, DataOf<typeof auth.Me>>>,
  Expect<Equal<client.UpdateMeInput, Static<typeof profile.UpdateMeBody>>>,
  Expect<Equal<client.ChangeEmailInput, Static<typeof profile.ChangeEmailBody>>>,

  Expect<Equal<client.Session, Static<typeof accounts.Session>>>,
  Expect<Equal<client.SessionRevocation, DataOf<typeof accounts.SessionRevoked>>>,
  Expect<Equal<client.ChangePasswordInput, Static<typeof accounts.ChangePasswordBody>>>,
  Expect<Equal<client.ResetPasswordInput, Static<typeof accounts.ResetPasswordBody>>>,
  Expect<Equal<client.AccountExport, DataOf<typeof accounts.AccountExport>>>,
  Expect<Equal<client.AccountDeletion, DataOf<typeof accounts.AccountDeleted>>>,

  Expect<Equal<client.Watchlist, Static<typeof watchlists.Watchlist>>>,
  Expect<Equal<client.WatchlistPage, DataOf<typeof watchlists.Page>>>,
  Expect<Equal<client.WatchlistQuery, Partial<Static<typeof watchlists.ListQuery>>>>,
  Expect<Equal<client.CreateWatchlistInput, Static<typeof watchlists.CreateBody>>>,
  Expect<Equal<client.UpdateWatchlistInput, Static<typeof watchlists.UpdateBody>>>,
  Expect<Equal<client.WatchlistDeletion, DataOf<typeof watchlists.Deleted>>>,

  Expect<Equal<client.VerifyMfaInput, Static<typeof mfa.VerifyBody>>>,
  Expect<Equal<client.StepUpInput, Static<typeof mfa.StepUpBody>>>,
  Expect<Equal<client.StepUpResult, DataOf<typeof mfa.SteppedUp>>>,
  Expect<Equal<client.Factor, Static<typeof mfa.Factor>>>,
  Expect<Equal<client.FactorList, DataOf<typeof mfa.FactorList>>>,
  Expect<Equal<client.TotpEnrolment, DataOf<typeof mfa.TotpEnrolment>>>,
  Expect<Equal<client.TotpConfirmation, DataOf<typeof mfa.Confirmed>>>,
  Expect<Equal<client.FactorRemoval, DataOf<typeof mfa.FactorDeleted>>>,
  Expect<Equal<client.RecoveryCodes, DataOf<typeof mfa.NewRecoveryCodes>>>,
  Expect<Equal<client.FactorRename, DataOf<typeof mfa.Renamed>>>,

  Expect<Equal<client.OidcProviders, DataOf<typeof oidc.ProviderList>>>,
  Expect<Equal<client.OidcLinkStart, DataOf<typeof oidc.LinkStarted>>>,
  Expect<Equal<client.Identity, Static<typeof oidc.Identity>>>,
  Expect<Equal<client.IdentityList, DataOf<typeof oidc.IdentityList>>>,
  Expect<Equal<client.IdentityRemoval, DataOf<typeof oidc.IdentityDeleted>>>,

  Expect<Equal<client.AppList, DataOf<typeof provider.AppList>>>,
  Expect<Equal<client.AppRevocation, DataOf<typeof provider.AppRevoked>>>,

  // Written by hand in packages/client/src/types.ts, not generated: held to the schemas here.
  Expect<Equal<client.Organization, Static<typeof organizations.Organization>>>,
  Expect<Equal<client.Organization, DataOf<typeof organizations.OneOrganization>['organization']>>,
  Expect<Equal<client.OrganizationMembership[], DataOf<typeof organizations.OrganizationList>['organizations']>>,
  Expect<Equal<client.UpdateOrganizationInput, Static<typeof organizations.UpdateOrganizationBody>>>,
  Expect<Equal<client.OrganizationDeletion, DataOf<typeof organizations.OrganizationDeleted>>>,
  Expect<Equal<client.Member, Static<typeof organizations.Member>>>,
  Expect<Equal<client.MemberPage, DataOf<typeof organizations.MembersPage>>>,
  Expect<Equal<client.MemberQuery, Partial<Static<typeof organizations.MembersQuery>>>>,
  Expect<Equal<client.MemberRemoval, DataOf<typeof organizations.MemberRemoved>>>,
  Expect<Equal<client.Member, DataOf<typeof organizations.OneMember>['member']>>,
  Expect<Equal<client.InvitationInput, Static<typeof organizations.InviteBody>>>,
  Expect<Equal<client.Invitation, Static<typeof organizations.Invitation>>>,
  Expect<Equal<client.Invitation, DataOf<typeof organizations.OneInvitation>['invitation']>>,
  Expect<Equal<client.Invitation[], DataOf<typeof organizations.InvitationList>['invitations']>>,
  Expect<Equal<client.InvitationRevocation, DataOf<typeof organizations.InvitationRevoked>>>,
  Expect<Equal<client.InvitationAcceptance, DataOf<typeof organizations.InvitationAccepted>>>,
]

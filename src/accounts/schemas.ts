import Type from 'typebox'
import { Password, OneTimeToken } from '../auth/schemas.ts'
import { Body, Envelope } from '../http/schemas.ts'
import { AuditEvent } from '../audit/schemas.ts'
import { Factor } from '../mfa/schemas.ts'
import { Identity } from '../oidc/schemas.ts'
import { App } from '../provider/schemas.ts'
import { OrganizationMembership } from '../authz/org-schemas.ts'
import { Watchlist } from '../watchlists/schemas.ts'

/** The lifecycle routes' schemas: they validate, serialise, document and type the client. */
export const LoggedOut = Envelope(Type.Object({}))

export const Revoked = Envelope(Type.Object({ revoked: Type.Integer({ description: 'How many sessions this call revoked' }) }))

export const Session = Type.Object({
  id: Type.String({ format: 'uuid' }),
  created_at: Type.String({ format: 'date-time' }),
  last_used_at: Type.String({ format: 'date-time' }),
  user_agent: Type.Union([Type.String(), Type.Null()]),
  current: Type.Boolean(),
  client: Type.Union([Type.String(), Type.Null()], { description: 'The app this session signed in to through Portcullis as an OpenID provider (its name when signing in); null for a sign-in to Portcullis itself' }),
})
export const Sessions = Envelope(Type.Object({ sessions: Type.Array(Session) }))

export const SessionParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const SessionRevoked = Envelope(Type.Object({ id: Type.String(), revoked: Type.Literal(true) }))

export const ResetPasswordBody = Body({ token: OneTimeToken, password: Password })
export const PasswordReset = Envelope(Type.Object({}))

export const ChangePasswordBody = Body({ current_password: Password, new_password: Password })

export const DeleteAccountBody = Body({ password: Password })
export const AccountDeleted = Envelope(Type.Object({ user_id: Type.String({ format: 'uuid' }), deleted: Type.Literal(true) }))

const When = Type.String({ format: 'date-time' })
const MaybeWhen = Type.Union([When, Type.Null()])
const MaybeText = Type.Union([Type.String(), Type.Null()])

export const AccountStatus = Type.Union([Type.Literal('unverified'), Type.Literal('active'), Type.Literal('disabled')])
export const DisabledReason = Type.Union([Type.Literal('suspended'), Type.Literal('banned'), Type.Null()])

/** Everything stored about the caller (GET /auth/me/export); never a hash or a token. */
export const AccountExport = Envelope(
  Type.Object({
    user: Type.Object({
      user_id: Type.String({ format: 'uuid' }),
      email: Type.String(),
      full_name: Type.String(),
      email_verified: Type.Boolean(),
      email_verified_at: MaybeWhen,
      status: AccountStatus,
      disabled_reason: DisabledReason,
      created_at: When,
      updated_at: When,
      last_login_at: MaybeWhen,
    }),
    sessions: Type.Array(
      Type.Object({
        id: Type.String({ format: 'uuid' }),
        created_at: When,
        last_used_at: When,
        expires_at: When,
        revoked_at: MaybeWhen,
        user_agent: MaybeText,
        ip: MaybeText,
        current: Type.Boolean(),
      }),
    ),
    watchlists: Type.Array(Watchlist),
    events: Type.Array(AuditEvent),
    factors: Type.Array(Factor, { description: 'Confirmed second factors, without their secrets' }),
    identities: Type.Array(Identity, { description: 'Identity-provider accounts linked to this one' }),
    apps: Type.Array(App, { description: 'The apps the user let sign in with this account (Portcullis as an OpenID provider)' }),
    organizations: Type.Array(OrganizationMembership, { description: 'The organisations the user belongs to, with their roles' }),
    mail: Type.Array(
      Type.Object({
        id: Type.String(),
        kind: Type.String(),
        recipient: Type.String(),
        subject: Type.String(),
        created_at: When,
        sent_at: MaybeWhen,
        failed_at: MaybeWhen,
      }),
      { description: 'Mail sent or queued to the caller, without the bodies (they carry one-time links)' },
    ),
  }),
)

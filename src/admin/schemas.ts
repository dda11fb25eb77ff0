import Type from 'typebox'
import { AccountStatus, DisabledReason } from '../accounts/schemas.ts'
import { AuditEvent } from '../audit/schemas.ts'
import { Body, Envelope } from '../http/schemas.ts'
import { Factor } from '../mfa/schemas.ts'
import { Identity } from '../oidc/schemas.ts'
import { App } from '../provider/schemas.ts'

/** The admin API's schemas: they validate, serialise and document (OpenAPI, tag `admin`). */
const Cursor = Type.String({ minLength: 1, maxLength: 512 })
const Limit = Type.Integer({ minimum: 1, maximum: 100, default: 20 })
const NextCursor = Type.Union([Type.String(), Type.Null()])
const When = Type.String({ format: 'date-time' })

export const AdminUser = Type.Object({
  user_id: Type.String({ format: 'uuid' }),
  email: Type.String(),
  full_name: Type.String(),
  email_verified: Type.Boolean(),
  status: AccountStatus,
  disabled_reason: DisabledReason,
  created_at: When,
  last_login_at: Type.Union([When, Type.Null()]),
  active_sessions: Type.Integer({ description: 'Sessions neither revoked nor expired' }),
  mfa: Type.Optional(Type.Object({ enabled: Type.Boolean(), factors: Type.Array(Factor) }, { description: 'GET /admin/users/{id} and the actions on one user; not in listings' })),
  identities: Type.Optional(Type.Array(Identity, { description: 'Linked identity-provider accounts; GET /admin/users/{id} and the actions on one user' })),
  apps: Type.Optional(Type.Array(App, { description: 'The apps the user approved through the OpenID provider (their grants); GET /admin/users/{id} and the actions on one user' })),
  roles: Type.Optional(Type.Array(Type.String(), { description: 'The user\'s global roles (PUT /admin/users/{id}/roles); GET /admin/users/{id} and the actions on one user' })),
  app_metadata: Type.Optional(Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()], { description: 'Set by operators (PATCH /admin/users/{id}), carried in access tokens; GET /admin/users/{id} and the actions on one user' })),
})

export const UsersQuery = Type.Object(
  {
    email: Type.Optional(Type.String({ minLength: 1, maxLength: 254, description: 'A prefix of the normalised address' })),
    status: Type.Optional(AccountStatus),
    limit: Type.Optional(Limit),
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)
export const UsersPage = Envelope(Type.Object({ users: Type.Array(AdminUser), next_cursor: NextCursor }))

export const UserParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const OneUser = Envelope(Type.Object({ user: AdminUser }))
export const DisableBody = Body({ reason: Type.Union([Type.Literal('suspended'), Type.Literal('banned')]) })
export const SessionsRevoked = Envelope(Type.Object({ revoked: Type.Integer({ description: 'How many live sessions were revoked' }) }))
export const MfaReset = Envelope(Type.Object({ user: AdminUser, revoked: Type.Integer({ description: 'How many live sessions were revoked' }) }))
export const UserDeleted = Envelope(Type.Object({ user_id: Type.String({ format: 'uuid' }), deleted: Type.Literal(true) }))

export const EventsQuery = Type.Object(
  {
    user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    type: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    since: Type.Optional(Type.String({ format: 'date-time', description: 'ISO 8601, inclusive' })),
    until: Type.Optional(Type.String({ format: 'date-time', description: 'ISO 8601, exclusive' })),
    limit: Type.Optional(Limit),
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)
export const EventsPage = Envelope(Type.Object({ events: Type.Array(AuditEvent), next_cursor: NextCursor }))

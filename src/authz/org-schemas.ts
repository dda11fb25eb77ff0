import Type from 'typebox'
import { Email } from '../auth/schemas.ts'
import { Body, Envelope } from '../http/schemas.ts'
import { MAX_USER_ROLES } from './permissions.ts'

/**
 * The organisation and invitation routes' schemas (docs/authorization.md, "Organisations"): they
 * validate, serialise, document (tags `organizations` and `admin`) and type the client.
 */
const When = Type.String({ format: 'date-time' })
const Id = Type.String({ format: 'uuid' })
/** A path id: anything else is simply not found (the service checks its shape), never a 400. */
const PathId = Type.String({ maxLength: 64 })

/** The name of an organisation: 1 to 100 characters once trimmed, no control characters. */
export const ORGANIZATION_NAME_MAX = 100
const Name = Type.String({ maxLength: 1024, description: `1 to ${ORGANIZATION_NAME_MAX} characters once trimmed` })

/** The roles of a membership or an invitation: names from the role catalogue, each once. */
export const MembershipRoles = Type.Array(Type.String({ minLength: 1, maxLength: 40, pattern: '^[a-z][a-z0-9_-]{1,39}$' }), {
  minItems: 1,
  maxItems: MAX_USER_ROLES,
  uniqueItems: true,
  description: `1 to ${MAX_USER_ROLES} roles of the catalogue (GET /admin/roles); nobody grants a permission they lack`,
})

export const Organization = Type.Object({ id: Id, name: Type.String(), created_at: When })
export const OrganizationMembership = Type.Object({
  id: Id,
  name: Type.String(),
  roles: Type.Array(Type.String()),
  joined_at: When,
})
export const Member = Type.Object({
  user_id: Id,
  email: Type.String(),
  full_name: Type.String(),
  roles: Type.Array(Type.String()),
  joined_at: When,
})
export const Invitation = Type.Object({
  id: Id,
  email: Type.String(),
  roles: Type.Array(Type.String()),
  invited_by: Type.Union([Id, Type.Null()], { description: 'The member who invited; null once their account is gone' }),
  created_at: When,
  expires_at: When,
})

export const OrganizationParams = Type.Object({ id: PathId })
export const MemberParams = Type.Object({ id: PathId, user_id: PathId })
export const InvitationParams = Type.Object({ id: PathId, invitation_id: PathId })

export const CreateOrganizationBody = Body({ name: Name })
export const AdminCreateOrganizationBody = Body({ name: Name, owner_user_id: Type.String({ maxLength: 64, description: 'The account that becomes its owner; its address must be verified' }) })
export const UpdateOrganizationBody = Body({ name: Name })
export const UpdateMemberBody = Body({ roles: MembershipRoles })
export const InviteBody = Body({ email: Email, roles: MembershipRoles })
export const AcceptInvitationBody = Body({ token: Type.String({ minLength: 1, maxLength: 256, description: 'The `token` of the mailed link' }) })
export const MembersQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
  },
  { additionalProperties: false },
)

export const OneOrganization = Envelope(Type.Object({ organization: Organization }))
export const OrganizationList = Envelope(Type.Object({ organizations: Type.Array(OrganizationMembership) }))
export const OrganizationDeleted = Envelope(Type.Object({ id: Id, deleted: Type.Literal(true) }))
export const MembersPage = Envelope(Type.Object({ members: Type.Array(Member), next_cursor: Type.Union([Type.String(), Type.Null()]) }))
export const OneMember = Envelope(Type.Object({ member: Member }))
export const MemberRemoved = Envelope(Type.Object({ organization_id: Id, user_id: Id, removed: Type.Literal(true) }))
export const OneInvitation = Envelope(Type.Object({ invitation: Invitation }))
export const InvitationList = Envelope(Type.Object({ invitations: Type.Array(Invitation) }))
export const InvitationRevoked = Envelope(Type.Object({ id: Id, revoked: Type.Literal(true) }))
export const InvitationAccepted = Envelope(Type.Object({ organization: Organization, roles: Type.Array(Type.String()) }))

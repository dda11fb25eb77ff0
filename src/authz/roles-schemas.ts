import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'
import { MAX_METADATA_BYTES, MAX_PERMISSIONS, MAX_USER_ROLES, PERMISSION_PATTERN, ROLE_NAME_PATTERN } from './permissions.ts'
import { ROLE_DESCRIPTION_MAX } from './roles.ts'

/**
 * The roles catalogue's and users' roles and metadata routes' schemas (docs/authorization.md): they
 * validate, serialise and document (tag `admin`; `account` for the user's own metadata).
 */
const When = Type.String({ format: 'date-time' })

export const RoleName = Type.String({ pattern: ROLE_NAME_PATTERN.source, maxLength: 40, description: 'A role of the catalogue (GET /admin/roles)' })
export const Permission = Type.String({ pattern: PERMISSION_PATTERN.source, maxLength: 63, description: '`resource:action`; the action may be `*` or hold `*`' })
const Permissions = Type.Array(Permission, { maxItems: MAX_PERMISSIONS, description: `At most ${MAX_PERMISSIONS}; a permission given twice is kept once` })
const Description = Type.Union([Type.String({ maxLength: 1024, description: `At most ${ROLE_DESCRIPTION_MAX} characters once trimmed` }), Type.Null()], { description: 'null or blank clears it' })

/** A JSON object of at most MAX_METADATA_BYTES serialised (checked by the service), or null. */
export const Metadata = Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()])
export const MetadataInput = Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()], {
  description: `A JSON object of at most ${MAX_METADATA_BYTES} bytes serialised, replacing the one stored; null clears it`,
})

export const Role = Type.Object({
  name: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  permissions: Type.Array(Type.String()),
  builtin: Type.Boolean({ description: 'Built in: may be changed, never removed' }),
  created_at: When,
  updated_at: When,
})

export const RoleParams = Type.Object({ name: Type.String({ maxLength: 64 }) })
export const RoleDeleteQuery = Type.Object(
  { force: Type.Optional(Type.Boolean({ default: false, description: 'Remove a role in use: it leaves every user and membership holding it' })) },
  { additionalProperties: false },
)

export const CreateRoleBody = Body({ name: RoleName, description: Type.Optional(Description), permissions: Permissions })
export const UpdateRoleBody = Type.Object({ description: Type.Optional(Description), permissions: Type.Optional(Permissions) }, { additionalProperties: false, minProperties: 1 })
export const SetUserRolesBody = Body({
  roles: Type.Array(RoleName, { maxItems: MAX_USER_ROLES, uniqueItems: true, description: `All of the user's global roles (at most ${MAX_USER_ROLES}); [] takes every one away` }),
})
export const UpdateUserBody = Body({ app_metadata: MetadataInput })

export const OneRole = Envelope(Type.Object({ role: Role }))
export const RoleList = Envelope(Type.Object({ roles: Type.Array(Role) }))
export const RoleDeleted = Envelope(
  Type.Object({
    name: Type.String(),
    deleted: Type.Literal(true),
    users: Type.Integer({ description: 'Users it was taken from (with ?force=true)' }),
    memberships: Type.Integer({ description: 'Memberships it was taken from (with ?force=true)' }),
  }),
)

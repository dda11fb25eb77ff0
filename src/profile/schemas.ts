import Type from 'typebox'
import { Email, Password } from '../auth/schemas.ts'
import { MetadataInput } from '../authz/roles-schemas.ts'
import { Body } from '../http/schemas.ts'

/** The profile routes' schemas: they validate, serialise, document and type the client. */
export const UpdateMeBody = Type.Object(
  {
    full_name: Type.Optional(Type.String({ maxLength: 1024, description: '1 to 100 characters once trimmed' })),
    user_metadata: Type.Optional(MetadataInput),
  },
  { additionalProperties: false, minProperties: 1, description: 'One or both; user_metadata is never put into a token' },
)

export const ChangeEmailBody = Body({
  new_email: Email,
  password: Type.Optional({ ...Password, description: 'The current password; required when the account has one' }),
})

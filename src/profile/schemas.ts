import Type from 'typebox'
import { Email, Password } from '../auth/schemas.ts'
import { Body } from '../http/schemas.ts'

/** The profile routes' schemas: they validate, serialise, document and type the client. */
export const UpdateMeBody = Body({ full_name: Type.String({ maxLength: 1024, description: '1 to 100 characters once trimmed' }) })

export const ChangeEmailBody = Body({
  new_email: Email,
  password: Type.Optional({ ...Password, description: 'The current password; required when the account has one' }),
})

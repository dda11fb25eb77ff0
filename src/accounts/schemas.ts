import Type from 'typebox'
import { Password, OneTimeToken } from '../auth/schemas.ts'
import { Body, Envelope } from '../http/schemas.ts'

/** The lifecycle routes' schemas: they validate, serialise, document and type the client. */
export const LoggedOut = Envelope(Type.Object({}))

export const Revoked = Envelope(Type.Object({ revoked: Type.Integer({ description: 'How many sessions this call revoked' }) }))

export const Session = Type.Object({
  id: Type.String({ format: 'uuid' }),
  created_at: Type.String({ format: 'date-time' }),
  last_used_at: Type.String({ format: 'date-time' }),
  user_agent: Type.Union([Type.String(), Type.Null()]),
  current: Type.Boolean(),
})
export const Sessions = Envelope(Type.Object({ sessions: Type.Array(Session) }))

export const SessionParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const SessionRevoked = Envelope(Type.Object({ id: Type.String(), revoked: Type.Literal(true) }))

export const ResetPasswordBody = Body({ token: OneTimeToken, password: Password })
export const PasswordReset = Envelope(Type.Object({}))

export const ChangePasswordBody = Body({ current_password: Password, new_password: Password })

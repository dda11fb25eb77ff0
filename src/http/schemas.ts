import Type, { type TSchema } from 'typebox'
import { ErrorCodes } from '../errors.ts'

/** `{success: true, data}` around a payload schema, exactly as README.md's walk through the API states it. */
export function Envelope<T extends TSchema>(data: T) {
  return Type.Object({ success: Type.Literal(true), data })
}

/** `{success: true, data, message}`: the registration answer carries a message (README.md, Endpoints). */
export function EnvelopeWithMessage<T extends TSchema>(data: T) {
  return Type.Object({ success: Type.Literal(true), data, message: Type.String() })
}

export const ErrorEnvelope = Type.Object({
  success: Type.Literal(false),
  error: Type.Object({
    code: Type.Union(
      Object.keys(ErrorCodes).map((code) => Type.Literal(code)),
      { description: 'One of the documented codes; never renamed once published' },
    ),
    message: Type.String(),
    details: Type.Optional(Type.Array(Type.Object({ field: Type.String(), message: Type.String() }))),
    mfa: Type.Optional(
      Type.Object(
        {
          mfa_token: Type.Optional(Type.String({ description: 'Login: send it to POST /auth/mfa/verify within expires_in seconds' })),
          expires_in: Type.Optional(Type.Integer()),
          step_up: Type.Optional(Type.Literal(true, { description: 'A sensitive action: POST /auth/mfa/step-up first' })),
          methods: Type.Array(Type.String(), { description: 'What this account can use: totp, passkey, recovery_code' }),
        },
        { description: 'MFA_REQUIRED only' },
      ),
    ),
  }),
})

/** Request bodies refuse members they do not name (mass assignment). */
export function Body<T extends Record<string, TSchema>>(properties: T) {
  return Type.Object(properties, { additionalProperties: false })
}

export function ok<T>(data: T): { success: true; data: T }
export function ok<T>(data: T, message: string): { success: true; data: T; message: string }
export function ok<T>(data: T, message?: string) {
  return message === undefined ? { success: true as const, data } : { success: true as const, data, message }
}

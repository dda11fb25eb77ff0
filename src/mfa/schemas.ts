import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'

/** The second-factor routes' schemas: they validate, serialise, document (tag `mfa`) and type the client. */
const When = Type.String({ format: 'date-time' })
const Code = Type.String({ minLength: 1, maxLength: 64, description: 'A 6-digit TOTP code, or a recovery code (xxxxx-xxxxx; case, spaces and the dash are ignored)' })
const Method = Type.Union([Type.Literal('totp'), Type.Literal('recovery_code')])
const RecoveryCodes = Type.Array(Type.String(), { description: 'Shown once; each works once' })

export const Factor = Type.Object({
  id: Type.String({ format: 'uuid' }),
  type: Type.Union([Type.Literal('totp'), Type.Literal('passkey')]),
  name: Type.String(),
  created_at: When,
  last_used_at: Type.Union([When, Type.Null()]),
})

export const FactorList = Envelope(Type.Object({ factors: Type.Array(Factor), recovery_codes_remaining: Type.Integer() }))
export const EnrolTotpBody = Body({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) })
export const TotpEnrolment = Envelope(
  Type.Object({
    factor_id: Type.String({ format: 'uuid' }),
    secret: Type.String({ description: 'Base32; shown once' }),
    otpauth_uri: Type.String(),
    qr_svg: Type.String({ description: 'The otpauth URI as an SVG QR code' }),
  }),
)
export const FactorParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const CodeBody = Body({ code: Code })
export const Confirmed = Envelope(Type.Object({ factor: Factor, recovery_codes: Type.Optional(RecoveryCodes) }))
export const FactorDeleted = Envelope(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }))
export const NewRecoveryCodes = Envelope(Type.Object({ recovery_codes: RecoveryCodes }))
export const VerifyBody = Body({ mfa_token: Type.String({ minLength: 1, maxLength: 256 }), method: Method, code: Code })
export const StepUpBody = Body({ method: Method, code: Code })
export const SteppedUp = Envelope(Type.Object({ access_token: Type.String(), expires_in: Type.Integer() }))

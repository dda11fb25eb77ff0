import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'

/** The second-factor routes' schemas: they validate, serialise, document (tag `mfa`) and type the client. */
const When = Type.String({ format: 'date-time' })
const Code = Type.String({ minLength: 1, maxLength: 64, description: 'A 6-digit TOTP code, or a recovery code (xxxxx-xxxxx; case, spaces and the dash are ignored)' })
const CodeMethod = Type.Union([Type.Literal('totp'), Type.Literal('recovery_code')])
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
const MfaToken = Type.String({ minLength: 1, maxLength: 256 })

// WebAuthn credentials as browsers' toJSON() writes them (W3C WebAuthn Level 3, §5.1): binary
// fields as unpadded base64url. Fields a browser may add are allowed; the library reads what it needs.
const B64Url = (maxLength: number) => Type.String({ maxLength, pattern: '^[A-Za-z0-9_-]*$' })
const CredentialId = Type.String({ minLength: 1, maxLength: 1366, pattern: '^[A-Za-z0-9_-]+$' })
const Extensions = Type.Object({}, { additionalProperties: true })
export const AssertionCredential = Type.Object(
  {
    id: CredentialId,
    rawId: CredentialId,
    type: Type.Literal('public-key'),
    response: Type.Object(
      {
        clientDataJSON: B64Url(4096),
        authenticatorData: B64Url(4096),
        signature: B64Url(2048),
        userHandle: Type.Optional(Type.Union([B64Url(128), Type.Null()])),
      },
      { additionalProperties: true },
    ),
    clientExtensionResults: Extensions,
    authenticatorAttachment: Type.Optional(Type.Union([Type.String({ maxLength: 32 }), Type.Null()])),
  },
  { additionalProperties: true, description: 'PublicKeyCredential.toJSON() of navigator.credentials.get()' },
)
export const RegistrationCredential = Type.Object(
  {
    id: CredentialId,
    rawId: CredentialId,
    type: Type.Literal('public-key'),
    response: Type.Object(
      {
        clientDataJSON: B64Url(4096),
        attestationObject: B64Url(16384),
        transports: Type.Optional(Type.Array(Type.String({ maxLength: 32 }), { maxItems: 8 })),
      },
      { additionalProperties: true },
    ),
    clientExtensionResults: Extensions,
    authenticatorAttachment: Type.Optional(Type.Union([Type.String({ maxLength: 32 }), Type.Null()])),
  },
  { additionalProperties: true, description: 'PublicKeyCredential.toJSON() of navigator.credentials.create()' },
)
const PasskeyProof = { method: Type.Literal('passkey'), credential: AssertionCredential }

export const VerifyBody = Type.Union([
  Body({ mfa_token: MfaToken, method: CodeMethod, code: Code }),
  Body({ mfa_token: MfaToken, ...PasskeyProof }),
])
export const StepUpBody = Type.Union([Body({ method: CodeMethod, code: Code }), Body(PasskeyProof)])
export const RenameBody = Body({ name: Type.String({ minLength: 1, maxLength: 100 }) })
export const Renamed = Envelope(Type.Object({ factor: Factor }))

const Options = (description: string) => Type.Object({}, { additionalProperties: true, description })
const CreationOptions = Options('PublicKeyCredentialCreationOptionsJSON: for PublicKeyCredential.parseCreationOptionsFromJSON()')
const RequestOptions = Options('PublicKeyCredentialRequestOptionsJSON: for PublicKeyCredential.parseRequestOptionsFromJSON()')
export const RegistrationOptions = Envelope(Type.Object({ options: CreationOptions }))
export const PasskeyRegisterBody = Body({ credential: RegistrationCredential, name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) })
export const LoginOptions = Envelope(Type.Object({ challenge_id: Type.String({ format: 'uuid' }), options: RequestOptions }))
export const PasskeyLoginBody = Body({ challenge_id: Type.String({ minLength: 1, maxLength: 64 }), credential: AssertionCredential })
export const SecondFactorOptionsBody = Body({ mfa_token: Type.Optional(MfaToken) })
export const SecondFactorOptions = Envelope(Type.Object({ options: RequestOptions }))
export const SteppedUp = Envelope(Type.Object({ access_token: Type.String(), expires_in: Type.Integer() }))

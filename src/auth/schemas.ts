import Type from 'typebox'
import { Body, Envelope, EnvelopeWithMessage } from '../http/schemas.ts'
import { PASSWORD_MAX, PASSWORD_MIN } from './passwords.ts'

/**
 * The auth routes' request and response schemas. They validate requests, serialise answers, make
 * the OpenAPI document, and type the client (src/client/), so none of these shapes is written twice.
 */
export const Email = Type.String({ minLength: 1, maxLength: 320, description: 'Trimmed, NFC-normalised and lower-cased before use' })
// The upper bound is enforced again in code points by the password policy; this one stops huge input early.
export const Password = Type.String({ minLength: 1, maxLength: 1024, description: `${PASSWORD_MIN} to ${PASSWORD_MAX} Unicode code points` })
export const Jwt = Type.String({ minLength: 1, maxLength: 4096 })
export const OneTimeToken = Type.String({ minLength: 1, maxLength: 256 })

export const RegisterBody = Body({ email: Email, password: Password, full_name: Type.String({ maxLength: 1024 }) })
export const Registered = EnvelopeWithMessage(
  Type.Object({ user_id: Type.String({ format: 'uuid' }), email: Type.String(), verification_required: Type.Boolean() }),
)

export const TokenBody = Body({ token: OneTimeToken })
export const Verified = Envelope(Type.Object({ email: Type.String(), verified: Type.Literal(true) }))

export const EmailBody = Body({ email: Email })
/** The 202 of resend-verification and forgot-password: the same whatever the address. */
export const Accepted = Envelope(Type.Object({}))

export const LoginBody = Body({ email: Email, password: Password })

export const TokenPair = Type.Object({
  access_token: Type.String(),
  refresh_token: Type.String(),
  token_type: Type.Literal('bearer'),
  expires_in: Type.Integer(),
})

/** Login with X-Token-Transport: cookie: the same members in the same order, less the refresh token. */
export const CookieTokenPair = Type.Object({
  access_token: Type.String(),
  token_type: Type.Literal('bearer'),
  expires_in: Type.Integer(),
}, { additionalProperties: false, description: 'With X-Token-Transport: cookie; the refresh token is in the cookie' })

export const LoggedIn = Envelope(Type.Union([TokenPair, CookieTokenPair]))

/** The refresh token in the body, required unless the request opted into the cookie. */
export const RefreshTokenBody = Body({ refresh_token: Type.Optional({ ...Jwt, description: 'Required, except with X-Token-Transport: cookie, which forbids it' }) })
export const Refreshed = Envelope(Type.Object({ access_token: Type.String(), expires_in: Type.Integer() }))

export const Me = Envelope(
  Type.Object({
    user_id: Type.String({ format: 'uuid' }),
    email: Type.String(),
    full_name: Type.String(),
    email_verified: Type.Boolean(),
    created_at: Type.String({ format: 'date-time' }),
  }),
)

import Type from 'typebox'
import { CaptchaToken } from '../captcha/schemas.ts'
import { Body } from '../http/schemas.ts'

/** The e-mailed sign-in's schemas: they validate, serialise, document (tag `email`) and type the client. */
const Email = Type.String({ minLength: 1, maxLength: 320 })

export const StartBody = Body({
  email: Email,
  redirect_to: Type.Optional(Type.String({ minLength: 1, maxLength: 2048, description: 'Where the link sends the starting browser back with ?code= (an allowed origin); without it the link shows the 6-digit code' })),
  code_challenge: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{43}$', description: 'base64url(SHA-256(code_verifier)): the link\'s login code is then exchanged only with code_verifier' })),
  code_challenge_method: Type.Optional(Type.Literal('S256')),
  captcha_token: CaptchaToken,
})
// Any string for the code: a malformed one is judged (and counted) like a wrong one.
export const VerifyBody = Body({ email: Email, code: Type.String({ maxLength: 64 }) })
export const ExchangeBody = Body({
  code: Type.String({ minLength: 1, maxLength: 256 }),
  code_verifier: Type.Optional(Type.String({ description: 'The RFC 7636 verifier of the code_challenge sent to start; without one, the portcullis_email cookie of the browser that started is the proof' })),
})

import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'

/** The identity-provider routes' schemas: they validate, serialise, document (tag `oidc`) and type the client. */
const When = Type.String({ format: 'date-time' })
const Param = Type.String({ maxLength: 4096 })

export const ProviderParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 32 }) })
export const ProviderList = Envelope(Type.Object({ providers: Type.Array(Type.Object({ name: Type.String(), label: Type.String(), available: Type.Boolean() })) }))
export const StartQuery = Type.Object({
  redirect_to: Type.String({ minLength: 1, maxLength: 2048, description: 'An absolute URL on one of OIDC_REDIRECT_ORIGINS' }),
  // RFC 7636 between the application and Portcullis (the provider leg has its own): the login code
  // is then exchanged only with the verifier, so a code planted in another browser is useless.
  code_challenge: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{43}$', description: 'base64url(SHA-256(code_verifier)), 43 characters; the exchange must then send code_verifier' })),
  code_challenge_method: Type.Optional(Type.Literal('S256', { description: 'Required with code_challenge, and only with it' })),
})
// What a provider may send back (RFC 6749 §4.1.2, RFC 9207's iss); anything else is passed on untouched.
export const CallbackQuery = Type.Object(
  { code: Type.Optional(Param), state: Type.Optional(Param), iss: Type.Optional(Param), error: Type.Optional(Param), error_description: Type.Optional(Param) },
  { additionalProperties: true },
)
export const ExchangeBody = Body({
  code: Type.String({ minLength: 1, maxLength: 256 }),
  // Any string (the body limit bounds it): a malformed verifier is judged like a wrong one
  // (INVALID_CREDENTIALS, and the code dies), not refused before the code is spent.
  code_verifier: Type.Optional(Type.String({ description: 'The RFC 7636 verifier of the code_challenge sent to start; without one at start, the portcullis_oidc cookie of the browser that started the flow is the proof' })),
})
export const LinkBody = Body({ redirect_to: Type.String({ minLength: 1, maxLength: 2048 }) })
export const LinkStarted = Envelope(Type.Object({ authorization_url: Type.String({ description: 'Send the browser here (it carries the portcullis_oidc cookie this answer set)' }) }))
export const Identity = Type.Object({
  id: Type.String({ format: 'uuid' }),
  provider: Type.String(),
  email: Type.Union([Type.String(), Type.Null()]),
  created_at: When,
  last_used_at: Type.Union([When, Type.Null()]),
})
export const IdentityList = Envelope(Type.Object({ identities: Type.Array(Identity) }))
export const IdentityParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const IdentityDeleted = Envelope(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }))

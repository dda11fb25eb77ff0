import Type, { type Static } from 'typebox'
import { Envelope } from '../http/schemas.ts'

/**
 * The client registry's schemas (docs/admin.md, "The OpenID provider's clients"): they validate,
 * serialise and document the admin routes (OpenAPI, tag `admin`). They check shapes only; the
 * rules between fields (a public client's method, PKCE, which URIs a client may use) are the
 * registry's, so the CLI gets the same answers as the API.
 */
export const CLIENT_TYPES = ['public', 'confidential'] as const
export const CLIENT_SCOPES = ['openid', 'profile', 'email', 'offline_access', 'watchlists:read', 'watchlists:write', 'organizations'] as const
/**
 * A client's scopes unless the operator names them: all but `organizations`, which releases the
 * person's organisations and roles in them, and is given to a client only when an operator says so.
 */
export const DEFAULT_CLIENT_SCOPES = CLIENT_SCOPES.filter((scope) => scope !== 'organizations')
export const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
export const GRANT_TYPES = ['authorization_code', 'refresh_token', DEVICE_CODE_GRANT, 'client_credentials'] as const
export const AUTH_METHODS = ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'] as const
export const ID_TOKEN_ALGS = ['RS256', 'EdDSA'] as const

/** How long each list and each URI may be. */
export const LIST_MAX = 20
export const URI_MAX = 2000

const When = Type.String({ format: 'date-time' })
const Uri = Type.String({ minLength: 1, maxLength: URI_MAX })
const Uris = (description: string) => Type.Array(Uri, { maxItems: LIST_MAX, description })
const ClientType = Type.Enum(CLIENT_TYPES, { description: '`public`: no secret, PKCE required; `confidential`: authenticates at the token endpoint' })
const Scopes = Type.Array(Type.Enum(CLIENT_SCOPES), { minItems: 1, maxItems: LIST_MAX, description: 'The scopes the client may ask for; default all six but `organizations`' })
const GrantTypes = Type.Array(Type.Enum(GRANT_TYPES), { minItems: 1, maxItems: LIST_MAX, description: 'Default authorization_code and refresh_token; client_credentials for confidential clients only' })
const AuthMethod = Type.Enum(AUTH_METHODS, { description: '`none` for a public client (its default); client_secret_basic (the default), client_secret_post or private_key_jwt for a confidential one' })
const IdTokenAlg = Type.Enum(ID_TOKEN_ALGS, { description: 'Default RS256' })
// The members of a public JWK vary with its type; the registry refuses private members and keys
// that do not import as public keys.
const Jwk = Type.Object({ kty: Type.String({ minLength: 1, maxLength: 16 }) }, { additionalProperties: true })
const Jwks = Type.Object({ keys: Type.Array(Jwk, { minItems: 1, maxItems: LIST_MAX }) }, { additionalProperties: false, description: 'Public keys for private_key_jwt (no private members)' })

export const RegisteredClient = Type.Object({
  client_id: Type.String(),
  name: Type.String(),
  type: ClientType,
  redirect_uris: Type.Array(Type.String()),
  post_logout_redirect_uris: Type.Array(Type.String()),
  first_party: Type.Boolean({ description: 'Skips the consent page' }),
  scopes: Type.Array(Type.Enum(CLIENT_SCOPES)),
  grant_types: Type.Array(Type.Enum(GRANT_TYPES)),
  backchannel_logout_uri: Type.Union([Type.String(), Type.Null()]),
  pkce_required: Type.Boolean(),
  token_endpoint_auth_method: AuthMethod,
  jwks: Type.Union([Jwks, Type.Null()]),
  jwks_uri: Type.Union([Type.String(), Type.Null()]),
  id_token_signed_response_alg: IdTokenAlg,
  dynamic: Type.Boolean({ description: 'It registered itself (RFC 7591, OP_REGISTRATION): public, removed after 30 days unused' }),
  created_at: When,
  updated_at: When,
  last_used_at: Type.Union([When, Type.Null()], { description: 'The last token issued to it, to the hour' }),
})
/** A registered client as the admin API and the CLI show it: every field, never the secret. */
export type RegisteredClient = Static<typeof RegisteredClient>

const fields = {
  name: Type.String({ maxLength: 1024, description: '1 to 100 characters, no control characters; trimmed' }),
  type: ClientType,
  redirect_uris: Uris('Exact match, no wildcards or fragments: https; http only on a loopback host (127.0.0.1, [::1], localhost; any port for a native app); a reverse-domain private-use scheme (com.example.app:/cb) for public clients. At least one with authorization_code'),
  post_logout_redirect_uris: Uris('Where end-session may send the browser back; the same rules as redirect_uris'),
  first_party: Type.Boolean({ description: 'Default false' }),
  scopes: Scopes,
  grant_types: GrantTypes,
  backchannel_logout_uri: Type.Union([Uri, Type.Null()], { description: 'https, or http on a loopback host; receives Back-Channel Logout 1.0 logout tokens' }),
  pkce_required: Type.Boolean({ description: 'Default true; false only for a confidential client whose software cannot send PKCE' }),
  token_endpoint_auth_method: AuthMethod,
  jwks: Type.Union([Jwks, Type.Null()]),
  jwks_uri: Type.Union([Uri, Type.Null()], { description: 'https, or http on a loopback host; jwks or jwks_uri for private_key_jwt, not both' }),
  id_token_signed_response_alg: IdTokenAlg,
}
const optional = <K extends keyof typeof fields>(key: K) => Type.Optional(fields[key])

export const ClientCreateBody = Type.Object(
  {
    name: fields.name,
    type: fields.type,
    redirect_uris: optional('redirect_uris'),
    post_logout_redirect_uris: optional('post_logout_redirect_uris'),
    first_party: optional('first_party'),
    scopes: optional('scopes'),
    grant_types: optional('grant_types'),
    backchannel_logout_uri: optional('backchannel_logout_uri'),
    pkce_required: optional('pkce_required'),
    token_endpoint_auth_method: optional('token_endpoint_auth_method'),
    jwks: optional('jwks'),
    jwks_uri: optional('jwks_uri'),
    id_token_signed_response_alg: optional('id_token_signed_response_alg'),
  },
  { additionalProperties: false },
)
export type ClientCreate = Static<typeof ClientCreateBody>

// PATCH: the members given replace the stored ones (null clears a URI or the keys); `type` may be
// sent but not changed.
export const ClientPatchBody = Type.Object(
  {
    name: optional('name'),
    type: optional('type'),
    redirect_uris: optional('redirect_uris'),
    post_logout_redirect_uris: optional('post_logout_redirect_uris'),
    first_party: optional('first_party'),
    scopes: optional('scopes'),
    grant_types: optional('grant_types'),
    backchannel_logout_uri: optional('backchannel_logout_uri'),
    pkce_required: optional('pkce_required'),
    token_endpoint_auth_method: optional('token_endpoint_auth_method'),
    jwks: optional('jwks'),
    jwks_uri: optional('jwks_uri'),
    id_token_signed_response_alg: optional('id_token_signed_response_alg'),
  },
  { additionalProperties: false, minProperties: 1 },
)
export type ClientPatch = Static<typeof ClientPatchBody>

// Unknown or malformed ids are simply clients that do not exist (404).
export const ClientParams = Type.Object({ client_id: Type.String({ maxLength: 64 }) })
const Secret = Type.String({ description: 'Shown only here: it is stored sealed and never shown again' })
export const ClientCreated = Envelope(Type.Object({ client: RegisteredClient, client_secret: Type.Optional(Secret) }))
export const OneClient = Envelope(Type.Object({ client: RegisteredClient }))
export const ClientList = Envelope(Type.Object({ clients: Type.Array(RegisteredClient) }))
export const ClientDeleted = Envelope(Type.Object({ client_id: Type.String(), deleted: Type.Literal(true) }))
export const ClientSecretRotated = Envelope(Type.Object({ client: RegisteredClient, client_secret: Secret }))

/** An app the user approved through the provider. */
export const App = Type.Object({
  client_id: Type.String(),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  granted_at: When,
  last_used_at: Type.Union([When, Type.Null()], { description: 'The last token issued under this approval, to the minute' }),
})
/** The apps a user approved (GET /auth/me/apps). */
export const AppList = Envelope(Type.Object({ apps: Type.Array(App) }))
export const AppParams = Type.Object({ client_id: Type.String({ minLength: 1, maxLength: 128 }) })
export const AppRevoked = Envelope(Type.Object({ client_id: Type.String(), revoked: Type.Literal(true) }))

import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'
import { MAX_RESOURCE_SCOPES, RESOURCE_SCOPE_PATTERN } from './resources.ts'

/** The registered resources' admin routes (docs/provider.md, "Resources"). */
const Scope = Type.Object({
  name: Type.String({ pattern: RESOURCE_SCOPE_PATTERN.source, maxLength: 100, description: 'As clients ask for it; never an OpenID Connect scope' }),
  description: Type.String({ minLength: 1, maxLength: 400, description: 'What it lets an app do, in words: the consent page shows it (at most 200 characters once trimmed)' }),
}, { additionalProperties: false })
const Scopes = Type.Array(Scope, { maxItems: MAX_RESOURCE_SCOPES })

export const Resource = Type.Object({
  id: Type.String({ format: 'uuid' }),
  uri: Type.String({ description: 'The resource indicator (RFC 8707) and the access tokens\' audience, exactly as registered' }),
  name: Type.String({ description: 'Named on the consent page' }),
  scopes: Type.Array(Type.Object({ name: Type.String(), description: Type.String() })),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
})

export const ResourceParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const CreateResourceBody = Body({
  uri: Type.String({ minLength: 1, maxLength: 2000, description: 'https:// (http:// on a loopback host outside production), no fragment' }),
  name: Type.String({ minLength: 1, maxLength: 400 }),
  scopes: Scopes,
})
export const UpdateResourceBody = Type.Object({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 400 })), scopes: Type.Optional(Scopes) }, { additionalProperties: false, minProperties: 1 })
export const OneResource = Envelope(Type.Object({ resource: Resource }))
export const ResourceList = Envelope(Type.Object({ resources: Type.Array(Resource) }))
export const ResourceDeleted = Envelope(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }))

import Type from 'typebox'
import { Body, Envelope } from '../http/schemas.ts'

export const NAME_MAX = 100
export const SYMBOLS_MAX = 200
export const LISTS_MAX = 100
/** An organisation's lists (docs/authorization.md): as many as one user's, whoever made them. */
export const ORGANIZATION_LISTS_MAX = 100
export const SYMBOL_PATTERN = /^[A-Z0-9.-]{1,15}$/

const SymbolInput = Type.String({ minLength: 1, maxLength: 64, description: '1 to 15 of A-Z 0-9 . - (stored upper-case)' })

export const Watchlist = Type.Object({
  id: Type.String({ format: 'uuid' }),
  name: Type.String(),
  symbols: Type.Array(Type.String()),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
  organization_id: Type.Optional(Type.String({ format: 'uuid', description: "The organisation that owns the list; absent on the caller's own lists" })),
})

// Checked as UUIDs by the service: an id that is no UUID is an organisation the caller is not in (404).
const organizationId = (description: string) => Type.String({ maxLength: 64, description })

export const CreateBody = Body({
  name: Type.String({ maxLength: 1024 }),
  symbols: Type.Optional(Type.Array(SymbolInput, { maxItems: SYMBOLS_MAX })),
  organization_id: Type.Optional(Type.Union([organizationId('An organisation to own the list (needs watchlists:write in it)'), Type.Null()], { description: "Absent or null: the caller's own list" })),
})

export const UpdateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 1024 })),
    symbols: Type.Optional(Type.Array(SymbolInput, { maxItems: SYMBOLS_MAX })),
  },
  { additionalProperties: false, minProperties: 1 },
)

export const AddSymbolBody = Body({ symbol: SymbolInput })

// Path ids are checked as UUIDs by the service: a malformed id is simply a list that does not exist (404).
export const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) })
export const SymbolParams = Type.Object({ id: Type.String({ maxLength: 64 }), symbol: Type.String({ maxLength: 64 }) })

export const ListQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    organization_id: Type.Optional(organizationId("An organisation's lists (needs watchlists:read in it) instead of the caller's own")),
  },
  { additionalProperties: false },
)

export const One = Envelope(Type.Object({ watchlist: Watchlist }))
export const Page = Envelope(Type.Object({ watchlists: Type.Array(Watchlist), next_cursor: Type.Union([Type.String(), Type.Null()]) }))
export const Deleted = Envelope(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }))

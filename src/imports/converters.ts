import { createInterface } from 'node:readline'
import type { Static } from 'typebox'
import type { ImportLine } from './schemas.ts'

/**
 * Other systems' exports, read in their own shape and turned into import lines (`portcullis users
 * import --from X`, docs/migrating.md has each recipe). A converter only moves fields across: every
 * check of a line stays the import's (src/imports/lines.ts), so a value the old system got wrong is
 * refused there with its reason. A record that cannot become a line at all (no address, a deleted
 * user) is reported by its place in the export and the rest go on. Nothing is held but the record
 * being read: JSON Lines a line at a time, and the one-document exports (Firebase, Cognito) an
 * element of their user list at a time, so an export of any size reads in flat memory.
 */

export const SOURCES = ['auth0', 'firebase', 'supabase', 'cognito'] as const
export type Source = (typeof SOURCES)[number]

/** One record of an export: its place (1-based), and the import line made of it or why none could be. */
export type Converted = { number: number; line: unknown } | { number: number; error: string }

export interface ConvertOptions {
  /**
   * The identity providers whose links come along (Firebase's `providerUserInfo`, a provider named
   * as the first label of its providerId: `google` for `google.com`). None when absent: without a
   * link, the first provider sign-in finds the account by its verified address instead.
   */
  providers?: ReadonlySet<string>
  /** Now, in ms: a Supabase ban that ends after it imports the account disabled. */
  now?: number
}

type Line = Static<typeof ImportLine>
type Conversion = { line: Line } | { error: string }
type Fields = Record<string, unknown>
/** A record as read: parsed, or why it could not be. */
type Read = { number: number; record: unknown } | { number: number; error: string }

export async function* convertedLines(from: Source, input: NodeJS.ReadableStream, options: ConvertOptions = {}): AsyncGenerator<Converted> {
  const { records, convert } = readerOf(from, input, options)
  for await (const read of records) {
    if ('error' in read) {
      yield read
      continue
    }
    if (!isObject(read.record)) {
      yield { number: read.number, error: 'not a JSON object' }
      continue
    }
    const converted = convert(read.record)
    yield 'error' in converted ? { number: read.number, error: converted.error } : { number: read.number, line: converted.line }
  }
}

/** How each system's export is read, and how one of its records becomes a line. */
function readerOf(from: Source, input: NodeJS.ReadableStream, options: ConvertOptions): { records: AsyncIterable<Read>; convert: (record: Fields) => Conversion } {
  switch (from) {
    case 'auth0':
      return { records: textRecords(input), convert: fromAuth0 }
    case 'supabase': {
      const now = options.now ?? Date.now()
      return { records: textRecords(input, copyText), convert: (record) => fromSupabase(record, now) }
    }
    case 'firebase': {
      const providers = options.providers ?? new Set<string>()
      return { records: listElements(input, 'users', 'firebase auth:export --format=json'), convert: (record) => fromFirebase(record, providers) }
    }
    case 'cognito':
      return { records: listElements(input, 'Users', 'aws cognito-idp list-users'), convert: fromCognito }
  }
}

// ---------------------------------------------------------------------------------------------
// Reading the exports

/** JSON Lines, each non-blank line decoded (if asked) and parsed, numbered as an editor shows them. */
async function* textRecords(input: NodeJS.ReadableStream, decode?: (text: string) => string | null): AsyncGenerator<Read> {
  let number = 0
  for await (const raw of createInterface({ input, crlfDelay: Infinity })) {
    number++
    const undecoded = number === 1 ? withoutBom(raw) : raw
    const text = decode ? decode(undecoded) : undecoded
    if (text === null || text.trim() === '') continue
    try {
      yield { number, record: JSON.parse(text) as unknown }
    } catch {
      yield { number, error: 'not valid JSON' }
    }
  }
}

function withoutBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
}

const COPY_ESCAPES: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' }

/**
 * One line of PostgreSQL's COPY text format, as `\copy ... to 'file'` writes it: a backslash in
 * the value is written doubled, so the JSON inside reads back only once the escapes are undone.
 * `\.` alone ends the data; null for it.
 */
function copyText(line: string): string | null {
  if (line === '\\.') return null
  return line.replace(/\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))/g, (_, octal: string | undefined, hex: string | undefined, other: string | undefined) => {
    if (octal !== undefined) return String.fromCharCode(parseInt(octal, 8))
    if (hex !== undefined) return String.fromCharCode(parseInt(hex, 16))
    return COPY_ESCAPES[other!] ?? other!
  })
}

/**
 * The elements of the list under `key` in a JSON document's top-level object (`{"users": [...]}`),
 * each parsed as the document arrives, numbered from 1. The scan only follows strings and nesting
 * to find where each element starts and ends; JSON.parse then reads each element alone. A
 * document that is not such an object, or has no such list, stops the import: it is not the export
 * this converter reads (made by `command`).
 */
async function* listElements(input: NodeJS.ReadableStream, key: string, command: string): AsyncGenerator<Read> {
  const notExport = (what: string) => new Error(`not the JSON of \`${command}\`: ${what}`)
  const decoder = new TextDecoder('utf-8')
  let started = false
  let depth = 0
  let inString = false
  let escaped = false
  /** The string being read at the top level (a key, or a value), and the last one read. */
  let topString: string | null = null
  let lastTopString = ''
  let currentKey: string | null = null
  let inList = false
  let listDone = false
  let element = ''
  let number = 0

  const parsed = (text: string): Read | null => {
    if (text.trim() === '') return null
    number++
    try {
      return { number, record: JSON.parse(text) as unknown }
    } catch {
      return { number, error: 'not valid JSON' }
    }
  }

  for await (const chunk of input) {
    let text = typeof chunk === 'string' ? chunk : decoder.decode(chunk as Uint8Array, { stream: true })
    if (!started) {
      text = withoutBom(text).trimStart()
      if (text === '') continue
      if (text[0] !== '{') throw notExport('the file is not a JSON object')
      started = true
    }
    let start = 0
    const found: Read[] = []
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i)
      if (inString) {
        if (escaped) escaped = false
        else if (c === 0x5c /* \ */) escaped = true
        else if (c === 0x22 /* " */) {
          inString = false
          if (topString !== null) {
            lastTopString = topString + text.slice(start, i)
            topString = null
          }
        }
        continue
      }
      if (c === 0x22) {
        inString = true
        if (depth === 1) {
          topString = ''
          start = i + 1
        }
      } else if (c === 0x3a /* : */ && depth === 1) {
        currentKey = lastTopString
      } else if (c === 0x2c /* , */) {
        if (depth === 1) currentKey = null
        else if (inList && depth === 2) {
          const read = parsed(element + text.slice(start, i))
          if (read) found.push(read)
          element = ''
          start = i + 1
        }
      } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
        depth++
        if (c === 0x5b && depth === 2 && currentKey === key && !listDone) {
          inList = true
          element = ''
          start = i + 1
        }
      } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
        if (inList && depth === 2) {
          const read = parsed(element + text.slice(start, i))
          if (read) found.push(read)
          element = ''
          inList = false
          listDone = true
        }
        depth--
      }
    }
    // What of this chunk is still being read carries over to the next one.
    if (inList) element += text.slice(start)
    else if (topString !== null) topString += text.slice(start)
    yield* found
  }
  if (inList) {
    // A file cut short (a copy that did not finish): the last record is incomplete.
    number++
    yield { number, error: 'the file ends inside this record (was the export cut short?)' }
  } else if (!listDone) {
    throw notExport(started ? `no "${key}" list` : 'the file is empty')
  }
}

// ---------------------------------------------------------------------------------------------
// The systems

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value.trim() !== '' ? value : undefined
}

/** true/false, or the strings some exports write them as; undefined for anything else. */
function flag(value: unknown): boolean | undefined {
  if (value === true || value === 'true') return true
  if (value === false || value === 'false') return false
  return undefined
}

/**
 * An export's time as the line takes it: ISO 8601 when it parses (PostgreSQL's microseconds and
 * offsets included), else as it was, for the import to refuse with its reason.
 */
function time(value: unknown): string | number | undefined {
  if (typeof value === 'number') return value
  if (typeof value !== 'string' || value === '') return undefined
  const ms = Date.parse(value)
  return Number.isFinite(ms) ? new Date(ms).toISOString() : value
}

function isObject(value: unknown): value is Fields {
  return !!value && typeof value === 'object' && !Array.isArray(value)
}

/** An object without the keys given, or undefined when nothing is left. */
function without(value: unknown, keys: readonly string[]): Fields | undefined {
  if (!isObject(value)) return undefined
  const rest = Object.fromEntries(Object.entries(value).filter(([name]) => !keys.includes(name)))
  return Object.keys(rest).length > 0 ? rest : undefined
}

/** The fields set, without the ones left undefined. */
function line(fields: { [K in keyof Line]: Line[K] | undefined }): Conversion {
  return { line: Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) as Line }
}

/**
 * Auth0: the password hash export its support hands over (`_id`, `email`, `email_verified`,
 * `passwordHash`, `tenant`, `connection`...), alone or merged with the user export job's fields
 * (`user_id`, `name`, `created_at`, `blocked`, `app_metadata`...). Auth0's ids ("auth0|...") are no
 * UUIDs: the account gets a new one. `name` is Auth0's default, the address itself, unless someone
 * set it: that default is left out (the address's local part is the import's).
 */
function fromAuth0(record: Fields): Conversion {
  const email = text(record.email)
  if (!email) return { error: 'no email address (a user of a connection without one cannot be imported)' }
  const name = text(record.name)
  const created = isObject(record.created_at) ? record.created_at.$date : record.created_at
  return line({
    email,
    email_verified: flag(record.email_verified),
    full_name: name !== undefined && name.trim().toLowerCase() !== email.trim().toLowerCase() ? name : undefined,
    created_at: time(created),
    disabled: record.blocked === true ? true : undefined,
    password_hash: text(record.passwordHash),
    app_metadata: without(record.app_metadata, []),
  })
}

/** Firebase's own sign-in methods: never an identity provider here. */
const FIREBASE_OWN = new Set(['password', 'phone', 'anonymous', 'emailLink'])

/**
 * Firebase: one user of `firebase auth:export users.json --format=json`. `localId` is no UUID (the
 * account gets a new one). `customAttributes` (the custom claims, a JSON string) is what operators
 * set, as app_metadata is here. A provider link comes along only for the providers given.
 */
function fromFirebase(record: Fields, providers: ReadonlySet<string>): Conversion {
  const email = text(record.email)
  if (!email) return { error: 'no email address (a phone-only, anonymous or provider user without one cannot be imported)' }
  let appMetadata: Fields | undefined
  if (text(record.customAttributes)) {
    let claims: unknown
    try {
      claims = JSON.parse(record.customAttributes as string)
    } catch {
      claims = null
    }
    if (!isObject(claims)) return { error: 'customAttributes is not a JSON object' }
    appMetadata = without(claims, [])
  }
  const identities: { provider: string; subject: string }[] = []
  for (const info of Array.isArray(record.providerUserInfo) ? record.providerUserInfo : []) {
    const providerId = isObject(info) ? text(info.providerId) : undefined
    const subject = isObject(info) ? text(info.rawId) : undefined
    if (!providerId || !subject || FIREBASE_OWN.has(providerId)) continue
    const provider = providerId.split('.')[0]!
    if (providers.has(provider) && !identities.some((seen) => seen.provider === provider)) identities.push({ provider, subject })
  }
  const createdAt = typeof record.createdAt === 'string' && /^\d{1,15}$/.test(record.createdAt) ? Number(record.createdAt) : time(record.createdAt)
  const hash = text(record.passwordHash)
  return line({
    email,
    email_verified: flag(record.emailVerified),
    full_name: text(record.displayName),
    created_at: createdAt,
    disabled: record.disabled === true ? true : undefined,
    // A hash without its salt is refused by the import (invalid), never kept half.
    password_hash: hash ? { algorithm: 'firebase-scrypt', hash, salt: typeof record.salt === 'string' ? record.salt : '' } : undefined,
    app_metadata: appMetadata,
    identities: identities.length > 0 ? identities : undefined,
  })
}

/** The keys Supabase writes into raw_app_meta_data itself: how the user signed up, not what operators set. */
const SUPABASE_OWN = ['provider', 'providers'] as const

/**
 * Supabase: one row of `auth.users` as `row_to_json` writes it. The id is a UUID and is kept. A
 * deleted row is not an account to bring over; a ban that has not ended imports it disabled.
 */
function fromSupabase(record: Fields, now: number): Conversion {
  if (record.deleted_at !== null && record.deleted_at !== undefined) return { error: 'deleted in Supabase (deleted_at is set): not imported' }
  const email = text(record.email)
  if (!email) return { error: 'no email address (a phone-only or anonymous user cannot be imported)' }
  const meta = isObject(record.raw_user_meta_data) ? record.raw_user_meta_data : {}
  const bannedUntil = typeof record.banned_until === 'string' ? Date.parse(record.banned_until) : NaN
  return line({
    email,
    user_id: text(record.id),
    email_verified: record.email_confirmed_at !== null && record.email_confirmed_at !== undefined,
    full_name: text(meta.full_name) ?? text(meta.name),
    created_at: time(record.created_at),
    disabled: bannedUntil > now ? true : undefined,
    password_hash: text(record.encrypted_password),
    app_metadata: without(record.raw_app_meta_data, SUPABASE_OWN),
  })
}

/**
 * The Cognito user state whose password the user chose and Cognito checks: only those accounts are
 * imported for lazy migration. The others have none to move (UNCONFIRMED: sign-up never finished,
 * and Cognito signs no one in before it is; FORCE_CHANGE_PASSWORD: only an administrator's
 * temporary one; RESET_REQUIRED, COMPROMISED, ARCHIVED: refused by Cognito itself;
 * EXTERNAL_PROVIDER: a federated user) and sign in by e-mailed code or reset.
 */
const COGNITO_WITH_PASSWORD = new Set(['CONFIRMED'])

/**
 * Cognito: one user of `aws cognito-idp list-users`. Cognito exports no password hashes, so an
 * account whose password Cognito checks is imported with `"password": "legacy"` (its first sign-in
 * asks LEGACY_VERIFY_URL). The `sub` is a UUID and is kept.
 */
function fromCognito(record: Fields): Conversion {
  const attributes = new Map<string, unknown>()
  for (const attribute of Array.isArray(record.Attributes) ? record.Attributes : []) {
    if (isObject(attribute) && typeof attribute.Name === 'string') attributes.set(attribute.Name, attribute.Value)
  }
  const email = text(attributes.get('email'))
  if (!email) return { error: 'no email attribute (a user known by phone number or username only cannot be imported)' }
  const given = [text(attributes.get('given_name')), text(attributes.get('family_name'))].filter(Boolean).join(' ')
  // The API gives seconds since 1970; the AWS CLI prints them as ISO 8601.
  const created = typeof record.UserCreateDate === 'number' ? Math.round(record.UserCreateDate * 1000) : time(record.UserCreateDate)
  return line({
    email,
    user_id: text(attributes.get('sub')),
    email_verified: flag(attributes.get('email_verified')),
    full_name: text(attributes.get('name')) ?? (given || undefined),
    created_at: created,
    disabled: record.Enabled === false ? true : undefined,
    password: typeof record.UserStatus === 'string' && COGNITO_WITH_PASSWORD.has(record.UserStatus) ? 'legacy' : undefined,
  })
}

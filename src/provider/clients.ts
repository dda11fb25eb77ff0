import { createPublicKey, randomBytes, type JsonWebKey } from 'node:crypto'
import { CLI_CONTEXT, recordEvent, SYSTEM_CONTEXT, type RequestContext } from '../audit/events.ts'
import { KeyEncryptionError, type KeySealer } from '../auth/key-encryption.ts'
import type { Rewrap } from '../auth/keys.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { AppError, type ErrorDetail } from '../errors.ts'
import { cleanLabel } from '../text.ts'
import { OncePerWindow } from '../once-per-window.ts'
import { clientStore, type ClientRow } from './client-store.ts'
import {
  AUTH_METHODS, CLIENT_SCOPES, CLIENT_TYPES, DEFAULT_CLIENT_SCOPES, GRANT_TYPES, ID_TOKEN_ALGS, LIST_MAX, URI_MAX,
  type ClientCreate, type ClientPatch, type RegisteredClient,
} from './schemas.ts'
import { setBounded } from '../bounded-map.ts'

export type { RegisteredClient } from './schemas.ts'

/** A client's registration as op_clients.metadata keeps it: everything but its id, secret and times. */
type Registration = Omit<RegisteredClient, 'client_id' | 'created_at' | 'updated_at' | 'dynamic' | 'last_used_at'>

/**
 * What panva's oidc-provider reads for a client (its `Client` model, through the storage adapter),
 * plus two fields of ours that the provider's configuration declares as extra client metadata.
 */
export interface LibraryClientMetadata {
  client_id: string
  /** Confidential clients only; opened from its sealed form on every read. */
  client_secret?: string
  client_name: string
  redirect_uris: string[]
  post_logout_redirect_uris: string[]
  grant_types: RegisteredClient['grant_types']
  response_types: 'code'[]
  token_endpoint_auth_method: RegisteredClient['token_endpoint_auth_method']
  application_type: 'web' | 'native'
  scope: string
  jwks?: NonNullable<RegisteredClient['jwks']>
  jwks_uri?: string
  id_token_signed_response_alg: RegisteredClient['id_token_signed_response_alg']
  backchannel_logout_uri?: string
  backchannel_logout_session_required?: true
  first_party: boolean
  pkce_required: boolean
}

/** The operators' console's own client (src/console/routes.ts). */
export const CONSOLE_CLIENT_ID = 'portcullis-console'

export interface ClientRegistryDeps {
  db: Db
  clock: Clock
  sealer: KeySealer
}

const NAME_MAX = 100
const DEFAULT_GRANTS: Registration['grant_types'] = ['authorization_code', 'refresh_token']
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])
// RFC 8252 section 7.1: a private-use scheme is a reverse domain name the app's owner controls.
const PRIVATE_USE_SCHEME = /^[a-z][a-z0-9+-]*(\.[a-z0-9+-]+)+$/
const SPACE_OR_CONTROL = /[\s\p{Cc}]/u
// RFC 7517/7518: the members that make a JWK private (or symmetric, `k`).
const PRIVATE_JWK_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k']

/** The sealed secret names its client, so a secret copied onto another client's row does not open there. */
const secretAad = (clientId: string) => `op_client_secret:${clientId}`
const iso = (ms: number) => new Date(ms).toISOString()
const unique = <T>(list: readonly T[]): T[] => [...new Set(list)]
const includes = <T extends string>(list: readonly T[], value: unknown): value is T => list.includes(value as T)

/**
 * 128 random bits as 22 base64url characters. An id that starts with `-` would read as an option
 * on the command line (`portcullis clients show -x...`), so those are drawn again.
 */
function newClientId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url')
    if (/^[A-Za-z0-9]/.test(id)) return id
  }
}

function newSecret(): string {
  return randomBytes(32).toString('base64url')
}

/** The members in the order every answer shows them (JSON keeps insertion order). */
function ordered(r: Registration): Registration {
  return {
    name: r.name,
    type: r.type,
    redirect_uris: r.redirect_uris,
    post_logout_redirect_uris: r.post_logout_redirect_uris,
    first_party: r.first_party,
    scopes: r.scopes,
    grant_types: r.grant_types,
    backchannel_logout_uri: r.backchannel_logout_uri,
    pkce_required: r.pkce_required,
    token_endpoint_auth_method: r.token_endpoint_auth_method,
    jwks: r.jwks,
    jwks_uri: r.jwks_uri,
    id_token_signed_response_alg: r.id_token_signed_response_alg,
  }
}

function registrationOf(row: ClientRow): Registration {
  return JSON.parse(row.metadata) as Registration
}

function view(row: ClientRow): RegisteredClient {
  return {
    client_id: row.client_id, ...ordered(registrationOf(row)),
    dynamic: row.dynamic === 1,
    created_at: iso(row.created_at), updated_at: iso(row.updated_at),
    last_used_at: row.last_used_at === null ? null : iso(row.last_used_at),
  }
}

/** A new registration: what the operator gave, and the defaults of docs/admin.md for the rest. */
function withDefaults(input: ClientCreate): Registration {
  return {
    name: input.name,
    type: input.type,
    redirect_uris: input.redirect_uris ?? [],
    post_logout_redirect_uris: input.post_logout_redirect_uris ?? [],
    first_party: input.first_party ?? false,
    scopes: input.scopes ?? [...DEFAULT_CLIENT_SCOPES],
    grant_types: input.grant_types ?? DEFAULT_GRANTS,
    backchannel_logout_uri: input.backchannel_logout_uri ?? null,
    pkce_required: input.pkce_required ?? true,
    token_endpoint_auth_method: input.token_endpoint_auth_method ?? (input.type === 'confidential' ? 'client_secret_basic' : 'none'),
    jwks: input.jwks ?? null,
    jwks_uri: input.jwks_uri ?? null,
    id_token_signed_response_alg: input.id_token_signed_response_alg ?? 'RS256',
  }
}

type UriKind = { kind: 'https' | 'loopback' | 'private-use'; host: string } | { problem: string }

/** Which of the three accepted kinds a URI is, or what is wrong with it whatever it is for. */
function classify(uri: string): UriKind {
  if (uri.length > URI_MAX) return { problem: `must be at most ${URI_MAX} characters` }
  if (SPACE_OR_CONTROL.test(uri)) return { problem: 'must not contain spaces or control characters' }
  // Redirect URIs are compared exactly (RFC 9700 section 4.1.3): a pattern would let a look-alike through.
  if (uri.includes('*')) return { problem: 'must not contain a wildcard (*): URIs are matched exactly' }
  const url = URL.parse(uri)
  if (!url) return { problem: 'must be an absolute URI' }
  if (uri.includes('#')) return { problem: 'must not have a fragment' }
  if (url.protocol === 'https:') return { kind: 'https', host: url.hostname }
  if (url.protocol === 'http:') {
    // Plain http is readable on the way; only a loopback address never leaves the device (RFC 8252 section 7.3).
    return LOOPBACK_HOSTS.has(url.hostname) ? { kind: 'loopback', host: url.hostname } : { problem: 'must be https (http only on a loopback host: 127.0.0.1, [::1] or localhost)' }
  }
  if (PRIVATE_USE_SCHEME.test(url.protocol.slice(0, -1))) return { kind: 'private-use', host: url.hostname }
  return { problem: 'must be https, http on a loopback host, or a reverse-domain private-use scheme (com.example.app:/callback)' }
}

/**
 * `native` when every redirect URI is a native app's (loopback http or a private-use scheme): the
 * library then lets a loopback URI match on any port (RFC 8252 section 7.3) and accepts
 * private-use schemes, which it refuses for a web client.
 */
function applicationType(redirectUris: string[]): 'web' | 'native' {
  const kinds = redirectUris.map(classify)
  return kinds.length > 0 && kinds.every((k) => 'kind' in k && k.kind !== 'https') ? 'native' : 'web'
}

function jwksProblems(jwks: unknown): ErrorDetail[] {
  const keys = (jwks as { keys?: unknown } | null)?.keys
  if (typeof jwks !== 'object' || !Array.isArray(keys)) return [{ field: 'jwks', message: 'must be a JSON Web Key Set: {"keys": [...]}' }]
  if (keys.length === 0) return [{ field: 'jwks.keys', message: 'must hold at least one key' }]
  if (keys.length > LIST_MAX) return [{ field: 'jwks.keys', message: `must hold at most ${LIST_MAX} keys` }]
  const details: ErrorDetail[] = []
  for (const [i, key] of (keys as unknown[]).entries()) {
    const field = `jwks.keys.${i}`
    if (typeof key !== 'object' || key === null || Array.isArray(key)) {
      details.push({ field, message: 'must be a JSON Web Key' })
      continue
    }
    // A private key sent here would be stored and shown by every GET: refused, never stripped.
    const secret = PRIVATE_JWK_MEMBERS.filter((member) => member in key)
    if (secret.length > 0) {
      details.push({ field, message: `must be a public key (remove ${secret.join(', ')})` })
      continue
    }
    try {
      createPublicKey({ key: key as JsonWebKey, format: 'jwk' })
    } catch {
      details.push({ field, message: 'is not a usable public key' })
    }
  }
  return details
}

type ClientType = RegisteredClient['type'] | null

/** A list of details and the one way to add to it. */
function collector() {
  const details: ErrorDetail[] = []
  return { details, problem: (field: string, message: string): void => void details.push({ field, message }) }
}

function listProblems(r: Registration, type: ClientType): ErrorDetail[] {
  const { details, problem } = collector()
  const lists = { redirect_uris: r.redirect_uris, post_logout_redirect_uris: r.post_logout_redirect_uris, scopes: r.scopes, grant_types: r.grant_types }
  for (const [field, list] of Object.entries(lists)) if (list.length > LIST_MAX) problem(field, `must have at most ${LIST_MAX} entries`)
  if (r.scopes.length === 0) problem('scopes', 'must name at least one scope')
  r.scopes.forEach((scope, i) => {
    if (!includes(CLIENT_SCOPES, scope)) problem(`scopes.${i}`, `must be one of ${CLIENT_SCOPES.join(', ')}`)
  })
  if (r.grant_types.length === 0) problem('grant_types', 'must name at least one grant type')
  r.grant_types.forEach((grant, i) => {
    if (!includes(GRANT_TYPES, grant)) problem(`grant_types.${i}`, `must be one of ${GRANT_TYPES.join(', ')}`)
    // A public client has nothing to authenticate with: client_credentials would hand tokens to anyone.
    else if (grant === 'client_credentials' && type === 'public') problem(`grant_types.${i}`, 'client_credentials is only for confidential clients')
  })
  return details
}

function uriProblems(r: Registration, type: ClientType): ErrorDetail[] {
  const { details, problem } = collector()
  if (r.grant_types.includes('authorization_code') && r.redirect_uris.length === 0) problem('redirect_uris', 'must have at least one URI for the authorization_code grant')
  const native = applicationType(r.redirect_uris) === 'native'
  for (const field of ['redirect_uris', 'post_logout_redirect_uris'] as const) {
    r[field].forEach((uri, i) => {
      const at = `${field}.${i}`
      const kind = classify(uri)
      if ('problem' in kind) return problem(at, kind.problem)
      // An app on a device cannot keep a secret: a client that redirects into one is public by nature.
      if (kind.kind === 'private-use' && type === 'confidential') return problem(at, 'a private-use scheme is only for public (native app) clients')
      // The library judges every URI by the client's application type: these it would refuse.
      if (kind.kind === 'private-use' && !native) return problem(at, 'a private-use scheme needs every redirect URI to be a native app\'s (private-use scheme or loopback http)')
      if (kind.kind === 'https' && native && LOOPBACK_HOSTS.has(kind.host)) problem(at, 'a native app\'s URIs use http, not https, on a loopback host')
    })
  }
  for (const field of ['backchannel_logout_uri', 'jwks_uri'] as const) {
    const uri = r[field]
    if (uri === null) continue
    const kind = classify(uri)
    if ('problem' in kind) problem(field, kind.problem)
    else if (kind.kind === 'private-use') problem(field, 'must be https, or http on a loopback host')
  }
  return details
}

function authenticationProblems(r: Registration, type: ClientType): ErrorDetail[] {
  const { details, problem } = collector()
  const method = r.token_endpoint_auth_method
  if (!includes(AUTH_METHODS, method)) problem('token_endpoint_auth_method', `must be one of ${AUTH_METHODS.join(', ')}`)
  else if (type === 'public' && method !== 'none') problem('token_endpoint_auth_method', 'must be none for a public client (it holds no secret)')
  else if (type === 'confidential' && method === 'none') problem('token_endpoint_auth_method', 'must be client_secret_basic, client_secret_post or private_key_jwt for a confidential client')
  if (typeof r.pkce_required !== 'boolean') problem('pkce_required', 'must be true or false')
  // Without PKCE an intercepted code of a public client is as good as a token (RFC 9700 section 2.1.1).
  else if (type === 'public' && !r.pkce_required) problem('pkce_required', 'must be true for a public client')
  if (method === 'private_key_jwt') {
    if (r.jwks === null && r.jwks_uri === null) problem('jwks', 'private_key_jwt needs jwks or jwks_uri')
    if (r.jwks !== null && r.jwks_uri !== null) problem('jwks_uri', 'give jwks or jwks_uri, not both')
  } else {
    for (const field of ['jwks', 'jwks_uri'] as const) if (r[field] !== null) problem(field, 'is only used with private_key_jwt (set it to null)')
  }
  if (r.jwks !== null) details.push(...jwksProblems(r.jwks))
  if (!includes(ID_TOKEN_ALGS, r.id_token_signed_response_alg)) problem('id_token_signed_response_alg', `must be one of ${ID_TOKEN_ALGS.join(', ')}`)
  return details
}

/**
 * Every problem of a registration, one detail each (a detail's field is the path into the body:
 * `redirect_uris.2`). Rules that depend on the type are judged only once the type is valid, so a
 * wrong type is one problem, not many.
 */
function problemsOf(r: Registration): ErrorDetail[] {
  const type = includes(CLIENT_TYPES, r.type) ? r.type : null
  const { details, problem } = collector()
  if (type === null) problem('type', r.type === undefined ? 'is required' : `must be one of ${CLIENT_TYPES.join(', ')}`)
  if (typeof r.first_party !== 'boolean') problem('first_party', 'must be true or false')
  return [...details, ...listProblems(r, type), ...uriProblems(r, type), ...authenticationProblems(r, type)]
}

/** The registration as stored (name trimmed, lists without repeats), or VALIDATION_ERROR with every problem. */
function validated(r: Registration, extra: ErrorDetail[] = []): Registration {
  const name = cleanLabel(typeof r.name === 'string' ? r.name : '', NAME_MAX)
  const cleaned: Registration = {
    ...r,
    name: name.value,
    redirect_uris: unique(r.redirect_uris),
    post_logout_redirect_uris: unique(r.post_logout_redirect_uris),
    scopes: unique(r.scopes),
    grant_types: unique(r.grant_types),
  }
  const details = [...(name.problem ? [{ field: 'name', message: name.problem }] : []), ...extra, ...problemsOf(cleaned)]
  if (details.length > 0) throw new AppError('VALIDATION_ERROR', { message: 'The client registration is not valid.', details })
  return ordered(cleaned)
}

function notFound(): AppError {
  return new AppError('NOT_FOUND', { message: 'There is no client with this client_id.' })
}

/**
 * The OpenID provider's clients, registered by operators (docs/provider.md, "Portcullis as an OpenID
 * provider"): the admin API and the CLI both go through here. A confidential client's secret is
 * shown once, at creation and at rotation, and stored only sealed under KEY_ENCRYPTION_KEY (the
 * library compares the plaintext, so it cannot be a hash). Every change is an audit event written
 * in its transaction, naming the client in `reason` and never the secret.
 */
export class ClientRegistry {
  /** Each client's last use is written at most once an hour from this instance. */
  private readonly lastUse = new OncePerWindow(3600_000)
  /**
   * The library's view of each client, by the stored metadata and sealed secret it was made from:
   * a row read again unchanged (every token request reads it) is not opened and parsed again.
   */
  private readonly libraryViews = new Map<string, { metadata: string; secret: string | null; view: LibraryClientMetadata }>()

  constructor(private readonly deps: ClientRegistryDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  async create(input: ClientCreate, context: RequestContext = CLI_CONTEXT, options: { dynamic?: boolean } = {}): Promise<{ client: RegisteredClient; client_secret?: string }> {
    const registration = validated(withDefaults(input))
    const now = this.deps.clock.now()
    const clientId = newClientId()
    const secret = registration.type === 'confidential' ? newSecret() : null
    const row: ClientRow = {
      client_id: clientId,
      metadata: JSON.stringify(registration),
      secret: secret === null ? null : this.deps.sealer.seal(secret, secretAad(clientId)),
      created_at: now,
      updated_at: now,
      dynamic: options.dynamic ? 1 : 0,
      last_used_at: null,
    }
    await this.db.transaction().execute(async (trx) => {
      await clientStore.insert(trx, row)
      await recordEvent(trx, this.deps.clock, { type: 'client.created', userId: null, reason: clientId, context })
    })
    return secret === null ? { client: view(row) } : { client: view(row), client_secret: secret }
  }

  /** Oldest first. */
  async list(): Promise<RegisteredClient[]> {
    return (await clientStore.list(this.db)).map(view)
  }

  async get(clientId: string): Promise<RegisteredClient> {
    const row = await clientStore.find(this.db, clientId)
    if (!row) throw notFound()
    return view(row)
  }

  /** PATCH: the members given replace the stored ones, and the result is judged as a new registration would be. */
  async update(clientId: string, patch: ClientPatch, context: RequestContext = CLI_CONTEXT): Promise<RegisteredClient> {
    const given = Object.fromEntries(Object.entries(patch).filter(([, value]) => value !== undefined)) as ClientPatch
    const now = this.deps.clock.now()
    const row = await this.db.transaction().execute(async (trx) => {
      const current = await clientStore.lockForUpdate(trx, clientId, now)
      if (!current) throw notFound()
      const stored = registrationOf(current)
      // The type decides whether a secret exists and what the client may do: a new client instead.
      const typeChange = given.type !== undefined && given.type !== stored.type ? [{ field: 'type', message: 'cannot change (register a new client instead)' }] : []
      const registration = validated({ ...stored, ...given, type: stored.type }, typeChange)
      const metadata = JSON.stringify(registration)
      await clientStore.update(trx, clientId, { metadata })
      await recordEvent(trx, this.deps.clock, { type: 'client.updated', userId: null, reason: clientId, context })
      return { ...current, metadata }
    })
    return view(row)
  }

  /**
   * Removes the client and, in the same transaction, every grant, code and token the provider
   * library holds for it: nothing it was given outlives it.
   */
  async remove(clientId: string, context: RequestContext = CLI_CONTEXT): Promise<{ client_id: string; deleted: true }> {
    await this.db.transaction().execute(async (trx) => {
      if (!(await clientStore.delete(trx, clientId))) throw notFound()
      await clientStore.deleteRecordsOf(trx, clientId)
      await recordEvent(trx, this.deps.clock, { type: 'client.removed', userId: null, reason: clientId, context })
    })
    return { client_id: clientId, deleted: true }
  }

  /**
   * The console's built-in client (src/console/): first-party (no consent page), public with PKCE,
   * its one redirect URI under PUBLIC_URL. Written at every start, so PUBLIC_URL may change and an
   * operator who removed it gets it back; listed like any other client.
   */
  async ensureConsoleClient(redirectUri: string): Promise<void> {
    const registration = validated(withDefaults({ name: 'Portcullis console', type: 'public', redirect_uris: [redirectUri], first_party: true, scopes: ['openid', 'profile', 'email'], grant_types: ['authorization_code'] }))
    const metadata = JSON.stringify(registration)
    const now = this.deps.clock.now()
    const existing = await clientStore.find(this.db, CONSOLE_CLIENT_ID)
    if (existing?.metadata === metadata) return
    if (existing) await clientStore.update(this.db, CONSOLE_CLIENT_ID, { metadata })
    else await clientStore.insert(this.db, { client_id: CONSOLE_CLIENT_ID, metadata, secret: null, created_at: now, updated_at: now, dynamic: 0, last_used_at: null }).catch(async (error: unknown) => {
      // Another instance wrote it at the same moment.
      if (!(await clientStore.find(this.db, CONSOLE_CLIENT_ID))) throw error
    })
  }

  /** Retention: removes dynamic clients unused since `before`, each with what it holds (as remove does). */
  async removeIdleDynamic(before: number): Promise<number> {
    let removed = 0
    for (const clientId of await clientStore.idleDynamic(this.db, before, 1000)) {
      await this.db.transaction().execute(async (trx) => {
        if (!(await clientStore.delete(trx, clientId))) return
        await clientStore.deleteRecordsOf(trx, clientId)
        await recordEvent(trx, this.deps.clock, { type: 'client.removed', userId: null, reason: clientId, context: SYSTEM_CONTEXT })
        removed++
      })
    }
    return removed
  }

  /** A token was issued to the client (the provider says so): its last use, at most once an hour per instance. */
  async used(clientId: string): Promise<void> {
    const now = this.deps.clock.now()
    if (!this.lastUse.first(clientId, now)) return
    await clientStore.touch(this.db, clientId, now)
  }

  /** A new secret, shown once; the old one stops working at once (the library reads the client on every use). */
  async rotateSecret(clientId: string, context: RequestContext = CLI_CONTEXT): Promise<{ client: RegisteredClient; client_secret: string }> {
    const secret = newSecret()
    const now = this.deps.clock.now()
    const row = await this.db.transaction().execute(async (trx) => {
      const current = await clientStore.lockForUpdate(trx, clientId, now)
      if (!current) throw notFound()
      if (registrationOf(current).type !== 'confidential') {
        throw new AppError('VALIDATION_ERROR', { message: 'A public client has no secret.', details: [{ field: 'client_id', message: 'is a public client, which has no secret' }] })
      }
      await clientStore.update(trx, clientId, { secret: this.deps.sealer.seal(secret, secretAad(clientId)) })
      await recordEvent(trx, this.deps.clock, { type: 'client.secret_rotated', userId: null, reason: clientId, context })
      return current
    })
    return { client: view(row), client_secret: secret }
  }

  /**
   * The client as the provider library's `Client` model reads it, or undefined. Read afresh on
   * every call: an update, a rotation or a removal is in force on the next request, on every instance.
   */
  async findForLibrary(clientId: string): Promise<LibraryClientMetadata | undefined> {
    const row = await clientStore.read(this.deps.db, clientId)
    if (!row) return undefined
    const kept = this.libraryViews.get(clientId)
    if (kept && kept.metadata === row.metadata && kept.secret === row.secret) return kept.view
    const view = deepFreeze(this.libraryView(row))
    setBounded(this.libraryViews, clientId, { metadata: row.metadata, secret: row.secret, view }, LIBRARY_VIEWS_MAX)
    return view
  }

  private libraryView(row: ClientRow): LibraryClientMetadata {
    const r = registrationOf(row)
    const secret = r.type === 'confidential' && row.secret !== null ? this.deps.sealer.open(row.secret, secretAad(row.client_id)) : undefined
    return {
      client_id: row.client_id,
      ...(secret === undefined ? {} : { client_secret: secret }),
      client_name: r.name,
      redirect_uris: r.redirect_uris,
      post_logout_redirect_uris: r.post_logout_redirect_uris,
      grant_types: r.grant_types,
      response_types: r.grant_types.includes('authorization_code') ? ['code'] : [],
      token_endpoint_auth_method: r.token_endpoint_auth_method,
      application_type: applicationType(r.redirect_uris),
      scope: r.scopes.join(' '),
      ...(r.jwks === null ? {} : { jwks: r.jwks }),
      ...(r.jwks_uri === null ? {} : { jwks_uri: r.jwks_uri }),
      id_token_signed_response_alg: r.id_token_signed_response_alg,
      ...(r.backchannel_logout_uri === null ? {} : { backchannel_logout_uri: r.backchannel_logout_uri, backchannel_logout_session_required: true as const }),
      first_party: r.first_party,
      pkce_required: r.pkce_required,
    }
  }
}

/** How many clients' library views are kept (the oldest made goes first). */
const LIBRARY_VIEWS_MAX = 1000

/** Frozen through: a view handed out again and again must be the same each time. */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) deepFreeze(inner)
    Object.freeze(value)
  }
  return value
}

/** `portcullis keys rewrap`: client secrets move to the new key-encryption key with everything else. */
export const rewrapClientSecrets: Rewrap = async (trx, from, to) => {
  let rewrapped = 0
  for (const row of await clientStore.sealedSecrets(trx)) {
    const aad = secretAad(row.client_id)
    if (to.tryOpen(row.secret, aad) !== null) continue
    const clear = from.tryOpen(row.secret, aad)
    if (clear === null) throw new KeyEncryptionError(`OLD_KEY_ENCRYPTION_KEY does not decrypt the secret of client ${row.client_id}; nothing was changed`)
    await clientStore.replaceSecret(trx, row.client_id, row.secret, to.seal(clear, aad))
    rewrapped++
  }
  return rewrapped
}

import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import { CLI_CONTEXT, recordEvent, type RequestContext } from '../audit/events.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { isUniqueViolation } from '../db/index.ts'
import type { Database, ResourcesTable } from '../db/schema.ts'
import { AppError, type ErrorDetail } from '../errors.ts'
import { cleanLabel, isUuid } from '../text.ts'
import { OIDC_SCOPES } from './configuration.ts'

/** One scope of a resource, as the consent page explains it. */
export interface ResourceScope {
  name: string
  description: string
}

export interface RegisteredResource {
  id: string
  uri: string
  name: string
  scopes: ResourceScope[]
  created_at: string
  updated_at: string
}

export interface ResourceInput {
  uri: string
  name: string
  scopes: ResourceScope[]
}

/** At most this many registered resources, and scopes each. */
export const MAX_RESOURCES = 100
export const MAX_RESOURCE_SCOPES = 50
const URI_MAX = 2000
const NAME_MAX = 100
const DESCRIPTION_MAX = 200
/** A scope's name: letters, digits and `_ . : / -`, not starting with a mark, never an OpenID scope's. */
export const RESOURCE_SCOPE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}$/
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])

type Row = ResourcesTable

const store = {
  list: (db: Kysely<Database>) => db.selectFrom('resources').selectAll().orderBy('created_at').orderBy('id').execute(),
  byId: async (db: Kysely<Database>, id: string) => (await db.selectFrom('resources').selectAll().where('id', '=', id).executeTakeFirst()) ?? null,
  byUri: async (db: Kysely<Database>, uri: string) => (await db.selectFrom('resources').selectAll().where('uri', '=', uri).executeTakeFirst()) ?? null,
  count: async (db: Kysely<Database>) => Number((await db.selectFrom('resources').select((e) => e.fn.countAll().as('n')).executeTakeFirstOrThrow()).n),
}

function view(row: Row): RegisteredResource {
  return {
    id: row.id,
    uri: row.uri,
    name: row.name,
    scopes: JSON.parse(row.scopes) as ResourceScope[],
    created_at: new Date(Number(row.created_at)).toISOString(),
    updated_at: new Date(Number(row.updated_at)).toISOString(),
  }
}

/**
 * The APIs operators register as resources of the OpenID provider (docs/provider.md, "Resources"),
 * besides the built-in one (the watchlists API, `{PUBLIC_URL}{BASE_PATH}`). A token asked for with
 * `resource=` one of these URIs (exactly as registered) is a JWT for that audience carrying only its
 * scopes; an unknown URI is `invalid_target` (src/provider/configuration.ts). Each change is one
 * transaction with its audit record; the provider reads the registry on every authorization and
 * token request, so a change holds on every instance at once.
 */
export class ResourceRegistry {
  constructor(private readonly deps: { db: Db; clock: Clock; builtIn: string; production: boolean }) {}

  private get db() {
    return this.deps.db.kysely
  }

  async list(): Promise<RegisteredResource[]> {
    return (await store.list(this.db)).map(view)
  }

  async get(id: string): Promise<RegisteredResource> {
    const row = isUuid(id) ? await store.byId(this.db, id) : null
    if (!row) throw new AppError('NOT_FOUND')
    return view(row)
  }

  /** The registered resource with exactly this URI, or null (the provider's lookup). */
  async find(uri: string): Promise<RegisteredResource | null> {
    if (uri.length > URI_MAX) return null
    const row = await store.byUri(this.db, uri)
    return row ? view(row) : null
  }

  async create(input: ResourceInput, context: RequestContext = CLI_CONTEXT): Promise<RegisteredResource> {
    const checked = this.check(input)
    const now = this.deps.clock.now()
    const row: Row = { id: randomUUID(), uri: checked.uri, name: checked.name, scopes: JSON.stringify(checked.scopes), created_at: now, updated_at: now }
    try {
      await this.db.transaction().execute(async (trx) => {
        if ((await store.count(trx)) >= MAX_RESOURCES) throw new AppError('LIMIT_EXCEEDED', { message: `At most ${MAX_RESOURCES} resources may be registered.` })
        await trx.insertInto('resources').values(row).execute()
        await recordEvent(trx, this.deps.clock, { type: 'resource.created', reason: row.id, context })
      })
    } catch (error) {
      if (isUniqueViolation(error)) throw invalid('uri', 'is registered already')
      throw error
    }
    return view(row)
  }

  async update(id: string, patch: Partial<Omit<ResourceInput, 'uri'>>, context: RequestContext = CLI_CONTEXT): Promise<RegisteredResource> {
    const current = await this.get(id)
    const checked = this.check({ uri: current.uri, name: patch.name ?? current.name, scopes: patch.scopes ?? current.scopes })
    const now = this.deps.clock.now()
    await this.db.transaction().execute(async (trx) => {
      const updated = await trx.updateTable('resources').set({ name: checked.name, scopes: JSON.stringify(checked.scopes), updated_at: now }).where('id', '=', id).executeTakeFirst()
      if (updated.numUpdatedRows === 0n) throw new AppError('NOT_FOUND')
      await recordEvent(trx, this.deps.clock, { type: 'resource.updated', reason: id, context })
    })
    return this.get(id)
  }

  /**
   * Removes the registration: no new token for it from now on. Access tokens already issued for it
   * live out their 15 minutes (they are JWTs the resource checks itself); refreshing them fails.
   */
  async remove(id: string, context: RequestContext = CLI_CONTEXT): Promise<{ id: string; deleted: true }> {
    if (!isUuid(id)) throw new AppError('NOT_FOUND')
    await this.db.transaction().execute(async (trx) => {
      const deleted = await trx.deleteFrom('resources').where('id', '=', id).executeTakeFirst()
      if (deleted.numDeletedRows === 0n) throw new AppError('NOT_FOUND')
      await recordEvent(trx, this.deps.clock, { type: 'resource.removed', reason: id, context })
    })
    return { id, deleted: true }
  }

  /** The URI, name and scopes as stored; VALIDATION_ERROR naming every problem. */
  private check(input: ResourceInput): ResourceInput {
    const problems: ErrorDetail[] = []
    const uri = input.uri.trim()
    const parsed = URL.parse(uri)
    const loopback = parsed !== null && LOOPBACK_HOSTS.has(parsed.hostname)
    if (!parsed || uri.length > URI_MAX) problems.push({ field: 'uri', message: 'must be an absolute URL' })
    else if (parsed.protocol !== 'https:' && !(parsed.protocol === 'http:' && loopback && !this.deps.production)) problems.push({ field: 'uri', message: 'must be https:// (http:// only on a loopback host outside production)' })
    else if (parsed.hash || uri.includes('#')) problems.push({ field: 'uri', message: 'must not have a fragment (RFC 8707)' })
    else if (parsed.username || parsed.password) problems.push({ field: 'uri', message: 'must not carry credentials' })
    else if (uri === this.deps.builtIn) problems.push({ field: 'uri', message: 'is the built-in resource (this service\'s own API)' })
    const name = cleanLabel(input.name, NAME_MAX)
    if (name.problem || !name.value) problems.push({ field: 'name', message: name.problem ?? 'is required' })
    if (input.scopes.length > MAX_RESOURCE_SCOPES) problems.push({ field: 'scopes', message: `must hold at most ${MAX_RESOURCE_SCOPES} scopes` })
    const seen = new Set<string>()
    const scopes: ResourceScope[] = []
    input.scopes.forEach((scope, index) => {
      const description = cleanLabel(scope.description, DESCRIPTION_MAX)
      if (!RESOURCE_SCOPE_PATTERN.test(scope.name)) problems.push({ field: `scopes.${index}.name`, message: `must match ${RESOURCE_SCOPE_PATTERN.source}` })
      else if ((OIDC_SCOPES as readonly string[]).includes(scope.name)) problems.push({ field: `scopes.${index}.name`, message: 'is an OpenID Connect scope' })
      else if (seen.has(scope.name)) problems.push({ field: `scopes.${index}.name`, message: 'is listed twice' })
      if (description.problem || !description.value) problems.push({ field: `scopes.${index}.description`, message: description.problem ?? 'is required (the consent page shows it)' })
      seen.add(scope.name)
      scopes.push({ name: scope.name, description: description.value })
    })
    if (problems.length > 0) throw new AppError('VALIDATION_ERROR', { details: problems })
    return { uri, name: name.value, scopes }
  }
}

function invalid(field: string, message: string): AppError {
  return new AppError('VALIDATION_ERROR', { details: [{ field, message }] })
}

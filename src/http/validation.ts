import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'
import type { FastifyInstance } from 'fastify'
import type { ErrorDetail } from '../errors.ts'

/**
 * Bodies are validated strictly (no type coercion, unknown members refused, not stripped);
 * query strings and path parameters arrive as text and may be coerced to the declared type.
 */
export function installValidation(app: FastifyInstance): void {
  // verbose: a failed union's error carries its data and branch schemas (see withoutUnionNoise).
  const base = { allErrors: true, verbose: true, removeAdditional: false, useDefaults: true, strict: true } as const
  const strictAjv = addFormats.default(new Ajv.default({ ...base, coerceTypes: false }))
  const coercingAjv = addFormats.default(new Ajv.default({ ...base, coerceTypes: 'array' }))
  app.setValidatorCompiler(({ schema, httpPart }) => compiledOnFirstUse(() => (httpPart === 'body' ? strictAjv : coercingAjv).compile(schema)))

  // secure-json-parse refuses __proto__ and constructor.prototype keys outright, so they can
  // never reach an object. An empty body is accepted: clients may send the JSON
  // content type on every request, body or not; routes that need a body then fail validation.
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser(['application/json'])
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '' || (typeof body === 'string' && body.trim() === '')) return done(null, undefined)
    parseJson(request, body as string, done)
  })
  // Anything that is not JSON is refused with 415 by Fastify; no other parser is installed.
  app.removeContentTypeParser(['text/plain'])
}

/**
 * A validator compiled the first time its route is used rather than at start-up: compiling every
 * route's schemas was about a fifth of the time to ready. Fastify reads `errors` off the function
 * after a failed call, so they are passed through.
 */
function compiledOnFirstUse(compile: () => ValidateFunction) {
  let compiled: ValidateFunction | undefined
  const validate = (data: unknown): boolean => {
    compiled ??= compile()
    const valid = compiled(data) as boolean
    validate.errors = compiled.errors
    return valid
  }
  validate.errors = null as ValidateFunction['errors']
  return validate
}

/**
 * Ajv errors as the envelope's details: plain member names at the top, dotted paths below, one
 * detail per real problem. A union (anyOf) fails in every branch, and Ajv reports all of them;
 * `withoutUnionNoise` keeps only what the caller meant (see there).
 */
export function validationDetails(errors: ErrorObject[], part: string | undefined): ErrorDetail[] {
  const details = withoutUnionNoise(errors).map((error) => detailOf(error, part))
  const seen = new Set<string>()
  return details.filter((detail) => {
    const key = `${detail.field}\u0000${detail.message}`
    if (seen.has(key)) return false
    seen.add(key)
    return true
  })
}

function detailOf(error: ErrorObject, part: string | undefined): ErrorDetail {
  const segments = error.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
  let message = error.message ?? 'is not valid'
  if (error.keyword === 'required') {
    segments.push(String(error.params.missingProperty))
    message = 'is required'
  } else if (error.keyword === 'additionalProperties') {
    segments.push(String(error.params.additionalProperty))
    message = 'is not allowed'
  } else if (error.keyword === 'enum') {
    message = `must be one of ${(error.params.allowedValues as unknown[]).join(', ')}`
  } else if (error.keyword === 'const') {
    message = `must be ${String(error.params.allowedValue)}`
  } else if (error.keyword === 'anyOf' && error.params.tag) {
    message = `must be one of ${(error.params.allowed as unknown[]).join(', ')}`
  }
  const field = segments.join('.') || (part === 'body' ? 'body' : (part ?? 'request'))
  return { field, message }
}

/**
 * The errors of a failed anyOf, reduced to the branch the caller chose. Bodies such as the MFA
 * verify are unions tagged by one member (`method`): when the tag names a branch, only that
 * branch's errors are real ("code is required"); when it names none, the one real problem is the
 * tag ("method must be one of totp, recovery_code, passkey") plus whatever every branch refuses
 * alike (a missing `mfa_token`, a body that is not an object). An untagged union (string or null)
 * keeps what every branch refuses alike, or else its own one error. Needs Ajv's `verbose` (the
 * data and the branch schemas on the error). Inner unions are reduced first: Ajv reports them
 * before the union that holds them.
 */
function withoutUnionNoise(errors: ErrorObject[]): ErrorObject[] {
  let remaining = errors
  const reduced = new Set<ErrorObject>()
  for (;;) {
    const union = remaining.find((error) => error.keyword === 'anyOf' && !error.params.tag && !reduced.has(error) && Array.isArray(error.schema))
    if (!union) return remaining
    reduced.add(union)
    const prefix = `${union.schemaPath}/`
    const inside = remaining.filter((error) => error.schemaPath.startsWith(prefix))
    const kept = reducedUnion(union, inside)
    const first = remaining.indexOf(inside[0] ?? union)
    const rest = remaining.filter((error) => error !== union && !inside.includes(error))
    rest.splice(Math.min(first, rest.length), 0, ...kept)
    remaining = rest
  }
}

function reducedUnion(union: ErrorObject, inside: ErrorObject[]): ErrorObject[] {
  const branches = union.schema as Record<string, unknown>[]
  const errorsOf = (index: number) => inside.filter((error) => error.schemaPath.startsWith(`${union.schemaPath}/${index}/`))
  const tagged = unionTag(branches)
  const data = union.data as Record<string, unknown> | undefined
  if (tagged && data !== null && typeof data === 'object' && !Array.isArray(data)) {
    const { tag, values } = tagged
    const chosen = values.findIndex((allowed) => allowed.includes(data[tag]))
    if (chosen >= 0) return errorsOf(chosen)
    const tagError: ErrorObject =
      data[tag] === undefined
        ? { ...union, keyword: 'required', params: { missingProperty: tag }, message: 'is required' }
        : { ...union, instancePath: `${union.instancePath}/${tag}`, params: { tag, allowed: values.flat() } }
    return [tagError, ...sharedByAll(branches.length, errorsOf).filter((error) => !error.instancePath.endsWith(`/${tag}`) && error.params.missingProperty !== tag)]
  }
  const shared = sharedByAll(branches.length, errorsOf)
  if (shared.length > 0) return shared
  // A union of plain types (a string or null): one error naming them all.
  const types = inside.every((error) => error.keyword === 'type' && error.instancePath === union.instancePath) ? inside.map((error) => error.params.type) : []
  return types.length > 0 ? [{ ...union, keyword: 'type', message: `must be ${types.join(' or ')}` }] : [union]
}

/** The errors every branch reports alike (same place, same complaint), once. */
function sharedByAll(count: number, errorsOf: (index: number) => ErrorObject[]): ErrorObject[] {
  const key = (error: ErrorObject) => `${error.instancePath}\u0000${error.keyword}\u0000${JSON.stringify(error.params)}`
  const first = errorsOf(0)
  const others = Array.from({ length: count - 1 }, (_, index) => new Set(errorsOf(index + 1).map(key)))
  return first.filter((error) => others.every((set) => set.has(key(error))))
}

/**
 * The member that tells a union's object branches apart: present in every branch, and a constant
 * (or a union of constants) in each. `values[i]` is what selects branch i.
 */
function unionTag(branches: Record<string, unknown>[]): { tag: string; values: unknown[][] } | undefined {
  const propertiesOf = (branch: Record<string, unknown>) => (branch.properties ?? {}) as Record<string, Record<string, unknown>>
  const [first] = branches
  if (!first) return undefined
  for (const tag of Object.keys(propertiesOf(first))) {
    const values = branches.map((branch) => constantsOf(propertiesOf(branch)[tag]))
    if (values.every((allowed) => allowed.length > 0)) return { tag, values }
  }
  return undefined
}

function constantsOf(schema: Record<string, unknown> | undefined): unknown[] {
  if (!schema) return []
  if ('const' in schema) return [schema.const]
  if (Array.isArray(schema.enum)) return schema.enum
  if (Array.isArray(schema.anyOf)) {
    const nested = (schema.anyOf as Record<string, unknown>[]).map(constantsOf)
    return nested.every((values) => values.length > 0) ? nested.flat() : []
  }
  return []
}

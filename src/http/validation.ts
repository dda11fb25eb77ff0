import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'
import type { FastifyInstance } from 'fastify'
import type { ErrorDetail } from '../errors.ts'

/**
 * Bodies are validated strictly (no type coercion, unknown members refused, not stripped);
 * query strings and path parameters arrive as text and may be coerced to the declared type.
 */
export function installValidation(app: FastifyInstance): void {
  const base = { allErrors: true, removeAdditional: false, useDefaults: true, strict: true } as const
  const strictAjv = addFormats.default(new Ajv.default({ ...base, coerceTypes: false }))
  const coercingAjv = addFormats.default(new Ajv.default({ ...base, coerceTypes: 'array' }))
  app.setValidatorCompiler(({ schema, httpPart }) => compiledOnFirstUse(() => (httpPart === 'body' ? strictAjv : coercingAjv).compile(schema)))

  // secure-json-parse refuses __proto__ and constructor.prototype keys outright, so they can
  // never reach an object. An empty body is accepted: the seed has clients send the JSON
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

/** Ajv errors as the envelope's details: plain member names at the top, dotted paths below. */
export function validationDetails(errors: ErrorObject[], part: string | undefined): ErrorDetail[] {
  return errors.map((error) => {
    const segments = error.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    let message = error.message ?? 'is not valid'
    if (error.keyword === 'required') {
      segments.push(String(error.params.missingProperty))
      message = 'is required'
    } else if (error.keyword === 'additionalProperties') {
      segments.push(String(error.params.additionalProperty))
      message = 'is not allowed'
    }
    const field = segments.join('.') || (part === 'body' ? 'body' : (part ?? 'request'))
    return { field, message }
  })
}

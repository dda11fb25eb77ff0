import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { AuthService, Principal } from '../auth/service.ts'
import { AppError } from '../errors.ts'

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null
  }
}

// RFC 6750 b64token; anything else after "Bearer " is a malformed credential, not a missing one.
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i

function credential(request: FastifyRequest): string | null {
  const header = request.headers.authorization
  if (typeof header !== 'string' || !/^Bearer(\s|$)/i.test(header)) return null
  const match = BEARER.exec(header)
  if (!match) throw new AppError('INVALID_TOKEN')
  return match[1]!
}

/**
 * Installs bearer authentication on one plugin scope: every route registered in that scope is
 * protected, whatever its URL. Runs before the body is read, so anonymous traffic costs little.
 */
export function protect(scope: FastifyInstance, auth: Pick<AuthService, 'authenticate' | 'authenticateFromMemory'>): void {
  scope.decorateRequest('principal', null)
  // Nearly every request is answered from memory, without a promise (issue 46); the rest wait for
  // the service's promise, handed on without an async frame of its own around it. A throw (no or a
  // malformed credential, a revoked session) is caught by Fastify and answered like a rejection.
  scope.addHook('onRequest', (request, _reply, done) => {
    const token = credential(request)
    if (token === null) throw new AppError('AUTH_REQUIRED')
    const known = auth.authenticateFromMemory(token)
    if (known) {
      request.principal = known
      done()
      return
    }
    auth.authenticate(token).then((principal) => {
      request.principal = principal
      done()
    }, done)
  })
}

/** The caller of a route outside the protected scope that also serves signed-in callers. */
export async function bearerPrincipal(request: FastifyRequest, auth: Pick<AuthService, 'authenticate'>): Promise<Principal> {
  const token = credential(request)
  if (token === null) throw new AppError('AUTH_REQUIRED')
  return auth.authenticate(token)
}

export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new AppError('AUTH_REQUIRED')
  return request.principal
}

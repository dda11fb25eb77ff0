import type { FastifyReply, FastifyRequest } from 'fastify'
import { hashingSaturated } from '../auth/passwords.ts'
import type { IpRule, Limits } from '../limits/limits.ts'

/** A route-level onRequest hook counting the client IP against one rule, before the body is read. */
export function limitByIp(limits: Limits, rule: IpRule) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    reply.headers(await limits.perIp(rule, request.ip))
  }
}

/**
 * A route-level onRequest hook for routes that hash a password: when the hashing queue is already
 * full, refuse (src/auth/passwords.ts, hashingSaturated) before the body is parsed, the database
 * touched or a rate-limit counter written (it runs first), so a flood costs little.
 */
export function refuseWhenSaturated(hasher: { saturated(): boolean }) {
  return async () => {
    if (hasher.saturated()) throw hashingSaturated()
  }
}

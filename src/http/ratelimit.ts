import type { FastifyReply, FastifyRequest } from 'fastify'
import type { IpRule, Limits } from '../limits/limits.ts'

/** A route-level onRequest hook counting the client IP against one rule, before the body is read. */
export function limitByIp(limits: Limits, rule: IpRule) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    reply.headers(await limits.perIp(rule, request.ip))
  }
}

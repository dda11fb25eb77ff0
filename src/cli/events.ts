import { AuditLog, eventView } from '../audit/service.ts'
import { loadConfig } from '../config.ts'
import { durationMs } from '../duration.ts'
import { isUuid } from '../text.ts'
import { JSON_HELP, JSON_OPTION, printList, UsageError, type Command } from './command.ts'
import { accountServiceOn, withDatabase } from './database.ts'

const ISO = /^\d{4}-\d{2}-\d{2}T/
/** `events list --limit`: unlike the admin API, the CLI does not page, so it allows more at once. */
const EVENTS_LIMIT = { min: 1, max: 1000, default: 50 } as const

/** The audit trail, as GET /admin/events reads it. */
export const eventCommands: Command[] = [
  {
    name: 'events list',
    args: '[--user WHO] [--type TYPE] [--since T] [--limit N] [--json]',
    summary: 'audit events, newest first, as GET /admin/events (T: an ISO time or 30m, 24h, 7d)',
    help: [
      `--limit N: the N newest (${EVENTS_LIMIT.min} to ${EVENTS_LIMIT.max}, default ${EVENTS_LIMIT.default}); --type: one event type, such as account.disabled.`,
      '--user WHO: an address, or a user id (an id also finds the events of a deleted account).',
      JSON_HELP,
    ],
    options: { user: { type: 'string' }, type: { type: 'string' }, since: { type: 'string' }, limit: { type: 'string' }, ...JSON_OPTION },
    run: (context) => {
      const { user, type, since, limit } = context.values as { user?: string; type?: string; since?: string; limit?: string }
      const usage = context.usage
      let sinceMs: number | undefined
      if (since !== undefined) {
        const ago = durationMs(since)
        sinceMs = ago !== null ? context.clock.now() - ago : ISO.test(since) ? Date.parse(since) : Number.NaN
        if (Number.isNaN(sinceMs)) throw new UsageError('--since takes an ISO time (2026-11-01T00:00:00Z) or a duration (30m, 24h, 7d)', usage)
      }
      const count = limit === undefined ? EVENTS_LIMIT.default : /^\d+$/.test(limit) ? Number(limit) : Number.NaN
      if (!(count >= EVENTS_LIMIT.min && count <= EVENTS_LIMIT.max)) throw new UsageError(`--limit takes a whole number from ${EVENTS_LIMIT.min} to ${EVENTS_LIMIT.max}`, usage)
      const byAddress = user?.includes('@') ?? false
      if (user !== undefined && !byAddress && !isUuid(user)) throw new UsageError('--user takes an e-mail address or a user id', usage)
      return withDatabase(loadConfig(context.env), context.io, async (db) => {
        // An address must name an account; an id is taken as it is, since a deleted account's events stay.
        const userId = byAddress ? (await (await accountServiceOn(db, context.clock)).find(user!)).id : user
        const events = await new AuditLog(db).newestFirst({ userId, type, since: sinceMs }, null, count)
        printList(context, events.map(eventView), ['at', 'type', 'reason', 'user_id', 'actor', 'ip', 'request_id', 'user_agent'])
        return 0
      })
    },
  },
]

import { randomBytes } from 'node:crypto'
import { loadConfig } from '../config.ts'
import { CursorCodec } from '../cursor.ts'
import { secrets } from '../db/repositories.ts'
import { Metrics } from '../http/metrics.ts'
import { WEBHOOK_EVENTS } from '../webhooks/events.ts'
import { WebhookService } from '../webhooks/service.ts'
import { json, JSON_HELP, JSON_OPTION, printList, UsageError, type Command, type Context } from './command.ts'
import { sealerFor, withDatabase } from './database.ts'

/** The webhook endpoints on the server's database, sealing secrets under the server's key. */
function webhookService(context: Context, run: (webhooks: WebhookService) => Promise<number>): Promise<number> {
  const config = loadConfig(context.env)
  return withDatabase(config, context.io, async (db) => {
    const sealer = await sealerFor(config, db, context.io)
    const cursors = new CursorCodec(await secrets.getOrCreate(db.kysely, 'cursor_hmac', randomBytes(32).toString('base64url'), context.clock.now()))
    const logger = { info() {}, warn() {}, error() {} }
    return run(new WebhookService({ db, clock: context.clock, sealer, logger, metrics: new Metrics(), cursors, production: config.production }))
  })
}

/** The webhook endpoints and their deliveries. */
export const webhookCommands: Command[] = [
  {
    name: 'webhooks add',
    args: 'URL --events E[,E] [--description D]',
    summary: 'register a webhook endpoint and print it as JSON with its signing secret (once)',
    help: [`Events: ${WEBHOOK_EVENTS.join(', ')}, or * for all.`, 'The secret (whsec_...) is shown here and never again: only a sealed copy is stored.'],
    positionals: 1,
    options: { events: { type: 'string' }, description: { type: 'string' } },
    run: (context) => {
      const { events, description } = context.values as { events?: string; description?: string }
      if (!events) throw new UsageError('webhooks add needs --events (a comma-separated list, or *)', context.usage)
      return webhookService(context, async (webhooks) => {
        const created = await webhooks.create({ url: context.positionals[0]!, events: events.split(',').map((event) => event.trim()).filter(Boolean), description: description ?? null })
        context.io.out(json(created))
        context.io.err(`portcullis: webhook ${created.webhook.id}: this is the only time its secret is shown`)
        return 0
      })
    },
  },
  {
    name: 'webhooks list',
    args: '[--json]',
    summary: 'list the webhook endpoints: id, url, events, enabled, disabled_reason (oldest first)',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      webhookService(context, async (webhooks) => {
        printList(context, await webhooks.list(), ['id', 'url', 'events', 'enabled', 'disabled_reason'])
        return 0
      }),
  },
  {
    name: 'webhooks remove',
    args: 'ID',
    summary: 'remove a webhook endpoint with its deliveries',
    positionals: 1,
    run: (context) =>
      webhookService(context, async (webhooks) => {
        await webhooks.remove(context.positionals[0]!)
        context.io.out(`webhook ${context.positionals[0]}: removed, with its deliveries`)
        return 0
      }),
  },
  {
    name: 'webhooks rotate-secret',
    args: 'ID',
    summary: 'give an endpoint a new signing secret and print it once; the previous one also signs for 24 hours',
    positionals: 1,
    run: (context) =>
      webhookService(context, async (webhooks) => {
        const rotated = await webhooks.rotateSecret(context.positionals[0]!)
        context.io.out(json(rotated))
        context.io.err(`portcullis: webhook ${rotated.webhook.id}: this is the only time the new secret is shown; the previous one signs beside it for 24 hours`)
        return 0
      }),
  },
  {
    name: 'webhooks deliveries',
    args: 'ID [--limit N] [--json]',
    summary: 'an endpoint\'s deliveries, newest first: id, webhook_id, type, attempts, last_status, delivered_at, failed_at',
    help: ['--limit takes 1 to 100 (default 20).', JSON_HELP],
    positionals: 1,
    options: { ...JSON_OPTION, limit: { type: 'string' } },
    run: (context) => {
      const { limit } = context.values as { limit?: string }
      const count = limit === undefined ? 20 : Number(limit)
      if (!Number.isInteger(count) || count < 1 || count > 100) throw new UsageError('--limit takes a whole number from 1 to 100', context.usage)
      return webhookService(context, async (webhooks) => {
        const { deliveries } = await webhooks.deliveries(context.positionals[0]!, { limit: count })
        printList(context, deliveries, ['id', 'webhook_id', 'type', 'attempts', 'last_status', 'delivered_at', 'failed_at'])
        return 0
      })
    },
  },
]

import { ApiKeyService, SCOPES, type Scope } from '../admin/api-keys.ts'
import { sealedSecret } from '../auth/keys.ts'
import { loadConfig, type Config } from '../config.ts'
import type { Db } from '../db/index.ts'
import { durationMs } from '../duration.ts'
import { iso, JSON_HELP, JSON_OPTION, printList, UsageError, type Command, type Context } from './command.ts'
import { sealerFor, withDatabase } from './database.ts'

/** The API key service, its HMAC secret sealed under the server's key. */
async function apiKeysOf(config: Config, db: Db, context: Context): Promise<ApiKeyService> {
  const sealer = await sealerFor(config, db, context.io)
  return new ApiKeyService(db, context.clock, await sealedSecret(db, sealer, 'api_key_hmac', context.clock.now()))
}

/** The API keys of the admin API. */
export const apiKeyCommands: Command[] = [
  {
    name: 'api-keys create',
    args: '--name NAME --scopes S[,S] [--expires 90d]',
    summary: `make an API key for the admin API and print it once (scopes: ${SCOPES.join(', ')})`,
    help: ['The key is shown once and never again: only a hash of it is stored.', '--expires takes a duration (30m, 24h, 90d); without it the key lasts until revoked.'],
    options: { name: { type: 'string' }, scopes: { type: 'string' }, expires: { type: 'string' } },
    run: (context) => {
      const { name, scopes, expires } = context.values as { name?: string; scopes?: string; expires?: string }
      const usage = context.usage
      if (name === undefined) throw new UsageError('--name is required', usage)
      if (scopes === undefined) throw new UsageError('--scopes is required', usage)
      const list = scopes.split(',').map((scope) => scope.trim()).filter(Boolean)
      const unknown = list.find((scope) => !SCOPES.includes(scope as Scope))
      if (unknown !== undefined || list.length === 0) throw new UsageError(`--scopes takes one or more of ${SCOPES.join(', ')}${unknown ? ` (not ${unknown})` : ''}`, usage)
      const lifetime = expires === undefined ? null : durationMs(expires)
      if (expires !== undefined && (lifetime === null || lifetime === 0)) throw new UsageError('--expires takes a duration such as 30m, 24h or 90d', usage)
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const service = await apiKeysOf(config, db, context)
        const { key, summary } = await service.create({ name, scopes: list as Scope[], expiresAt: lifetime === null ? null : context.clock.now() + lifetime })
        context.io.out(key)
        context.io.err(`portcullis: API key ${summary.id} (${summary.name}: ${summary.scopes.join(',')}, expires ${iso(summary.expires_at) ?? 'never'}); this is the only time the key is shown`)
        return 0
      })
    },
  },
  {
    name: 'api-keys list',
    args: '[--json]',
    summary: 'list API keys: id, name, scopes, state, created, last used, expires',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) => {
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const now = context.clock.now()
        const views = (await (await apiKeysOf(config, db, context)).list()).map((key) => ({
          id: key.id,
          name: key.name,
          scopes: key.scopes,
          state: key.revoked_at !== null ? 'revoked' : key.expires_at !== null && key.expires_at <= now ? 'expired' : 'active',
          created_at: iso(key.created_at),
          last_used_at: iso(key.last_used_at),
          expires_at: iso(key.expires_at),
          revoked_at: iso(key.revoked_at),
        }))
        printList(context, views, ['id', 'name', 'scopes', 'state', 'created_at', 'last_used_at', 'expires_at'])
        return 0
      })
    },
  },
  {
    name: 'api-keys revoke',
    args: 'ID',
    summary: 'end an API key at once (every instance within the revocation bound)',
    positionals: 1,
    run: (context) => {
      const config = loadConfig(context.env)
      const id = context.positionals[0]!
      return withDatabase(config, context.io, async (db) => {
        if (!(await (await apiKeysOf(config, db, context)).revoke(id))) {
          context.io.err(`portcullis: no live API key with the id ${id}`)
          return 1
        }
        context.io.out(`API key ${id}: revoked`)
        return 0
      })
    },
  },
]

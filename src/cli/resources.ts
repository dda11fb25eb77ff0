import { loadConfig } from '../config.ts'
import { ResourceRegistry } from '../provider/resources.ts'
import { JSON_HELP, JSON_OPTION, printList, UsageError, type Command, type Context } from './command.ts'
import { withDatabase } from './database.ts'

/** The registered resources on the server's database (src/provider/resources.ts). */
function resourceRegistry(context: Context, run: (resources: ResourceRegistry) => Promise<number>): Promise<number> {
  const config = loadConfig(context.env)
  return withDatabase(config, context.io, (db) => run(new ResourceRegistry({ db, clock: context.clock, builtIn: config.audience, production: config.production })))
}

/** The APIs and MCP servers tokens may be asked for (RFC 8707 resource indicators). */
export const resourceCommands: Command[] = [
  {
    name: 'resources add',
    args: 'URI --name NAME [--scope NAME=DESCRIPTION ...]',
    summary: 'register an API or MCP server as a resource: tokens asked for with resource=URI have it as audience and only its scopes',
    help: ['--scope is repeatable: the scope\'s name, =, and what it lets an app do (the consent page shows it).'],
    options: { name: { type: 'string' }, scope: { type: 'string', multiple: true } },
    positionals: 1,
    run: (context) => {
      const name = context.values.name
      if (typeof name !== 'string') throw new UsageError('--name is required', context.usage)
      const scopes = (Array.isArray(context.values.scope) ? context.values.scope : []).map((item) => {
        const at = item.indexOf('=')
        if (at <= 0) throw new UsageError(`--scope ${item}: give NAME=DESCRIPTION`, context.usage)
        return { name: item.slice(0, at), description: item.slice(at + 1) }
      })
      return resourceRegistry(context, async (resources) => {
        const resource = await resources.create({ uri: context.positionals[0]!, name, scopes })
        context.io.out(`resource ${resource.id}: ${resource.uri} (${resource.scopes.map((scope) => scope.name).join(' ') || 'no scopes'})`)
        return 0
      })
    },
  },
  {
    name: 'resources list',
    args: '[--json]',
    summary: 'list the registered resources: id, URI, name, scopes',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      resourceRegistry(context, async (resources) => {
        const list = (await resources.list()).map((resource) => ({ ...resource, scopes: context.values.json ? resource.scopes : resource.scopes.map((scope) => scope.name).join(' ') }))
        printList(context, list, ['id', 'uri', 'name', 'scopes'])
        return 0
      }),
  },
  {
    name: 'resources remove',
    args: 'ID',
    summary: 'remove a registered resource: no new token for it (those issued live out their 15 minutes)',
    positionals: 1,
    run: (context) =>
      resourceRegistry(context, async (resources) => {
        context.io.out(`resource ${(await resources.remove(context.positionals[0]!)).id}: removed`)
        return 0
      }),
  },
]

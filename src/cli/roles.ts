import { CLI_CONTEXT } from '../audit/events.ts'
import { json, JSON_HELP, JSON_OPTION, listOption, printList, UsageError, type Command } from './command.ts'
import { rolesService } from './database.ts'

/** The roles catalogue (a user's roles are `users roles`). */
export const roleCommands: Command[] = [
  {
    name: 'roles list',
    args: '[--json]',
    summary: 'list the roles catalogue: name, builtin, permissions, description',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      rolesService(context, async (roles) => {
        printList(context, await roles.list(), ['name', 'builtin', 'permissions', 'description'])
        return 0
      }),
  },
  {
    name: 'roles show',
    args: 'NAME',
    summary: 'print a role as JSON',
    positionals: 1,
    run: (context) =>
      rolesService(context, async (roles) => {
        context.io.out(json({ role: await roles.get(context.positionals[0]!) }))
        return 0
      }),
  },
  {
    name: 'roles add',
    args: 'NAME --permissions P[,P] [--description D]',
    summary: 'add a role to the catalogue and print it as JSON (as POST /admin/roles)',
    help: ['Permissions are resource:action (watchlists:read, reports:*); --permissions may be repeated; --permissions "" makes a role with none.'],
    options: { permissions: { type: 'string', multiple: true }, description: { type: 'string' } },
    positionals: 1,
    run: (context) => {
      if (context.values.permissions === undefined) throw new UsageError('--permissions is required (a comma-separated list; "" for none)', context.usage)
      const { description } = context.values as { description?: string }
      return rolesService(context, async (roles) => {
        context.io.out(json({ role: await roles.create({ name: context.positionals[0]!, description, permissions: listOption(context.values.permissions) }, CLI_CONTEXT) }))
        return 0
      })
    },
  },
  {
    name: 'roles remove',
    args: 'NAME [--force]',
    summary: 'remove a role (never a built-in one); --force takes it from every user and membership holding it first',
    options: { force: { type: 'boolean' } },
    positionals: 1,
    run: (context) =>
      rolesService(context, async (roles) => {
        const removed = await roles.remove(context.positionals[0]!, context.values.force === true, CLI_CONTEXT)
        const from = removed.users + removed.memberships > 0 ? `, taken from ${removed.users} user(s) and ${removed.memberships} membership(s)` : ''
        context.io.out(`role ${removed.name}: removed${from}`)
        return 0
      }),
  },
]

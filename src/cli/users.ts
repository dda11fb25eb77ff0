import { AccountService, DISABLE_REASONS, type DisableReason } from '../accounts/service.ts'
import { CLI_CONTEXT } from '../audit/events.ts'
import { loadConfig } from '../config.ts'
import type { Db } from '../db/index.ts'
import { resetSecondFactors } from '../mfa/service.ts'
import { JSON_HELP, JSON_OPTION, listOption, printList, UsageError, type Command, type Context } from './command.ts'
import { accountServiceOn, rolesService, sealerFor, withDatabase } from './database.ts'
import { importCommand } from './import.ts'

/** The database the server uses, with the account operations on it. */
function accounts(context: Context, run: (service: AccountService) => Promise<number>): Promise<number> {
  return withDatabase(loadConfig(context.env), context.io, async (db) => run(await accountServiceOn(db, context.clock)))
}

/** Accounts: their state, second factors and roles, and accounts imported from elsewhere. */
export const userCommands: Command[] = [
  {
    name: 'users list',
    args: '[--json]',
    summary: 'list accounts: address, state, disabled reason, id, created',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      accounts(context, async (service) => {
        printList(context, await service.list(), ['email', 'state', 'disabled_reason', 'user_id', 'created_at'])
        return 0
      }),
  },
  {
    name: 'users verify',
    args: 'EMAIL',
    summary: 'mark an address verified',
    positionals: 1,
    run: (context) =>
      accounts(context, async (service) => {
        const user = await service.verify(context.positionals[0]!)
        context.io.out(`${user.email}: verified (${user.state})`)
        return 0
      }),
  },
  {
    name: 'users disable',
    args: 'EMAIL [--reason suspended|banned]',
    summary: 'disable an account (reason: suspended, the default, or banned)',
    options: { reason: { type: 'string', default: 'suspended' } },
    positionals: 1,
    run: (context) => {
      const reason = context.values.reason as string
      if (!DISABLE_REASONS.includes(reason as DisableReason)) throw new UsageError(`--reason must be one of ${DISABLE_REASONS.join(', ')}`, context.usage)
      return accounts(context, async (service) => {
        context.io.out(`${(await service.disable(context.positionals[0]!, reason as DisableReason)).email}: disabled (${reason})`)
        return 0
      })
    },
  },
  {
    name: 'users enable',
    args: 'EMAIL',
    summary: 're-enable a disabled account',
    positionals: 1,
    run: (context) =>
      accounts(context, async (service) => {
        const user = await service.enable(context.positionals[0]!)
        context.io.out(`${user.email}: ${user.state}`)
        return 0
      }),
  },
  {
    name: 'users mfa-reset',
    args: 'EMAIL',
    summary: 'remove every second factor and recovery code of an account and revoke its sessions (the user is mailed)',
    positionals: 1,
    run: (context) => {
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const sealer = await sealerFor(config, db, context.io)
        const service = await accountServiceOn(db, context.clock)
        const reset = (trx: Db['kysely'], user: { id: string; email: string }) => resetSecondFactors(trx, user, { sealer, brand: { appName: config.appName }, now: context.clock.now() })
        const done = await service.resetMfa(context.positionals[0]!, reset)
        context.io.out(`${done.email}: ${done.factors} second factor(s) removed, ${done.revoked} session(s) revoked`)
        return 0
      })
    },
  },
  importCommand,
  {
    name: 'users delete',
    args: 'EMAIL',
    summary: 'delete an account and everything stored for it (its audit events stay, without the address)',
    positionals: 1,
    run: (context) =>
      accounts(context, async (service) => {
        const { user_id, email } = await service.remove(context.positionals[0]!)
        context.io.out(`${email}: deleted (user id ${user_id}); the address may register again`)
        return 0
      }),
  },
  {
    name: 'users roles',
    args: 'EMAIL [--add ROLE] [--remove ROLE]',
    summary: "show a user's global roles, or change them (as PUT /admin/users/{id}/roles)",
    help: ['--add and --remove may be repeated, or take a comma-separated list; without either the roles are shown.', 'The user\'s older access tokens stop working on every instance within the revocation bound.'],
    options: { add: { type: 'string', multiple: true }, remove: { type: 'string', multiple: true } },
    positionals: 1,
    run: (context) => {
      const add = listOption(context.values.add)
      const remove = listOption(context.values.remove)
      return rolesService(context, async (roles, db) => {
        const user = await (await accountServiceOn(db, context.clock)).find(context.positionals[0]!)
        const now = add.length === 0 && remove.length === 0
          ? await roles.rolesOf(user.id)
          : await roles.setUserRoles(user.id, (current) => [...current, ...add].filter((role) => !remove.includes(role)), CLI_CONTEXT)
        context.io.out(`${user.email}: ${now.length === 0 ? 'no roles' : `roles ${now.join(', ')}`}`)
        return 0
      })
    },
  },
]

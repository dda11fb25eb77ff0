import { parseArgs } from 'node:util'
import { UnknownUserError } from '../accounts/service.ts'
import { ApiKeyError } from '../admin/api-keys.ts'
import { KeyEncryptionError } from '../auth/key-encryption.ts'
import { systemClock, type Clock } from '../clock.ts'
import { ConfigError } from '../config.ts'
import { AppError } from '../errors.ts'
import { apiKeyCommands } from './api-keys.ts'
import { clientCommands } from './clients.ts'
import { stdio, usageOf, UsageError, type CliIo, type Command, type Context } from './command.ts'
import { eventCommands } from './events.ts'
import { keyCommands } from './keys.ts'
import { resourceCommands } from './resources.ts'
import { roleCommands } from './roles.ts'
import { serverCommands } from './server.ts'
import { userCommands } from './users.ts'
import { webhookCommands } from './webhooks.ts'

export type { CliIo } from './command.ts'

/**
 * Every command, in the order the overview lists them. `clients rotate-secret` stays after the
 * resources commands, where it has always been listed, so the overview reads as before.
 */
const commands: Command[] = [
  ...serverCommands,
  ...userCommands,
  ...eventCommands,
  ...keyCommands,
  ...apiKeyCommands,
  ...clientCommands.filter((c) => c.name !== 'clients rotate-secret'),
  ...resourceCommands,
  ...clientCommands.filter((c) => c.name === 'clients rotate-secret'),
  ...roleCommands,
  ...webhookCommands,
]

function overview(group?: string): string {
  const shown = commands.filter((c) => group === undefined || c.name.split(' ')[0] === group)
  const width = Math.max(...shown.map((c) => `${c.name}${c.args ? ` ${c.args}` : ''}`.length))
  const lines = shown.map((c) => `  ${`${c.name}${c.args ? ` ${c.args}` : ''}`.padEnd(width)}  ${c.summary}`)
  const notes = group
    ? []
    : [
        '',
        'Every command but migrate and serve needs an existing database: DATABASE_URL, or else',
        'DATA_DIR/portcullis.db (DATA_DIR defaults to ./data). The one used is named on stderr.',
        'The list commands print a table with a header row, or with --json a JSON array.',
      ]
  return [`usage: portcullis ${group ?? '<command>'}${group ? ' <action>' : ''} [--help]`, ...lines, ...notes].join('\n')
}

const isHelp = (arg: string | undefined) => arg === '--help' || arg === '-h' || arg === 'help'

/**
 * The `portcullis` command. Returns the exit status (0 done, 1 failed, 2 usage) instead of
 * exiting, so it is testable in-process; only the entry point (src/cli.ts) touches process.
 * Options are parsed by Node's util.parseArgs (strict: an unknown option is a usage error).
 */
export async function runCli(
  argv: string[],
  env: Record<string, string | undefined> = process.env,
  io: CliIo = stdio,
  clock: Clock = systemClock,
): Promise<number> {
  const [first, second] = argv
  try {
    if (first === undefined) throw new UsageError('a command is required', overview())
    if (isHelp(first)) {
      io.out(overview())
      return 0
    }
    const command = commands.find((c) => c.name === first) ?? commands.find((c) => c.name === `${first} ${second}`)
    if (!command) {
      const group = commands.some((c) => c.name.startsWith(`${first} `)) ? first : undefined
      if (group && (second === undefined || isHelp(second))) {
        if (second !== undefined) {
          io.out(overview(group))
          return 0
        }
        throw new UsageError(`${group} needs an action`, overview(group))
      }
      throw new UsageError(`unknown command: ${[first, group ? second : undefined].filter(Boolean).join(' ')}`, overview(group))
    }
    const rest = argv.slice(command.name.split(' ').length)
    if (rest.some(isHelp)) {
      io.out(usageOf(command))
      return 0
    }
    let parsed: { values: Context['values']; positionals: string[] }
    try {
      parsed = parseArgs({ args: rest, options: command.options ?? {}, allowPositionals: true, strict: true }) as typeof parsed
    } catch (error) {
      throw new UsageError((error as Error).message.split('\n')[0]!.replace(/\. To specify a positional.*$/, ''), usageOf(command))
    }
    const expected = command.positionals ?? 0
    if (parsed.positionals.length !== expected) {
      throw new UsageError(expected === 0 ? `${command.name} takes no arguments` : `${command.name} takes ${command.args?.split(' ')[0]}`, usageOf(command))
    }
    return await command.run({ env, io, clock, values: parsed.values, positionals: parsed.positionals, usage: usageOf(command) })
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`portcullis: ${error.message}`)
      io.err(error.usage)
      return 2
    }
    if (error instanceof UnknownUserError || error instanceof ConfigError || error instanceof KeyEncryptionError || error instanceof ApiKeyError) {
      io.err(`portcullis: ${error.message}`)
      return 1
    }
    // The services' refusals, as the API would give them, still on one line.
    if (error instanceof AppError) {
      const details = (error.details ?? []).map((detail) => `${detail.field} ${detail.message}`)
      io.err(`portcullis: ${details.length === 0 ? error.message : `${error.message.replace(/\.$/, '')}: ${details.join('; ')}`}`)
      return 1
    }
    io.err(`portcullis: ${(error as Error).message.split('\n')[0]}`)
    return 1
  }
}

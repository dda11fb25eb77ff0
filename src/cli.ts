import { AccountService, DISABLE_REASONS, UnknownUserError, type DisableReason } from './accounts/service.ts'
import { KeyEncryptionError, KeySealer, resolveKek } from './auth/key-encryption.ts'
import { describeKeys, rewrapStoredKeys, rotateSigningKey, sealStoredKeys } from './auth/keys.ts'
import { REFRESH_TTL_SECONDS } from './auth/tokens.ts'
import { systemClock, type Clock } from './clock.ts'
import { ConfigError, loadConfig } from './config.ts'
import { migrate, openDatabase, type Db } from './db/index.ts'
import { signingKeys } from './db/repositories.ts'

const USAGE = `usage: portcullis <command>
  serve                                   run the HTTP service
  migrate                                 apply pending database migrations
  users list                              list accounts
  users verify EMAIL                      mark an address verified
  users disable EMAIL [--reason R]        disable an account (R: suspended (default) or banned)
  users enable EMAIL                      re-enable a disabled account
  events list [--user EMAIL] [--since T]  audit events, oldest first (T: ISO time or 30m, 24h, 7d)
  keys list                               list signing keys and their state
  keys rotate                             add a new signing key (old ones keep verifying)`

class UsageError extends Error {}

export interface CliIo {
  out(line: string): void
  err(line: string): void
}

const stdio: CliIo = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
}

function parseReason(args: string[]): { email: string; reason: DisableReason } {
  const rest = [...args]
  let reason: DisableReason = 'suspended'
  const flag = rest.findIndex((arg) => arg === '--reason' || arg.startsWith('--reason='))
  if (flag >= 0) {
    const value = rest[flag]!.includes('=') ? rest[flag]!.split('=')[1] : rest[flag + 1]
    rest.splice(flag, rest[flag]!.includes('=') ? 1 : 2)
    if (!DISABLE_REASONS.includes(value as DisableReason)) throw new UsageError(`--reason must be one of ${DISABLE_REASONS.join(', ')}`)
    reason = value as DisableReason
  }
  if (rest.length !== 1 || rest[0]!.startsWith('--')) throw new UsageError('users disable takes one EMAIL')
  return { email: rest[0]!, reason }
}

/** `--name value` or `--name=value` options, and what is left. */
function options(args: string[], names: string[]): { values: Record<string, string>; rest: string[] } {
  const values: Record<string, string> = {}
  const rest: string[] = []
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    const name = names.find((n) => arg === `--${n}` || arg.startsWith(`--${n}=`))
    if (!name) {
      rest.push(arg)
      continue
    }
    const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : args[++i]
    if (value === undefined || value === '') throw new UsageError(`--${name} needs a value`)
    values[name] = value
  }
  return { values, rest }
}

const DURATION = /^(\d+)([mhd])$/

function parseSince(value: string, now: number): number {
  const duration = DURATION.exec(value)
  if (duration) return now - Number(duration[1]) * { m: 60_000, h: 3600_000, d: 86_400_000 }[duration[2] as 'm' | 'h' | 'd']
  const time = Date.parse(value)
  if (Number.isNaN(time)) throw new UsageError('--since takes an ISO time (2026-11-01T00:00:00Z) or a duration (30m, 24h, 7d)')
  return time
}

function oneEmail(args: string[], command: string): string {
  if (args.length !== 1 || args[0]!.startsWith('--')) throw new UsageError(`${command} takes one EMAIL`)
  return args[0]!
}

async function withDatabase<T>(env: Record<string, string | undefined>, run: (db: Db) => Promise<T>): Promise<T> {
  const config = loadConfig(env)
  const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir })
  try {
    await migrate(db)
    return await run(db)
  } finally {
    await db.close()
  }
}

/**
 * The `portcullis` command. Returns the exit status (0 done, 1 failed, 2 usage) instead of
 * exiting, so it is testable in-process; only the entry point at the bottom touches process.
 */
export async function runCli(
  argv: string[],
  env: Record<string, string | undefined> = process.env,
  io: CliIo = stdio,
  clock: Clock = systemClock,
): Promise<number> {
  const [group, action, ...args] = argv
  try {
    switch (`${group ?? ''} ${action ?? ''}`.trim()) {
      case 'serve': {
        const { serve } = await import('./server.ts')
        await serve(loadConfig(env))
        return 0
      }
      case 'migrate': {
        const config = loadConfig(env)
        const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir })
        const applied = await migrate(db).finally(() => db.close())
        io.out(applied.length === 0 ? 'database is up to date' : `applied: ${applied.join(', ')}`)
        return 0
      }
      case 'users list':
        if (args.length > 0) throw new UsageError('users list takes no arguments')
        return await withDatabase(env, async (db) => {
          for (const user of await new AccountService(db, clock).list()) {
            io.out([user.email, user.state + (user.disabled_reason ? `(${user.disabled_reason})` : ''), user.user_id, user.created_at].join('\t'))
          }
          return 0
        })
      case 'users verify':
      case 'users enable': {
        const email = oneEmail(args, `users ${action}`)
        return await withDatabase(env, async (db) => {
          const accounts = new AccountService(db, clock)
          const user = action === 'verify' ? await accounts.verify(email) : await accounts.enable(email)
          io.out(`${user.email}: ${user.state}`)
          return 0
        })
      }
      case 'users disable': {
        const { email, reason } = parseReason(args)
        return await withDatabase(env, async (db) => {
          const user = await new AccountService(db, clock).disable(email, reason)
          io.out(`${user.email}: disabled (${reason})`)
          return 0
        })
      }
      case 'events list': {
        const { values, rest } = options(args, ['user', 'since'])
        if (rest.length > 0) throw new UsageError(`events list does not take ${rest[0]}`)
        const since = values.since === undefined ? undefined : parseSince(values.since, clock.now())
        return await withDatabase(env, async (db) => {
          const events = await new AccountService(db, clock).events({ email: values.user, since })
          for (const event of events) {
            io.out([new Date(event.at).toISOString(), event.type, event.reason ?? '-', event.user_id ?? '-', event.ip ?? '-', event.request_id ?? '-', event.user_agent ?? '-'].join('\t'))
          }
          return 0
        })
      }
      case 'keys list':
        return await withDatabase(env, async (db) => {
          const keys = describeKeys(await signingKeys.list(db.kysely), clock.now(), REFRESH_TTL_SECONDS)
          if (keys.length === 0) io.out('no signing keys yet (the service creates one on first start)')
          for (const key of keys) {
            const retires = key.retiresAt ? new Date(key.retiresAt).toISOString() : '-'
            io.out([key.kid, key.alg, key.state, new Date(key.createdAt).toISOString(), `retires ${retires}`].join('\t'))
          }
          return 0
        })
      case 'keys rotate':
        return await withDatabase(env, async (db) => {
          const config = loadConfig(env)
          const sealer = new KeySealer(resolveKek(config.keyEncryptionKey, config.dataDir, (message) => io.err(`portcullis: ${message}`)))
          await sealStoredKeys(db, sealer)
          const kid = await rotateSigningKey(db, sealer, clock.now())
          io.out(`new signing key ${kid}; running instances sign with it within a minute, old keys keep verifying`)
          return 0
        })
      case 'keys rewrap': {
        const config = loadConfig(env)
        if (!config.oldKeyEncryptionKey || !config.keyEncryptionKey) {
          throw new UsageError('keys rewrap needs OLD_KEY_ENCRYPTION_KEY (the key in use) and KEY_ENCRYPTION_KEY (the new one)')
        }
        const from = new KeySealer(config.oldKeyEncryptionKey)
        const to = new KeySealer(config.keyEncryptionKey)
        return await withDatabase(env, async (db) => {
          const count = await rewrapStoredKeys(db, from, to)
          io.out(`re-encrypted ${count} stored key(s) under the new KEY_ENCRYPTION_KEY; restart every instance with it`)
          return 0
        })
      }
      default:
        throw new UsageError(group === undefined ? 'a command is required' : `unknown command: ${[group, action].filter(Boolean).join(' ')}`)
    }
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`portcullis: ${error.message}`)
      io.err(USAGE)
      return 2
    }
    if (error instanceof UnknownUserError || error instanceof ConfigError || error instanceof KeyEncryptionError) {
      io.err(`portcullis: ${error.message}`)
      return 1
    }
    io.err(`portcullis: ${(error as Error).message.split('\n')[0]}`)
    return 1
  }
}

const isEntry = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))
if (isEntry) process.exitCode = await runCli(process.argv.slice(2))

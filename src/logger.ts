import type { Writable } from 'node:stream'
import type { FastifyBaseLogger } from 'fastify'
import pino, { type DestinationStream } from 'pino'

/** The slice of pino the services use; Fastify's logger satisfies it, tests may pass a silent one. */
export interface Logger {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

/**
 * Paths pino blanks out in every log line: credentials in headers and any password or token that
 * could ride along in a logged object.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'res.headers["set-cookie"]',
  '*.password',
  '*.current_password',
  '*.new_password',
  '*.token',
  '*.access_token',
  '*.refresh_token',
  '*.private_jwk',
  '*.password_hash',
]

/**
 * pino's serializer for `err`, replacing its standard one, which writes the stack: here every
 * error in the log is its type, code and message, never a stack trace (the project's rule), and
 * that holds for Fastify's own lines as much as for ours.
 */
export function serializeError(error: unknown): unknown {
  if (typeof error !== 'object' || error === null) return error
  const { type, name, code, message } = error as { type?: unknown; name?: unknown; code?: unknown; message?: unknown }
  return { type: type ?? name ?? error.constructor?.name, code, message }
}

/** Standard output, as pino writes it when given no stream (asynchronously, flushed at exit). */
export function logDestination(): DestinationStream {
  return pino.destination(1)
}

/**
 * The logger of the line each request writes when it ends: its id, method, path without the
 * query, status and time, all plain values the service fills in itself, so there is nothing in it
 * for the redaction paths to find. Run through them anyway, the wildcard paths (`*.password`...)
 * cost about 10 us a line, most of what the line cost (the microbenchmark bench/log-line.ts, retired
 * with the bench's other one-off probes: `git show 4d3a11a:bench/log-line.ts`; 14 against 4);
 * every other line still goes through them. Same level, same stream as the main logger.
 */
export function requestLineLogger(level: string, stream: DestinationStream | Writable): pino.Logger {
  return pino({ level }, stream)
}

type Bindings = Parameters<FastifyBaseLogger['child']>[0]
type ChildLoggerOptions = NonNullable<Parameters<FastifyBaseLogger['child']>[1]>
type LogArgs = Parameters<FastifyBaseLogger['info']>
type PinoLogger = FastifyBaseLogger & { isLevelEnabled(level: string): boolean }

/**
 * Fastify's per-request logger, made on the first line the request writes. Fastify makes a pino
 * child per request to bind its id; with the redaction paths above that costs about 3.6 us (pino
 * runs its redaction over the bindings), on every request, and almost no request writes a line
 * through it (the request line has a logger of its own, requestLineLogger). The lines are the
 * same: the child is pino's own, made with the same bindings, when first needed. Route-level logger options (none today) get
 * their child at once.
 */
class LazyRequestLogger {
  private made: PinoLogger | undefined

  constructor(
    private readonly parent: PinoLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  private real(): PinoLogger {
    return (this.made ??= this.parent.child(this.bindings, this.options) as PinoLogger)
  }

  get level(): string {
    return (this.made ?? this.parent).level
  }

  set level(level: string) {
    this.real().level = level
  }

  isLevelEnabled(level: string): boolean {
    return (this.made ?? this.parent).isLevelEnabled(level)
  }

  fatal(...args: LogArgs): void {
    if (this.isLevelEnabled('fatal')) this.real().fatal(...args)
  }

  error(...args: LogArgs): void {
    if (this.isLevelEnabled('error')) this.real().error(...args)
  }

  warn(...args: LogArgs): void {
    if (this.isLevelEnabled('warn')) this.real().warn(...args)
  }

  info(...args: LogArgs): void {
    if (this.isLevelEnabled('info')) this.real().info(...args)
  }

  debug(...args: LogArgs): void {
    if (this.isLevelEnabled('debug')) this.real().debug(...args)
  }

  trace(...args: LogArgs): void {
    if (this.isLevelEnabled('trace')) this.real().trace(...args)
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.real().child(bindings, options)
  }
}

/** Fastify's childLoggerFactory: see LazyRequestLogger. */
export function lazyRequestLogger(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  if (Object.keys(options).length > 0) return parent.child(bindings, options)
  return new LazyRequestLogger(parent as PinoLogger, bindings, options) as unknown as FastifyBaseLogger
}

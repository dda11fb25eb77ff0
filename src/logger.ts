import { hostname } from 'node:os'
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

/** Where a log line goes: pino's destinations, a Writable (the tests' capture), or TurnBatchedLog. */
export interface LineSink {
  write(line: string): unknown
}

/**
 * A log destination that hands its lines on once per turn of the event loop: every line of the
 * turn, in order, joined into one write to `sink`. A bearer read wrote its request line on its own
 * before, and with pino's asynchronous standard output each line that found no write in flight
 * started one on libuv's pool (a wake-up of a pool thread, then one of the event loop), while the
 * lines behind it were appended to a string whose byte length was counted again at every line;
 * with pino's building of the line (requestLineWriter below), a quarter of the read's server CPU
 * (issue 46, docs/decisions.md). A line waits at most
 * until the end of its turn; flushSync() hands on what is waiting at once (at exit).
 */
export class TurnBatchedLog implements DestinationStream {
  private waiting: string[] = []
  private scheduled = false

  constructor(private readonly sink: LineSink) {}

  write(line: string): boolean {
    this.waiting.push(line)
    if (!this.scheduled) {
      this.scheduled = true
      setImmediate(this.flushSync)
    }
    return true
  }

  readonly flushSync = (): void => {
    this.scheduled = false
    if (this.waiting.length === 0) return
    const lines = this.waiting.length === 1 ? this.waiting[0]! : this.waiting.join('')
    this.waiting = []
    this.sink.write(lines)
  }
}

let standardOutput: TurnBatchedLog | undefined

/**
 * Standard output, one write a turn (TurnBatchedLog), each written before the service goes on, as
 * Node writes its own standard output to a file or pipe on Linux: a reader that stops reading
 * holds the service up instead of the lines piling up in memory without bound (docs/operations.md).
 * One per process, handed on at exit.
 */
export function logDestination(): TurnBatchedLog {
  if (!standardOutput) {
    const log = new TurnBatchedLog(pino.destination({ dest: 1, sync: true }))
    process.once('exit', log.flushSync)
    standardOutput = log
  }
  return standardOutput
}

/** The fields of the line each request writes when it ends. */
export interface RequestLine {
  reqId: string
  method: string
  path: string
  status: number
  ms: number
}

/**
 * The writer of the line each request writes when it ends (undefined when `level` leaves out
 * info): its id, method, path without the query, status and time, all plain values the service
 * fills in itself, so there is nothing in it for the redaction paths to find. The line is the one
 * pino writes for these fields at info (level, time, pid, hostname, the fields, msg), put together
 * here: through pino each line cost its serialiser's walk over the object and the wildcard
 * redaction paths besides (about 10 us a line with them, `git show 4d3a11a:bench/log-line.ts`);
 * every other line still goes through pino and them. Same stream as the main logger, so the lines
 * stay in order (test/unit/logger.test.ts holds it to pino's line).
 */
export function requestLineWriter(level: string, stream: LineSink): ((line: RequestLine) => void) | undefined {
  const threshold = pino.levels.values[level]
  if (threshold === undefined || threshold > pino.levels.values.info!) return undefined
  const fixed = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`
  return (line) => {
    stream.write(
      `{"level":30,"time":${Date.now()}${fixed},"reqId":${JSON.stringify(line.reqId)},"method":${JSON.stringify(line.method)},"path":${JSON.stringify(line.path)},"status":${line.status},"ms":${line.ms},"msg":"request"}\n`,
    )
  }
}

type Bindings = Parameters<FastifyBaseLogger['child']>[0]
type ChildLoggerOptions = NonNullable<Parameters<FastifyBaseLogger['child']>[1]>
type LogArgs = Parameters<FastifyBaseLogger['info']>
type PinoLogger = FastifyBaseLogger & { isLevelEnabled(level: string): boolean }

/**
 * Fastify's per-request logger, made on the first line the request writes. Fastify makes a pino
 * child per request to bind its id; with the redaction paths above that costs about 3.6 us (pino
 * runs its redaction over the bindings), on every request, and almost no request writes a line
 * through it (the request line is written by requestLineWriter). The lines are the
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

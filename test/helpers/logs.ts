import { Writable } from 'node:stream'

/** The service's log lines, caught in memory (AppOverrides.logStream), each parsed on demand. */
export class LogCapture extends Writable {
  lines: string[] = []
  override _write(chunk: Buffer, _encoding: string, done: () => void) {
    this.lines.push(...chunk.toString('utf8').split('\n').filter(Boolean))
    done()
  }
  entries(): Record<string, unknown>[] {
    return this.lines.map((line) => JSON.parse(line) as Record<string, unknown>)
  }
  /** The entries whose message matches. */
  messages(pattern: RegExp): Record<string, unknown>[] {
    return this.entries().filter((entry) => pattern.test(String(entry.msg)))
  }
}

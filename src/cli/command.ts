import type { ParseArgsConfig } from 'node:util'
import type { Clock } from '../clock.ts'

/** A wrong command line: exit 2 with the usage of what was meant. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message)
  }
}

export interface CliIo {
  out(line: string): void
  err(line: string): void
}

export const stdio: CliIo = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
}

export interface Context {
  env: Record<string, string | undefined>
  io: CliIo
  clock: Clock
  /** A repeatable option (`multiple: true`) arrives as the list of its values. */
  values: Record<string, string | boolean | string[] | undefined>
  positionals: string[]
  /** The running command's `--help` text, for the UsageError of a wrong option value. */
  usage: string
}

export interface Command {
  /** `group action`, or one word. */
  name: string
  /** Arguments after the name, as the usage line shows them. */
  args?: string
  summary: string
  /** Lines under the usage line of `--help`. */
  help?: string[]
  options?: ParseArgsConfig['options']
  positionals?: number
  run(context: Context): Promise<number>
}

/** A command's `--help`: its usage line, its summary and its help lines. */
export function usageOf(command: Command): string {
  return [`usage: portcullis ${command.name}${command.args ? ` ${command.args}` : ''}`, `  ${command.summary}`, ...(command.help ?? []).map((line) => `  ${line}`)].join('\n')
}


export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}

/** A repeatable option's values, each of which may also be a comma-separated list. */
export function listOption(value: string | boolean | string[] | undefined): string[] {
  const values = Array.isArray(value) ? value : typeof value === 'string' ? [value] : []
  return values.flatMap((item) => item.split(',')).map((item) => item.trim()).filter(Boolean)
}

export const json = (value: unknown) => JSON.stringify(value, null, 2)

export const JSON_OPTION = { json: { type: 'boolean' } } satisfies ParseArgsConfig['options']
export const JSON_HELP = '--json prints a JSON array of objects (indented) instead of the table.'

function cell(value: unknown): string {
  if (value === null || value === undefined) return '-'
  return Array.isArray(value) ? value.join(',') : String(value)
}

/**
 * A list command's output on stdout: with --json the objects as one JSON array, for programs;
 * otherwise a table of the named fields (the JSON names are the header row), padded to line up.
 */
export function printList<T extends object>(context: Context, items: T[], fields: (keyof T & string)[]): void {
  if (context.values.json) {
    context.io.out(json(items))
    return
  }
  const rows = [fields, ...items.map((item) => fields.map((field) => cell(item[field])))]
  const widths = fields.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  // The last column is not padded, so no line ends in blanks.
  for (const row of rows) context.io.out(row.map((text, column) => (column === row.length - 1 ? text : text.padEnd(widths[column]!))).join('  '))
}

import { createInterface } from 'node:readline'
import type { RequestContext } from '../audit/events.ts'
import type { Converted } from './converters.ts'
import { ALREADY_PRESENT, IMPORT_BATCH, type ImportService } from './service.ts'
import type { SkipReason } from './lines.ts'

/**
 * The CLI's import of a whole file (`portcullis users import`): lines read as they arrive and
 * imported a batch (one transaction) at a time, so memory stays flat whatever the file's size; each
 * line not imported is reported as its batch finishes, by its number, never with its hash.
 */

export interface ImportTotals {
  lines: number
  imported: number
  /** Skipped as already here (email_exists): what a second run of the same file finds. */
  present: number
  /** Refused: invalid, weak_hash, hash_too_costly and the rest (the CLI then exits 1). */
  refused: number
}

export interface ImportRunOptions {
  dryRun: boolean
  events: boolean
  context: RequestContext
  /** A line not imported: its number (1-based), address, reason and the explanation. */
  onSkip(number: number, email: string, reason: SkipReason, message: string): void
  /** After each batch: the totals so far. */
  onBatch?(totals: ImportTotals): void
}

/** JSON Lines: each non-blank line parsed, numbered from 1 as an editor shows them. */
export async function* jsonLines(input: NodeJS.ReadableStream): AsyncGenerator<Converted> {
  let number = 0
  for await (const text of createInterface({ input, crlfDelay: Infinity })) {
    number++
    if (text.trim() === '') continue
    try {
      yield { number, line: JSON.parse(text) as unknown }
    } catch {
      yield { number, error: 'not valid JSON' }
    }
  }
}

export async function importLines(service: ImportService, records: AsyncIterable<Converted>, options: ImportRunOptions): Promise<ImportTotals> {
  const totals: ImportTotals = { lines: 0, imported: 0, present: 0, refused: 0 }
  let batch: { number: number; line: unknown }[] = []
  const flush = async () => {
    if (batch.length === 0) return
    const report = await service.importBatch(batch.map((entry) => entry.line), options)
    totals.imported += report.imported
    for (const skipped of report.skipped) {
      if (ALREADY_PRESENT.has(skipped.reason)) totals.present++
      else totals.refused++
      options.onSkip(batch[skipped.index]!.number, skipped.email, skipped.reason, skipped.message)
    }
    batch = []
    options.onBatch?.(totals)
  }
  for await (const record of records) {
    totals.lines++
    if ('error' in record) {
      totals.refused++
      options.onSkip(record.number, '', 'invalid', record.error)
      continue
    }
    batch.push(record)
    if (batch.length === IMPORT_BATCH) await flush()
  }
  await flush()
  return totals
}

/** `1m05s`, `42s`. */
function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds))
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`
}

/**
 * The progress line a terminal shows (on standard error, rewritten in place): lines so far, the
 * rate, and with a file's size known the share read and an estimate of the time left.
 */
export function progressLine(totals: ImportTotals, elapsedMs: number, read: { bytes: number; size: number } | null): string {
  const rate = elapsedMs > 0 ? totals.lines / (elapsedMs / 1000) : 0
  let line = `${totals.lines.toLocaleString('en')} lines, ${totals.imported.toLocaleString('en')} imported, ${Math.round(rate).toLocaleString('en')}/s`
  if (read && read.size > 0) {
    const share = Math.min(1, read.bytes / read.size)
    const width = 24
    const filled = Math.round(share * width)
    const left = share > 0 ? (elapsedMs / 1000) * (1 / share - 1) : 0
    line = `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${Math.floor(share * 100)}% ${line}, about ${duration(left)} left`
  }
  return line
}

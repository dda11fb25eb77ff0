// What one request line costs in pino, with and without the service's redaction paths, to a
// synchronous and an asynchronous /dev/null (the service writes asynchronously). The evidence for
// requestLineLogger in src/logger.ts; a whole request cannot resolve a few microseconds here.
//   npx tsx bench/log-line.ts
import { openSync } from 'node:fs'
import pino from 'pino'
import { REDACT_PATHS } from '../src/logger.ts'

const LINES = 200_000
const line = { reqId: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', method: 'GET', path: '/api/v1/watchlists', status: 200, ms: 0.4 }

function microsPerLine(logger: pino.Logger): number {
  for (let i = 0; i < 20_000; i++) logger.info(line, 'request')
  const began = process.hrtime.bigint()
  for (let i = 0; i < LINES; i++) logger.info(line, 'request')
  return Number(process.hrtime.bigint() - began) / 1e3 / LINES
}

const results: Record<string, number> = {}
for (const sync of [true, false]) {
  for (const redacted of [true, false]) {
    const destination = pino.destination({ dest: openSync('/dev/null', 'w'), sync })
    const logger = pino({ level: 'info', ...(redacted ? { redact: { paths: REDACT_PATHS, censor: '[redacted]' } } : {}) }, destination)
    results[`${sync ? 'sync' : 'async'}, ${redacted ? 'with' : 'without'} the redaction paths (us a line)`] = +microsPerLine(logger).toFixed(2)
  }
}
console.log(JSON.stringify(results, null, 2))

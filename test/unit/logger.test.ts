import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import pino from 'pino'
import { requestLineWriter, TurnBatchedLog } from '../../src/logger.ts'

const turn = () => new Promise<void>((resolve) => setImmediate(resolve))

describe('TurnBatchedLog', () => {
  test('hands on the lines of one turn in one write, in order, and nothing before the turn ends', async () => {
    const writes: string[] = []
    const log = new TurnBatchedLog({ write: (data: string) => writes.push(data) })
    log.write('a\n')
    log.write('b\n')
    log.write('c\n')
    assert.deepEqual(writes, [])
    await turn()
    assert.deepEqual(writes, ['a\nb\nc\n'])
    log.write('d\n')
    await turn()
    assert.deepEqual(writes, ['a\nb\nc\n', 'd\n'])
    await turn()
    assert.equal(writes.length, 2, 'no empty write for a turn without lines')
  })

  test('flushSync hands on what waits at once, and the scheduled turn then writes nothing twice', async () => {
    const writes: string[] = []
    const log = new TurnBatchedLog({ write: (data: string) => writes.push(data) })
    log.write('x\n')
    log.write('y\n')
    log.flushSync()
    assert.deepEqual(writes, ['x\ny\n'])
    await turn()
    assert.deepEqual(writes, ['x\ny\n'])
  })

  test("pino's lines through it stay whole and in order beside the request lines", async () => {
    const writes: string[] = []
    const log = new TurnBatchedLog({ write: (data: string) => writes.push(data) })
    const logger = pino({ level: 'info' }, log)
    const requestLine = requestLineWriter('info', log)!
    logger.info({ n: 1 }, 'first')
    requestLine({ reqId: 'r', method: 'GET', path: '/p', status: 200, ms: 0.4 })
    logger.warn({ n: 2 }, 'third')
    await turn()
    assert.equal(writes.length, 1)
    assert.deepEqual(
      writes[0]!.split('\n').filter(Boolean).map((line) => (JSON.parse(line) as { msg: string }).msg),
      ['first', 'request', 'third'],
    )
  })
})

describe('requestLineWriter', () => {
  test("writes pino's own line for the same fields: same keys in the same order, same values but the time", () => {
    const ours: string[] = []
    const theirs: string[] = []
    const fields = { reqId: 'c0a8012e-7f00-4e4a-9d5e-1b2c3d4e5f60', method: 'GET', path: '/api/v1/watchlists/"odd"\\path\u2028é', status: 200, ms: 1.3 }
    const before = Date.now()
    requestLineWriter('info', { write: (line: string) => ours.push(line) })!(fields)
    pino({ level: 'info' }, { write: (line: string) => theirs.push(line) }).info(fields, 'request')
    assert.equal(ours.length, 1)
    assert.ok(ours[0]!.endsWith('\n'))
    const mine = JSON.parse(ours[0]!) as Record<string, unknown>
    const pinos = JSON.parse(theirs[0]!) as Record<string, unknown>
    assert.deepEqual(Object.keys(mine), Object.keys(pinos))
    assert.deepEqual({ ...mine, time: 0 }, { ...pinos, time: 0 })
    assert.ok((mine.time as number) >= before && (mine.time as number) <= Date.now())
  })

  test('is absent when the level leaves info out, present at info and below', () => {
    for (const level of ['warn', 'error', 'fatal', 'silent']) assert.equal(requestLineWriter(level, { write: () => true }), undefined, level)
    for (const level of ['info', 'debug', 'trace']) assert.equal(typeof requestLineWriter(level, { write: () => true }), 'function', level)
  })
})

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { OncePerWindow } from '../../src/once-per-window.ts'
import { Background } from '../../src/background.ts'
import type { Logger } from '../../src/logger.ts'

describe('Background: work after an answer, bounded', () => {
  test('past the limit a task is dropped, counted and not run; the ones pending still finish, and room comes back', async () => {
    const dropped: string[] = []
    const warnings: unknown[] = []
    const logger: Logger = { info: () => {}, warn: (fields: unknown) => warnings.push(fields), error: () => {} }
    const background = new Background(logger, { limit: 3, onDropped: (label) => dropped.push(label) })
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const ran: number[] = []
    const started = [0, 1, 2, 3, 4].map((n) => background.run(`task ${n}`, async () => {
      await gate
      ran.push(n)
    }))
    assert.deepEqual(started, [true, true, true, false, false])
    assert.equal(background.size(), 3)
    assert.deepEqual(dropped, ['task 3', 'task 4'])
    assert.deepEqual(warnings, [{ task: 'task 3', dropped: 1, pending: 3 }], 'one warning line for a burst of drops')
    release()
    await background.drain()
    assert.deepEqual(ran.sort(), [0, 1, 2])
    assert.equal(background.size(), 0)
    assert.equal(background.run('after', async () => ran.push(5)), true)
    await background.drain()
    assert.ok(ran.includes(5))
  })
})

describe('OncePerWindow', () => {
  test('the first event of a key in its window, then none until the window is over', () => {
    const once = new OncePerWindow(60_000)
    assert.equal(once.first('a', 0), true)
    assert.equal(once.first('a', 1), false)
    assert.equal(once.first('b', 10), true)
    assert.equal(once.first('a', 59_999), false)
    assert.equal(once.first('a', 60_000), true)
    assert.equal(once.first('b', 60_009), false)
    assert.equal(once.first('b', 60_010), true)
  })

  test('holds at most `max` keys within their windows: a new key past that gets no until old windows end', () => {
    const once = new OncePerWindow(1000, 2)
    assert.equal(once.first('a', 0), true)
    assert.equal(once.first('b', 500), true)
    assert.equal(once.first('c', 600), false, 'two keys held already')
    assert.equal(once.first('c', 1000), true, "a's window is over, so it is forgotten and c fits")
    assert.equal(once.first('d', 1200), false)
  })
})

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { isUuid, timeOrderedUuid } from '../../src/text.ts'

test('time-ordered ids are version 7 UUIDs that carry their millisecond and sort by it', () => {
  const at = Date.UTC(2026, 10, 22, 1, 2, 3, 456)
  const id = timeOrderedUuid(at)
  assert.ok(isUuid(id))
  assert.equal(id[14], '7')
  assert.match(id[19]!, /[89ab]/)
  assert.equal(Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16), at)

  const times = [0, 1, 255, 256, at - 1, at, at + 1, 2 ** 48 - 1]
  const ids = times.map((t) => timeOrderedUuid(t))
  assert.deepEqual([...ids].sort(), ids)
  // The rest is random: two ids of one millisecond differ.
  assert.notEqual(timeOrderedUuid(at), timeOrderedUuid(at))
})

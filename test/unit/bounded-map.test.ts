import assert from 'node:assert/strict'
import { test } from 'node:test'
import { setBounded } from '../../src/bounded-map.ts'

test('a bounded map pushes out its oldest key for a new one past the bound, and nothing when a key is replaced', () => {
  const map = new Map<string, number>()
  for (const [i, key] of ['a', 'b', 'c'].entries()) setBounded(map, key, i, 3)
  assert.deepEqual([...map], [['a', 0], ['b', 1], ['c', 2]])

  // Replacing a value at the bound keeps every key, and the replaced one keeps its place.
  setBounded(map, 'a', 10, 3)
  assert.deepEqual([...map], [['a', 10], ['b', 1], ['c', 2]])

  // A new key at the bound pushes out the oldest, and the map never grows past it.
  setBounded(map, 'd', 3, 3)
  assert.deepEqual([...map], [['b', 1], ['c', 2], ['d', 3]])
  for (let i = 0; i < 100; i++) setBounded(map, `k${i}`, i, 3)
  assert.deepEqual([...map.keys()], ['k97', 'k98', 'k99'])
})

import assert from 'node:assert/strict'
import { test } from 'node:test'
import Database from 'better-sqlite3'

// SQLite 3.54.0 and 3.54.1 re-plan a reused statement on every run when it has a `col = ?` term
// and an ORDER BY or a join: the query planner marks the parameter (for its 0/1 special case), and
// better-sqlite3 clears the bindings after every run, which those versions treat as a reason to
// compile the statement again. Every watchlist read paid it: 13,000 against 25,000 req/s on one
// machine (docs/decisions.md, "Storage"). better-sqlite3 is pinned to 13.0.3 (SQLite 3.53.4) for
// it. A newer SQLite may have mended it; this test stops an upgrade until someone has measured the
// bearer read beside the previous release (`npm run bench`) and moved the line below.
const MEASURED_GOOD = [3, 53, 4]
const KNOWN_REPLANNING = ['3.54.0', '3.54.1']

test('the embedded SQLite is not one that re-plans every cached statement on each run', () => {
  const db = new Database(':memory:')
  const version = (db.prepare('select sqlite_version() as v').get() as { v: string }).v
  db.close()
  assert.ok(!KNOWN_REPLANNING.includes(version), `SQLite ${version} re-prepares reused statements on every run (see this file)`)
  const [major, minor, patch] = version.split('.').map(Number) as [number, number, number]
  const newer = major * 1e6 + minor * 1e3 + patch > MEASURED_GOOD[0]! * 1e6 + MEASURED_GOOD[1]! * 1e3 + MEASURED_GOOD[2]!
  assert.ok(!newer, `SQLite ${version} is newer than the last one measured (${MEASURED_GOOD.join('.')}): measure the bearer read with npm run bench, then move MEASURED_GOOD`)
})

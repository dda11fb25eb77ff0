import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { test } from 'node:test'
import { openDatabase } from '../../src/db/index.ts'

// The internal modules this process has loaded (Node's own list; not in its typings).
const loadedInternals = () => (process as unknown as { moduleLoadList: string[] }).moduleLoadList

// Not even a look at the global Response here: on Node 24 reading its descriptor loads undici.
test('opening PostgreSQL does not load Node\'s fetch implementation', async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'portcullis-pg-load-'))
  assert.ok(!loadedInternals().some((name) => name.includes('undici')), 'nothing in this file touched fetch before')
  // pg connects on the first query only, so no server is needed to load it.
  const db = openDatabase({ databaseUrl: 'postgres://nobody@127.0.0.1:9/none', dataDir })
  try {
    assert.equal(db.engine, 'postgres')
    assert.ok(!loadedInternals().some((name) => name.includes('undici')), "pg's Cloudflare probe loaded undici")
  } finally {
    await db.close()
    rmSync(dataDir, { recursive: true, force: true })
  }
})

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { statSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { KEK_FILE, KeySealer } from '../../src/auth/key-encryption.ts'
import { runCli, type CliIo } from '../../src/cli.ts'
import { openDatabase } from '../../src/db/index.ts'
import { signingKeys } from '../../src/db/repositories.ts'
import { createStorage, ENGINES, type TestStorage } from '../helpers/db.ts'
import { registerVerifyLogin, startTestApp } from '../helpers/app.ts'

const quiet: CliIo = { out() {}, err() {} }
const newKek = () => randomBytes(32).toString('base64')

/** The stored rows, read directly (starting an app would start the key store). */
async function storedKeys(storage: TestStorage) {
  const db = openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir })
  try {
    return await signingKeys.list(db.kysely)
  } finally {
    await db.close()
  }
}

async function startFails(engine: (typeof ENGINES)[number], storage: TestStorage, env: Record<string, string>): Promise<string> {
  try {
    const t = await startTestApp(engine, { storage, env })
    await t.close()
  } catch (error) {
    return (error as Error).message
  }
  throw new Error('start-up succeeded with the wrong key')
}

for (const engine of ENGINES) {
  describe(`signing keys at rest on ${engine}`, () => {
    test('development generates a key into DATA_DIR (0600) and stores private keys only sealed', async () => {
      const t = await startTestApp(engine)
      try {
        const file = path.join(t.storage.dataDir, KEK_FILE)
        assert.equal(statSync(file).mode & 0o777, 0o600)
        const rows = await signingKeys.list(t.app.services.db.kysely)
        assert.ok(rows.length > 0)
        for (const row of rows) {
          assert.ok(KeySealer.isSealed(row.private_jwk), 'sealed')
          assert.ok(!row.private_jwk.includes('"d"'))
        }
      } finally {
        await t.close()
      }
    })

    test('clear keys from before are sealed on start; a wrong key stops start-up and changes nothing', async () => {
      const storage = await createStorage(engine)
      const kek = newKek()
      try {
        const first = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: kek } })
        const user = await registerVerifyLogin(first)
        // Put the private key back in the clear, as a database from the previous release holds it.
        const sealer = first.app.services.sealer
        for (const row of await signingKeys.list(first.app.services.db.kysely)) {
          const clear = sealer.open(row.private_jwk, `signing_key:${row.kid}`)
          await signingKeys.replacePrivate(first.app.services.db.kysely, row.kid, row.private_jwk, clear)
        }
        await first.close()
        assert.ok((await storedKeys(storage)).every((row) => !KeySealer.isSealed(row.private_jwk)))

        const second = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: kek } })
        try {
          assert.ok((await signingKeys.list(second.app.services.db.kysely)).every((row) => KeySealer.isSealed(row.private_jwk)))
          assert.equal((await second.get('/auth/me', user.access_token)).statusCode, 200)
          assert.equal((await second.post('/auth/refresh', { refresh_token: user.refresh_token })).statusCode, 200)
        } finally {
          await second.close()
        }

        const before = await storedKeys(storage)
        const message = await startFails(engine, storage, { KEY_ENCRYPTION_KEY: newKek() })
        assert.match(message, /^KEY_ENCRYPTION_KEY does not decrypt/)
        assert.ok(!message.includes('\n'))
        assert.deepEqual(await storedKeys(storage), before)
      } finally {
        await storage.drop()
      }
    })

    test('keys rewrap moves every key to the new KEY_ENCRYPTION_KEY; the old one no longer starts the service', async () => {
      const storage = await createStorage(engine)
      const oldKek = newKek()
      const nextKek = newKek()
      const env = { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl }
      try {
        const first = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: oldKek } })
        const user = await registerVerifyLogin(first)
        await first.close()
        assert.equal(await runCli(['keys', 'rotate'], { ...env, KEY_ENCRYPTION_KEY: oldKek }, quiet), 0)

        const before = await storedKeys(storage)
        const err: string[] = []
        // A wrong old key: refused, nothing changed.
        assert.equal(await runCli(['keys', 'rewrap'], { ...env, OLD_KEY_ENCRYPTION_KEY: newKek(), KEY_ENCRYPTION_KEY: nextKek }, { out() {}, err: (line) => err.push(line) }), 1)
        assert.match(err.at(-1)!, /OLD_KEY_ENCRYPTION_KEY does not decrypt/)
        assert.deepEqual(await storedKeys(storage), before)
        assert.equal(await runCli(['keys', 'rewrap'], { ...env, KEY_ENCRYPTION_KEY: nextKek }, quiet), 2)

        const out: string[] = []
        assert.equal(await runCli(['keys', 'rewrap'], { ...env, OLD_KEY_ENCRYPTION_KEY: oldKek, KEY_ENCRYPTION_KEY: nextKek }, { out: (line) => out.push(line), err() {} }), 0)
        assert.match(out[0]!, /re-encrypted \d+ stored key/)
        // Repeating it is harmless.
        assert.equal(await runCli(['keys', 'rewrap'], { ...env, OLD_KEY_ENCRYPTION_KEY: oldKek, KEY_ENCRYPTION_KEY: nextKek }, quiet), 0)

        assert.match(await startFails(engine, storage, { KEY_ENCRYPTION_KEY: oldKek }), /KEY_ENCRYPTION_KEY does not decrypt/)
        const next = await startTestApp(engine, { storage, env: { KEY_ENCRYPTION_KEY: nextKek } })
        try {
          assert.equal((await next.get('/auth/me', user.access_token)).statusCode, 200)
        } finally {
          await next.close()
        }
      } finally {
        await storage.drop()
      }
    })
  })
}

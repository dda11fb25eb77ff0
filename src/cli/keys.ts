import { KeySealer } from '../auth/key-encryption.ts'
import { describeKeys, rewrapStoredKeys, rotateSigningKeys } from '../auth/keys.ts'
import { REFRESH_TTL_SECONDS } from '../auth/tokens.ts'
import { loadConfig } from '../config.ts'
import { signingKeys } from '../db/repositories.ts'
import { rewrapMail } from '../mail/queue.ts'
import { rewrapTotpSecrets } from '../mfa/service.ts'
import { rewrapClientSecrets } from '../provider/clients.ts'
import { rewrapWebhookSecrets } from '../webhooks/service.ts'
import { iso, JSON_HELP, JSON_OPTION, printList, UsageError, type Command } from './command.ts'
import { sealerFor, withDatabase } from './database.ts'

/** The signing keys, and the key-encryption key that seals every stored secret. */
export const keyCommands: Command[] = [
  {
    name: 'keys list',
    args: '[--json]',
    summary: 'list signing keys and their state (signing, verifying, retired)',
    help: [JSON_HELP],
    options: JSON_OPTION,
    run: (context) =>
      withDatabase(loadConfig(context.env), context.io, async (db) => {
        const keys = describeKeys(await signingKeys.list(db.kysely), context.clock.now(), REFRESH_TTL_SECONDS)
        if (keys.length === 0) context.io.err('portcullis: no signing keys yet (the service creates one on first start)')
        const views = keys.map((key) => ({ kid: key.kid, alg: key.alg, state: key.state, created_at: iso(key.createdAt), retires_at: iso(key.retiresAt) }))
        printList(context, views, ['kid', 'alg', 'state', 'created_at', 'retires_at'])
        return 0
      }),
  },
  {
    name: 'keys rotate',
    summary: 'add a new signing key to each key family in use (old ones keep verifying)',
    run: ({ env, io, clock }) => {
      const config = loadConfig(env)
      return withDatabase(config, io, async (db) => {
        const kids = await rotateSigningKeys(db, await sealerFor(config, db, io), clock.now())
        for (const kid of kids) io.out(`new signing key ${kid}; running instances sign with it within a minute, old keys keep verifying`)
        return 0
      })
    },
  },
  {
    name: 'keys rewrap',
    summary: 're-encrypt the stored keys from OLD_KEY_ENCRYPTION_KEY to KEY_ENCRYPTION_KEY',
    help: ['Set OLD_KEY_ENCRYPTION_KEY to the key in use and KEY_ENCRYPTION_KEY to the new one; then restart', 'every instance with the new KEY_ENCRYPTION_KEY. All or nothing; running it twice is harmless.'],
    run: ({ env, io, usage }) => {
      const config = loadConfig(env)
      if (!config.oldKeyEncryptionKey || !config.keyEncryptionKey) {
        throw new UsageError('keys rewrap needs OLD_KEY_ENCRYPTION_KEY (the key in use) and KEY_ENCRYPTION_KEY (the new one)', usage)
      }
      const from = new KeySealer(config.oldKeyEncryptionKey)
      const to = new KeySealer(config.keyEncryptionKey)
      return withDatabase(config, io, async (db) => {
        const count = await rewrapStoredKeys(db, from, to, [rewrapMail, rewrapTotpSecrets, rewrapClientSecrets, rewrapWebhookSecrets])
        io.out(`re-encrypted ${count} stored key(s), queued mail(s), second-factor secret(s), client and webhook secret(s) under the new KEY_ENCRYPTION_KEY; restart every instance with it`)
        return 0
      })
    },
  },
]

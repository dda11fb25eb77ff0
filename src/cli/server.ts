import { loadConfig } from '../config.ts'
import { migrate, openDatabase } from '../db/index.ts'
import type { Command } from './command.ts'
import { announceDatabase } from './database.ts'

/** The service itself: run it, or bring its database up to date. */
export const serverCommands: Command[] = [
  {
    name: 'serve',
    summary: 'run the HTTP service',
    async run({ env, io }) {
      const { serve } = await import('../server.ts')
      const config = loadConfig(env)
      announceDatabase(config, io)
      await serve(config)
      return 0
    },
  },
  {
    name: 'migrate',
    summary: 'apply pending database migrations (creates the database if there is none)',
    async run({ env, io }) {
      const config = loadConfig(env)
      const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir })
      announceDatabase(config, io)
      const applied = await migrate(db).finally(() => db.close())
      io.out(applied.length === 0 ? 'database is up to date' : `applied: ${applied.join(', ')}`)
      return 0
    },
  },
]

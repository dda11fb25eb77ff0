import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'

export const ENGINES = ['sqlite', 'postgres'] as const
export type EngineName = (typeof ENGINES)[number]

export interface TestStorage {
  engine: EngineName
  dataDir: string
  databaseUrl: string | undefined
  drop(): Promise<void>
}

/**
 * A fresh, empty store per caller: a temp folder for SQLite, a new database on the PostgreSQL
 * server in DATABASE_URL. Without that server the PostgreSQL tests fail; they never skip.
 */
export async function createStorage(engine: EngineName): Promise<TestStorage> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'portcullis-test-'))
  if (engine === 'sqlite') {
    return { engine, dataDir, databaseUrl: undefined, drop: async () => rmSync(dataDir, { recursive: true, force: true }) }
  }
  const serverUrl = process.env.DATABASE_URL
  if (!serverUrl) throw new Error('DATABASE_URL is not set: the PostgreSQL tests need a server (npm test starts one)')
  const name = `portcullis_test_${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  try {
    await admin.query(`create database ${name}`)
  } finally {
    await admin.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return {
    engine,
    dataDir,
    databaseUrl: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: serverUrl })
      await client.connect()
      try {
        await client.query(`drop database if exists ${name} with (force)`)
      } finally {
        await client.end()
        rmSync(dataDir, { recursive: true, force: true })
      }
    },
  }
}

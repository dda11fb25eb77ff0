import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

/**
 * Loads a dependency only where it is used. PostgreSQL, Redis and SMTP clients are needed only
 * when DATABASE_URL, REDIS_URL or SMTP_URL is set; the default embedded set-up would otherwise
 * pay tens of megabytes and a few hundred milliseconds of start-up for code it never runs.
 */
export function load<Module>(name: string): Module {
  return require(name) as Module
}

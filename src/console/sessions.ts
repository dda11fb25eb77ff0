import { createHash, randomBytes } from 'node:crypto'
import type { ClaimsSource } from '../authz/claims.ts'
import { grants } from '../authz/permissions.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users } from '../db/repositories.ts'

/** The console's cookie: HttpOnly, SameSite=Strict, path /console, Secure in production. */
export const CONSOLE_COOKIE = 'portcullis_console'
/** A console session lives 12 hours at most, and ends after 30 minutes without a request. */
export const CONSOLE_MAX_AGE_MS = 12 * 3600_000
export const CONSOLE_IDLE_MS = 30 * 60_000
/** Its last request is written at most this often. */
const TOUCH_MS = 60_000

/** The operator behind a console request: who, and whether they may change things. */
export interface Operator {
  userId: string
  email: string
  name: string
  /** `console:write`: every change; without it (`console:read` only, the `viewer` role) the pages only read. */
  canWrite: boolean
}

const hashOf = (token: string) => createHash('sha256').update(token).digest('base64url')

/**
 * The console's own sessions (docs/console.md): a cookie whose SHA-256 names a row. Every request
 * judges it afresh: 12 hours since sign-in, 30 minutes since the last request, the account still
 * active and on the credential epoch it signed in under (a password reset or change, a disable or a
 * deletion end it), the provider grant of its sign-in still standing (logout-all ends it), and the account still holding `console:read` (a role taken away
 * ends it: the claims are read under the account's claims version, src/authz/claims.ts). A session
 * that fails any of these is deleted.
 */
export class ConsoleSessions {
  constructor(private readonly deps: { db: Db; clock: Clock; claims: Pick<ClaimsSource, 'forToken'>; grants: { grantStands(grantRef: string, userId: string): Promise<boolean> } }) {}

  private get db() {
    return this.deps.db.kysely
  }

  /** A new session for an operator the provider signed in (with a second factor); the cookie's value. */
  async open(userId: string, grantRef: string): Promise<string> {
    const user = await users.findById(this.db, userId)
    if (!user) throw new Error('the operator is gone')
    const token = randomBytes(32).toString('base64url')
    const now = this.deps.clock.now()
    await this.db.insertInto('console_sessions').values({ id_hash: hashOf(token), user_id: userId, credential_epoch: user.credential_epoch, grant_ref: grantRef, created_at: now, last_seen_at: now, expires_at: now + CONSOLE_MAX_AGE_MS }).execute()
    return token
  }

  /** The operator of a live session, or null (and the session deleted) when it may no longer be used. */
  async operator(token: string | undefined): Promise<Operator | null> {
    if (!token || token.length > 100) return null
    const idHash = hashOf(token)
    const row = await this.db.selectFrom('console_sessions').selectAll().where('id_hash', '=', idHash).executeTakeFirst()
    if (!row) return null
    const now = this.deps.clock.now()
    const end = async () => {
      await this.db.deleteFrom('console_sessions').where('id_hash', '=', idHash).execute()
      return null
    }
    if (now >= Number(row.expires_at) || now - Number(row.last_seen_at) >= CONSOLE_IDLE_MS) return end()
    const user = await users.findById(this.db, row.user_id)
    if (!user || user.status !== 'active' || user.credential_epoch !== row.credential_epoch) return end()
    if (!(await this.deps.grants.grantStands(row.grant_ref, user.id))) return end()
    const { authz } = await this.deps.claims.forToken(user.id, null, user.claims_version)
    const held = authz.claims.permissions ?? []
    if (!grants(held, 'console:read', false)) return end()
    if (now - Number(row.last_seen_at) >= TOUCH_MS) await this.db.updateTable('console_sessions').set({ last_seen_at: now }).where('id_hash', '=', idHash).execute()
    return { userId: user.id, email: user.email, name: user.full_name, canWrite: grants(held, 'console:write', false) }
  }

  /** Whether an account may use the console at all (the sign-in's last check). */
  async mayUse(userId: string): Promise<boolean> {
    const user = await users.findById(this.db, userId)
    if (!user || user.status !== 'active') return false
    const { authz } = await this.deps.claims.forToken(user.id, null, user.claims_version)
    return grants(authz.claims.permissions ?? [], 'console:read', false)
  }

  async close(token: string | undefined): Promise<void> {
    if (token) await this.db.deleteFrom('console_sessions').where('id_hash', '=', hashOf(token)).execute()
  }

  /** Retention: sessions past their 12 hours or their idle limit. */
  async deleteEnded(): Promise<number> {
    const now = this.deps.clock.now()
    const result = await this.db.deleteFrom('console_sessions').where((e) => e.or([e('expires_at', '<=', now), e('last_seen_at', '<=', now - CONSOLE_IDLE_MS)])).executeTakeFirst()
    return Number(result.numDeletedRows)
  }
}

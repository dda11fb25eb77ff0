import { recordEvents, type RequestContext } from '../audit/events.ts'
import type { KeySealer } from '../auth/key-encryption.ts'
import { RolesService, type RoleCatalogue } from '../authz/roles.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users, type UserRow } from '../db/repositories.ts'
import { importTotpFactors } from '../mfa/service.ts'
import { identities } from '../oidc/store.ts'
import type { AccountEvents } from '../webhooks/events.ts'
import { importedFormat, type FirebaseParams } from './formats.ts'
import type { ImportedHashSample } from './timing.ts'
import { checkLine, reportedEmail, type ImportedUser, type SkipReason } from './lines.ts'

/** Lines one call takes: the admin API's limit, and the CLI's batch (one transaction each). */
export const IMPORT_BATCH = 1000

export interface Skipped {
  /** The line's place in what was given: 0-based within the request (the CLI adds the batch's start and shows it 1-based). */
  index: number
  email: string
  reason: SkipReason
  /** For the operator; never a hash or a secret. */
  message: string
}

export interface ImportReport {
  imported: number
  skipped: Skipped[]
}

/** A skip that is not a refusal: the line's account is already here (what a second run of the same file finds). */
export const ALREADY_PRESENT: ReadonlySet<SkipReason> = new Set(['email_exists'])

export interface ImportDeps {
  db: Db
  clock: Clock
  sealer: KeySealer
  /** The catalogue, and the roles of new accounts (src/authz/roles.ts). */
  roles: RolesService
  /** The configured identity providers' names (OIDC_PROVIDERS). */
  providers: ReadonlySet<string>
  firebase: FirebaseParams | null
  /** The webhooks' outbox: `user.created` for each account, only when the caller asks. */
  events: AccountEvents
  /** This instance's sample of imported hashes (src/imports/timing.ts): told at once of a new one. The CLI has none. */
  importedHashes?: ImportedHashSample
}

export interface ImportOptions {
  dryRun: boolean
  /** Write `user.created` webhook events (off by default: an import is not a thousand sign-ups). */
  events: boolean
  context: RequestContext
}

const SKIP_MESSAGES: Partial<Record<SkipReason, string>> = {
  email_exists: 'an account with this address exists; it is left as it is',
  user_id_exists: 'an account with this user_id exists (with another address); it is left as it is',
  identity_exists: 'this provider identity is linked to an account already',
}

/**
 * Moving in (docs/migrating.md): accounts from another system, with their password hashes, second
 * factors, provider identities, roles and app_metadata. Nothing is hashed here (a hash is checked
 * for its format and cost, src/imports/formats.ts, and kept as it is until the account's first
 * sign-in), so a batch costs a few statements: the reads that find what exists, then one
 * transaction that writes the whole batch or nothing. Existing accounts are never touched: a line
 * whose address or id is taken, before or during the import, is skipped. So a second run of the
 * same lines imports nothing and skips each as `email_exists`.
 */
export class ImportService {
  constructor(private readonly deps: ImportDeps) {}

  async importBatch(lines: readonly unknown[], options: ImportOptions): Promise<ImportReport> {
    const now = this.deps.clock.now()
    const skipped: Skipped[] = []
    const skip = (index: number, email: string, reason: SkipReason, message = SKIP_MESSAGES[reason] ?? reason) => skipped.push({ index, email, reason, message })
    const rules = { firebase: this.deps.firebase, providers: this.deps.providers, now }
    const catalogue: RoleCatalogue = lines.some((line) => (line as { roles?: unknown } | null)?.roles !== undefined || (line as { app_metadata?: unknown } | null)?.app_metadata !== undefined) ? await this.deps.roles.catalogue() : new Map()

    const accepted: { index: number; user: ImportedUser }[] = []
    lines.forEach((line, index) => {
      const checked = checkLine(line, rules)
      if ('reason' in checked) return skip(index, reportedEmail(line), checked.reason, checked.message)
      const problem = RolesService.importProblem(catalogue, checked.roles, checked.appMetadata)
      if (problem) return skip(index, checked.email, problem.reason, problem.message)
      accepted.push({ index, user: checked })
    })

    // What exists already, and what an earlier line of this batch takes: the later line is skipped,
    // as it would be in a later batch.
    const db = this.deps.db.kysely
    const taken = await users.taken(db, accepted.map((a) => a.user.email), accepted.map((a) => a.user.id))
    const linked = await identities.linked(db, accepted.flatMap((a) => a.user.identities))
    const fresh: { index: number; user: ImportedUser }[] = []
    for (const entry of accepted) {
      const { user } = entry
      if (taken.emails.has(user.email)) skip(entry.index, user.email, 'email_exists')
      else if (taken.ids.has(user.id)) skip(entry.index, user.email, 'user_id_exists')
      else if (user.identities.some((identity) => linked.has(`${identity.provider} ${identity.subject}`))) skip(entry.index, user.email, 'identity_exists')
      else {
        taken.emails.add(user.email)
        taken.ids.add(user.id)
        for (const identity of user.identities) linked.add(`${identity.provider} ${identity.subject}`)
        fresh.push(entry)
      }
    }
    if (options.dryRun || fresh.length === 0) return { imported: fresh.length, skipped: sortedByIndex(skipped) }

    const rows = fresh.map(({ user }) => userRow(user))
    const imported = await db.transaction().execute(async (trx) => {
      const inserted = await users.insertNew(trx, rows)
      // Taken between the check and the insert (a registration at the same moment): skipped as well.
      for (const entry of fresh) if (!inserted.has(entry.user.id)) skip(entry.index, entry.user.email, 'email_exists')
      const made = fresh.map((entry) => entry.user).filter((user) => inserted.has(user.id))
      await recordEvents(trx, this.deps.clock, { type: 'account.registered', userIds: made.map((user) => user.id), reason: 'import', context: options.context })
      await this.deps.roles.assignImported(trx, made.filter((user) => user.roles.length > 0).map((user) => ({ userId: user.id, roles: user.roles })))
      await importTotpFactors(trx, this.deps.sealer, made.filter((user) => user.totpSecret !== null).map((user) => ({ userId: user.id, secret: user.totpSecret! })), now)
      await identities.insertMany(trx, made.flatMap((user) => user.identities.map((identity) => ({
        id: crypto.randomUUID(), user_id: user.id, provider: identity.provider, subject: identity.subject, email: null, created_at: now, last_used_at: null,
      }))))
      if (options.events) {
        const byId = new Map(rows.map((row) => [row.id, row]))
        for (const user of made) {
          await this.deps.events.emit(trx, 'user.created', byId.get(user.id)!, { full_name: user.fullName, email_verified: user.verifiedAt !== null, method: 'import' })
        }
      }
      return made.length
    })
    const sample = fresh.find((entry) => importedFormat(entry.user.passwordHash) !== null && importedFormat(entry.user.passwordHash) !== 'legacy')
    if (imported > 0 && sample) this.deps.importedHashes?.offer(sample.user.passwordHash)
    return { imported, skipped: sortedByIndex(skipped) }
  }
}

function sortedByIndex(skipped: Skipped[]): Skipped[] {
  return skipped.sort((a, b) => a.index - b.index)
}

function userRow(user: ImportedUser): UserRow {
  return {
    id: user.id,
    email: user.email,
    full_name: user.fullName,
    password_hash: user.passwordHash,
    email_verified_at: user.verifiedAt,
    status: user.disabled ? 'disabled' : 'active',
    disabled_reason: user.disabled ? 'suspended' : null,
    created_at: user.createdAt,
    updated_at: user.createdAt,
    last_login_at: null,
    credential_epoch: 0,
    app_metadata: user.appMetadata,
    user_metadata: null,
    claims_version: 0,
  }
}

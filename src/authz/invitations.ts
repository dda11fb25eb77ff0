import { randomBytes, randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { RequestContext } from '../audit/events.ts'
import { emailProblem, normaliseEmail, throwIfProblems } from '../auth/input.ts'
import { hashOneTimeToken } from '../auth/one-time-tokens.ts'
import { credentialEpochOf } from '../auth/pending-proofs.ts'
import type { Principal } from '../auth/service.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import { users, type UserRow } from '../db/repositories.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import type { MailBrand } from '../mail/index.ts'
import type { MailQueue } from '../mail/queue.ts'
import { invitationMail } from '../mail/templates.ts'
import { isUuid } from '../text.ts'
import { invitationStore, membershipStore, organizationStore, type InvitationRow } from './org-store.ts'
import { assertGrantable, auditOrganization, organizationView, type OrganizationService, type OrganizationView } from './organizations.ts'
import { words } from './permissions.ts'

type Executor = Kysely<Database>

/** How long an invitation's link works. */
export const INVITATION_TTL_MS = 7 * 24 * 3600_000
/** Invitations one organisation may have waiting at once. */
export const MAX_PENDING_INVITATIONS = 50
/**
 * Invitation mails one organisation may send an hour, counted from its invitations table (withdrawn
 * and accepted ones too), so every instance sees the same count and withdrawing does not refill it.
 */
export const INVITATION_MAILS_PER_HOUR = 20
/** Of those, to one address: a new invitation replaces the one waiting, and must not become a way to flood a mailbox. */
export const INVITATION_MAILS_PER_ADDRESS_PER_HOUR = 3
const HOUR = 3600_000

export interface InvitationView {
  id: string
  email: string
  roles: string[]
  invited_by: string | null
  created_at: string
  expires_at: string
}

const iso = (ms: number) => new Date(ms).toISOString()
const invitationView = (row: InvitationRow): InvitationView => ({
  id: row.id, email: row.email, roles: words(row.roles), invited_by: row.invited_by, created_at: iso(row.created_at), expires_at: iso(row.expires_at),
})

export interface InvitationDeps {
  db: Db
  clock: Clock
  mailQueue: MailQueue
  brand: MailBrand
  organizations: OrganizationService
  /** The mailed link: `{PUBLIC_URL}/accept-invitation?token=` + the token. */
  acceptUrl: string
}

/** What the link's page shows before anything is accepted. */
export interface InvitationPreview {
  organization: string
  inviter: string
  email: string
  roles: string[]
}

/** What following the link's page did. */
export type LinkOutcome = { accepted: true; organization: OrganizationView } | { accepted: false; reason: 'dead' | 'no_account' | 'limit' }

/** How a person is named to the one they invite: their name and address, or the address alone. */
const nameOf = (user: Pick<UserRow, 'full_name' | 'email'>) => (user.full_name ? `${user.full_name} (${user.email})` : user.email)

/**
 * Invitations to an organisation (docs/authorization.md, "Invitations"): a single-use link mailed to
 * an address, kept as its SHA-256, good for 7 days. It is a pending proof (src/auth/pending-proofs.ts):
 * made to an address an account has, it records that account and its credential epoch, so it dies
 * with every event that ends all that account's sessions, and only that account can use it. It is
 * accepted by the account holding the invited address, confirmed: through the API by that account's
 * session, or on the link's page, where holding the link (mailed to that address) is the proof.
 */
export class InvitationService {
  constructor(private readonly deps: InvitationDeps) {}

  private get db() {
    return this.deps.db.kysely
  }

  /**
   * Invites `email` with `roles` (`members:invite`; nobody grants a permission they lack). A new
   * invitation to an address replaces the one waiting for it.
   */
  async invite(principal: Principal, organizationId: string, input: { email: string; roles: string[] }, context: RequestContext): Promise<InvitationView> {
    const email = normaliseEmail(input.email)
    const problem = emailProblem(email)
    throwIfProblems(problem ? [{ field: 'email', message: problem }] : [])
    const { organizations } = this.deps
    const token = randomBytes(32).toString('base64url')
    const invitation = await organizations.change(async (trx) => {
      const organization = await organizations.lock(trx, organizationId)
      const { permissions } = await organizations.require(trx, organizationId, principal.userId, 'members:invite')
      await assertGrantable(trx, permissions, input.roles)
      const now = this.deps.clock.now()
      const holder = await users.findByEmail(trx, email)
      if (holder && (await membershipStore.find(trx, organizationId, holder.id))) {
        throw new AppError('VALIDATION_ERROR', { details: [{ field: 'email', message: 'belongs to a member of this organisation already' }] })
      }
      await this.assertMailBudget(trx, organizationId, email, now)
      await invitationStore.retireTo(trx, organizationId, email, now)
      if ((await invitationStore.countPending(trx, organizationId, now)) >= MAX_PENDING_INVITATIONS) {
        throw new AppError('LIMIT_EXCEEDED', { message: `An organisation may have at most ${MAX_PENDING_INVITATIONS} invitations waiting.` })
      }
      const row: InvitationRow = {
        id: randomUUID(),
        organization_id: organizationId,
        email,
        roles: input.roles.join(' '),
        token_hash: hashOneTimeToken(token),
        invited_by: principal.userId,
        // The account that has the address now, if one does: the invitation is for it alone and
        // dies with its sessions (a pending proof, judged where it is used).
        user_id: holder?.id ?? null,
        credential_epoch: holder ? await credentialEpochOf(trx, holder.id) : 0,
        created_at: now,
        expires_at: now + INVITATION_TTL_MS,
        used_at: null,
      }
      await invitationStore.insert(trx, row)
      const inviter = (await users.findById(trx, principal.userId))!
      const message = invitationMail(this.deps.brand, email, `${this.deps.acceptUrl}${encodeURIComponent(token)}`, token, { organization: organization.name, inviter: nameOf(inviter) })
      await this.deps.mailQueue.enqueue(trx, { userId: holder?.id ?? null, kind: 'invitation', message })
      await auditOrganization(trx, this.deps.clock, 'organization.invitation_created', organizationId, principal.userId, context)
      return row
    })
    this.deps.mailQueue.kick()
    return invitationView(invitation)
  }

  /**
   * At most INVITATION_MAILS_PER_HOUR an hour per organisation, and INVITATION_MAILS_PER_ADDRESS_PER_HOUR
   * of them to one address, counted from the table under the organisation's lock (so exactly, on
   * every instance); the answer says when the next may go. The address's own mail limit
   * (RATE_LIMIT_MAIL_PER_ADDRESS) is left alone: it guards the account's verification and reset
   * mails, and an inviter must not be able to use it up.
   */
  private async assertMailBudget(trx: Executor, organizationId: string, email: string, now: number): Promise<void> {
    const made = await invitationStore.madeSince(trx, organizationId, now - HOUR)
    const toAddress = made.filter((row) => row.email === email)
    const [limit, rows] = made.length >= INVITATION_MAILS_PER_HOUR ? [INVITATION_MAILS_PER_HOUR, made] : toAddress.length >= INVITATION_MAILS_PER_ADDRESS_PER_HOUR ? [INVITATION_MAILS_PER_ADDRESS_PER_HOUR, toAddress] : [0, []]
    if (limit === 0) return
    // The hour ends for the oldest of the last `limit` mails: then one more may go.
    const retryAfter = Math.max(1, Math.ceil((rows[rows.length - limit]!.created_at + HOUR - now) / 1000))
    throw new AppError('RATE_LIMITED', {
      message: limit === INVITATION_MAILS_PER_HOUR ? `An organisation may send at most ${INVITATION_MAILS_PER_HOUR} invitations an hour.` : `An organisation may send at most ${INVITATION_MAILS_PER_ADDRESS_PER_HOUR} invitations an hour to one address.`,
      headers: { 'retry-after': String(retryAfter), 'ratelimit-limit': String(limit), 'ratelimit-remaining': '0', 'ratelimit-reset': String(retryAfter) },
    })
  }

  /** The invitations waiting (`members:invite`), oldest first. */
  async list(principal: Principal, organizationId: string): Promise<{ invitations: InvitationView[] }> {
    await this.deps.organizations.require(this.db, organizationId, principal.userId, 'members:invite')
    return { invitations: (await invitationStore.listPending(this.db, organizationId, this.deps.clock.now())).map(invitationView) }
  }

  /** Withdraws one (`members:invite`): its link stops working. */
  async revoke(principal: Principal, organizationId: string, invitationId: string, context: RequestContext): Promise<{ id: string; revoked: true }> {
    const { organizations } = this.deps
    return organizations.change(async (trx) => {
      await organizations.lock(trx, organizationId)
      await organizations.require(trx, organizationId, principal.userId, 'members:invite')
      const now = this.deps.clock.now()
      const pending = isUuid(invitationId) ? (await invitationStore.listPending(trx, organizationId, now)).find((row) => row.id === invitationId) : undefined
      if (!pending || !(await invitationStore.spend(trx, pending.id, now))) throw new AppError('NOT_FOUND')
      await auditOrganization(trx, this.deps.clock, 'organization.invitation_revoked', organizationId, principal.userId, context)
      return { id: invitationId, revoked: true as const }
    })
  }

  private pending(token: string): Promise<InvitationRow | null> {
    return invitationStore.findPending(this.db, hashOneTimeToken(token), this.deps.clock.now())
  }

  /**
   * Whether `user` is the account the invitation is for: its confirmed address is the invited one,
   * it is active, and, where the address had an account when invited, it is that account.
   */
  private isFor(invitation: InvitationRow, user: UserRow): boolean {
    return user.email === invitation.email && user.email_verified_at !== null && user.status === 'active' && (invitation.user_id === null || invitation.user_id === user.id)
  }

  /** The API: the caller accepts for their own account; someone else's invitation is FORBIDDEN and stays. */
  async accept(principal: Principal, token: string, context: RequestContext): Promise<{ organization: OrganizationView; roles: string[] }> {
    const invitation = await this.pending(token)
    if (!invitation) throw new AppError('NOT_FOUND', { message: 'This invitation is unknown, used, withdrawn or expired.' })
    const user = await users.findById(this.db, principal.userId)
    if (!user) throw new AppError('INVALID_TOKEN')
    if (!this.isFor(invitation, user)) throw new AppError('FORBIDDEN', { message: 'This invitation is for another address, or for an address not confirmed yet.' })
    const joined = await this.join(invitation, user.id, context)
    if (!joined) throw new AppError('NOT_FOUND', { message: 'This invitation is unknown, used, withdrawn or expired.' })
    return joined
  }

  /** The link's page before anything happens: what it invites to, and by whom; null when it no longer works. Uses nothing up. */
  async preview(token: string): Promise<InvitationPreview | null> {
    const invitation = await this.pending(token)
    if (!invitation) return null
    const organization = await organizationStore.find(this.db, invitation.organization_id)
    if (!organization) return null
    const inviter = invitation.invited_by === null ? null : await users.findById(this.db, invitation.invited_by)
    return { organization: organization.name, inviter: inviter ? nameOf(inviter) : 'A member', email: invitation.email, roles: words(invitation.roles) }
  }

  /**
   * The link's page pressed: no session there, so the link is the proof. It was mailed to the invited
   * address, so whoever holds it reads that mailbox; it adds the confirmed, active account that has
   * that address (the one it was made for, if one had it then). Without such an account nothing is
   * accepted and the invitation stays, for after the account is made or confirmed.
   */
  async acceptByLink(token: string, context: RequestContext): Promise<LinkOutcome> {
    const invitation = await this.pending(token)
    if (!invitation) return { accepted: false, reason: 'dead' }
    const holder = await users.findByEmail(this.db, invitation.email)
    if (!holder || !this.isFor(invitation, holder)) return { accepted: false, reason: 'no_account' }
    try {
      const joined = await this.join(invitation, holder.id, context)
      return joined ? { accepted: true, organization: joined.organization } : { accepted: false, reason: 'dead' }
    } catch (error) {
      // The account changed in between (FORBIDDEN), or joining would break a limit: nothing was accepted.
      if (error instanceof AppError && error.code === 'FORBIDDEN') return { accepted: false, reason: 'no_account' }
      if (error instanceof AppError && error.code === 'LIMIT_EXCEEDED') return { accepted: false, reason: 'limit' }
      throw error
    }
  }

  /**
   * In one transaction under the organisation's lock: the invitation is spent (still pending and
   * standing), judged again against the account as it now is, and against the inviter, who must
   * still be a member able to invite and to grant those roles (an admin removed since, or stripped of
   * a role, leaves no invitation working behind them); then the account joins. Null when the
   * invitation died in between. An account that became a member meanwhile keeps its roles.
   */
  private async join(invitation: InvitationRow, userId: string, context: RequestContext): Promise<{ organization: OrganizationView; roles: string[] } | null> {
    const { organizations } = this.deps
    return organizations.change(async (trx, changes) => {
      const [organization] = await organizationStore.lock(trx, this.deps.db.engine, [invitation.organization_id])
      if (!organization) return null
      const now = this.deps.clock.now()
      if (!(await invitationStore.spend(trx, invitation.id, now))) return null
      // The account under its row lock: its address and state cannot move until this commits.
      const user = (await users.lockRow(trx, userId)) ? await users.findById(trx, userId) : null
      if (!user || !this.isFor(invitation, user)) throw new AppError('FORBIDDEN', { message: 'This invitation is for another address, or for an address not confirmed yet.' })
      if (!(await this.inviterStillGrants(trx, invitation))) {
        // Spent all the same: it can never work again. Committed with nothing else.
        return null
      }
      await auditOrganization(trx, this.deps.clock, 'organization.invitation_accepted', organization.id, user.id, context)
      const member = await membershipStore.find(trx, organization.id, user.id)
      if (member) return { organization: organizationView(organization), roles: words(member.roles) }
      const roles = words(invitation.roles)
      await organizations.addMember(trx, changes, organization.id, user, roles, context)
      return { organization: organizationView(organization), roles }
    })
  }

  private async inviterStillGrants(trx: Executor, invitation: InvitationRow): Promise<boolean> {
    if (invitation.invited_by === null) return false
    try {
      const { permissions } = await this.deps.organizations.require(trx, invitation.organization_id, invitation.invited_by, 'members:invite')
      await assertGrantable(trx, permissions, words(invitation.roles))
      return true
    } catch (error) {
      if (error instanceof AppError) return false
      throw error
    }
  }
}

import type { Generated } from 'kysely'
/**
 * Row types of every table. Times are integer milliseconds since the epoch on both engines
 * (bigint in PostgreSQL, INTEGER in SQLite), so comparisons and the injected clock work alike.
 */
export interface UsersTable {
  id: string
  email: string
  full_name: string
  password_hash: string
  email_verified_at: number | null
  status: 'active' | 'disabled'
  disabled_reason: 'suspended' | 'banned' | null
  created_at: number
  updated_at: number
  last_login_at: number | null
  /** Bumped by every event that ends all the account's sessions; a sign-in opens a session only under the epoch it checked (migration 0013). */
  credential_epoch: number
  /** JSON object set by operators, carried in access tokens; null when unset (migration 0021). */
  app_metadata: string | null
  /** JSON object set by the user; never in a token (migration 0021). */
  user_metadata: string | null
  /** Moves with every change to what the user's tokens claim: an older access token is TOKEN_EXPIRED (docs/authorization.md). */
  claims_version: Generated<number>
}

export interface SessionsTable {
  id: string
  user_id: string
  created_at: number
  last_used_at: number
  expires_at: number
  revoked_at: number | null
  user_agent: string | null
  ip: string | null
  /** RFC 8176 methods, space-separated: `pwd`, `otp`, `hwk`, `user`, `fed`, `mfa`. */
  amr: string
  acr: 'aal1' | 'aal2'
  /** When the session was last verified (login, a second factor, step-up); null: at creation. */
  auth_time: number | null
  /** The app it signed in to through Portcullis as an OpenID provider, by its name then (migration 0014). */
  client_name: string | null
  /** The active organisation: its claims go into the session's access tokens (migration 0021). */
  organization_id: string | null
}

export type OneTimeTokenPurpose = 'verify_email' | 'reset_password'

export interface OneTimeTokensTable {
  token_hash: string
  user_id: string
  purpose: OneTimeTokenPurpose
  /** The account's credential_epoch when it was made: judged at the point of use (src/auth/pending-proofs.ts, migration 0019). */
  credential_epoch: number
  created_at: number
  expires_at: number
  used_at: number | null
}

export interface SigningKeysTable {
  kid: string
  alg: string
  public_jwk: string
  private_jwk: string
  created_at: number
}

export interface WatchlistsTable {
  id: string
  /** The user who made it; for an organisation's list, its maker (the organisation owns it). */
  user_id: string
  /** Null for a user's own list; else the organisation that owns it (migration 0021). */
  organization_id: string | null
  position: number
  name: string
  symbols: string
  created_at: number
  updated_at: number
}

export interface SecretsTable {
  name: string
  value: string
  created_at: number
}

export type AuthChangeKind = 'session_revoked' | 'user_changed'

export interface AuthChangesTable {
  id: string
  kind: AuthChangeKind
  user_id: string
  session_id: string | null
  created_at: number
}

export type ChangeKind = 'session_revoked' | 'user_changed' | 'api_key_revoked' | 'grant_revoked' | 'roles_changed'

/** Numbered and stamped by the database (column defaults), never by an instance's clock. */
export interface ChangeFeedTable {
  seq: Generated<number>
  at: Generated<number>
  kind: ChangeKind
  user_id: string | null
  target_id: string | null
}

export interface AuditEventsTable {
  id: string
  at: number
  user_id: string | null
  type: string
  reason: string | null
  ip: string | null
  user_agent: string | null
  request_id: string | null
  /** Who acted when it was not the user: `api_key:<id>` or `cli`; null for the user's own actions. */
  actor: string | null
}

export interface ApiKeysTable {
  id: string
  name: string
  /** Comma-separated: users:read, users:write, audit:read. */
  scopes: string
  /** HMAC-SHA256 of the secret part under a service secret (base64url). */
  secret_hash: string
  created_at: number
  expires_at: number | null
  revoked_at: number | null
  last_used_at: number | null
}

export type MailKind = 'verification' | 'password_reset' | 'security_notice' | 'sign_in_code' | 'email_change' | 'invitation'

/**
 * The columns every durable queue's table has (src/queue/table.ts): the lease, the attempts and the
 * outcome. `sent_at` is when the receiver took the row.
 */
export interface DurableQueueColumns {
  created_at: number
  attempts: Generated<number>
  next_attempt_at: number
  lease_owner: string | null
  lease_until: number | null
  sent_at: number | null
  failed_at: number | null
  last_error: string | null
}

export interface MailOutboxTable extends DurableQueueColumns {
  id: string
  user_id: string | null
  kind: MailKind
  recipient: string
  subject: string
  body_text: string
  body_html: string
}

export type FactorType = 'totp' | 'passkey'

export interface MfaFactorsTable {
  id: string
  user_id: string
  type: FactorType
  name: string
  /** TOTP: the base32 secret, sealed under KEY_ENCRYPTION_KEY. */
  secret: string | null
  /** TOTP: the last 30-second step accepted; that step and every earlier one are refused. */
  last_step: number | null
  /** An enrolment: the account's credential_epoch and the session that started it, judged when it is confirmed (migration 0019). */
  credential_epoch: number
  session_id: string | null
  created_at: number
  /** Null until the enrolment is confirmed with a valid code; only confirmed factors count. */
  confirmed_at: number | null
  last_used_at: number | null
  /** Passkey: the credential id (base64url), unique across accounts. */
  credential_id: string | null
  /** Passkey: the COSE public key (base64url). */
  public_key: string | null
  /** Passkey: the last signature counter seen; one that goes backwards is refused (0 stays 0 for synced passkeys). */
  sign_count: number | null
  /** Passkey: the transports the authenticator named, space-separated. */
  transports: string | null
  /** Passkey: backup eligibility and state (1 or 0), as the authenticator data's BE and BS flags said. */
  backup_eligible: number | null
  backed_up: number | null
  aaguid: string | null
}

export interface MfaRecoveryCodesTable {
  /** HMAC-SHA256 of the normalised code under a sealed service secret. */
  code_hash: string
  user_id: string
  created_at: number
  used_at: number | null
}

export interface MfaChallengesTable {
  /** HMAC-SHA256 of the mfa_token. */
  token_hash: string
  user_id: string
  /** The first step's methods, space-separated (`pwd`, or `fed`). */
  amr: string
  transport: 'body' | 'cookie'
  failures: Generated<number>
  /** The account's credential_epoch when the first step was checked. */
  credential_epoch: number
  created_at: number
  expires_at: number
  used_at: number | null
}

export type CeremonyPurpose = 'register' | 'login' | 'second_factor' | 'step_up'

export interface WebauthnChallengesTable {
  id: string
  /** HMAC-SHA256 of the challenge. */
  challenge_hash: string
  purpose: CeremonyPurpose
  /** The account the ceremony is for; null for a passwordless login (the credential names it). */
  user_id: string | null
  /** The mfa_token's hash (second_factor) or the session id (register, step_up). */
  binding: string | null
  /** The account's credential_epoch when it was made: judged at the point of use (src/auth/pending-proofs.ts, migration 0019). */
  credential_epoch: number
  /** The session that asked for it, if one did: it must still be live at the point of use (migration 0019). */
  session_id: string | null
  created_at: number
  expires_at: number
  used_at: number | null
}

export interface UserIdentitiesTable {
  id: string
  user_id: string
  /** The configured provider's name (OIDC_PROVIDERS). */
  provider: string
  /** The provider's `sub` for this person. */
  subject: string
  email: string | null
  created_at: number
  last_used_at: number | null
}

export interface OidcFlowsTable {
  /** HMAC-SHA256 of the state parameter. */
  state_hash: string
  provider: string
  /** HMAC-SHA256 of the portcullis_oidc cookie of the browser that started the flow. */
  browser_hash: string
  nonce: string
  /** The PKCE verifier, sealed under KEY_ENCRYPTION_KEY. */
  code_verifier: string
  redirect_to: string
  purpose: 'login' | 'link'
  user_id: string | null
  /** The application's RFC 7636 S256 code_challenge, when it sent one at start. */
  code_challenge: string | null
  /** A link flow: the session that started it (the link completes only while it is live). */
  session_id: string | null
  /** The account's credential_epoch when it was made: judged at the point of use (src/auth/pending-proofs.ts, migration 0019). */
  credential_epoch: number
  created_at: number
  expires_at: number
  used_at: number | null
}

/** The one-time login codes a sign-in ending in the browser hands to the application (migration 0015). */
export interface LoginCodesTable {
  /** HMAC-SHA256 of the one-time login code. */
  code_hash: string
  user_id: string
  /** What issued it: `oidc:{provider}`, `email`. */
  source: string
  /** The account's credential_epoch when the sign-in chose the account. */
  credential_epoch: number
  /** The application's S256 code_challenge: the exchange must send its verifier. */
  code_challenge: string | null
  /** Without a challenge: the starting browser's cookie hash, which the exchange must present. */
  browser_hash: string | null
  created_at: number
  expires_at: number
  used_at: number | null
}

/** A client an operator registered with the OpenID provider (src/provider/). */
export interface OpClientsTable {
  client_id: string
  /** Its registration as JSON, without the secret. */
  metadata: string
  /** The client secret, sealed under KEY_ENCRYPTION_KEY; null for a public client. */
  secret: string | null
  created_at: number
  updated_at: number
  /** 1 for a client that registered itself (RFC 7591), removed after 30 days unused (migration 0024). */
  dynamic: Generated<number>
  /** The last token issued to it, to the hour; null until the first. */
  last_used_at: number | null
}

/** The operators' console's sessions (migration 0025): the cookie's SHA-256, never the cookie. */
export interface ConsoleSessionsTable {
  id_hash: string
  user_id: string
  credential_epoch: number
  grant_ref: string
  created_at: number
  last_seen_at: number
  expires_at: number
}

/** Initial access tokens for dynamic registration (OP_REGISTRATION=token), as SHA-256 hashes (migration 0024). */
export interface RegistrationTokensTable {
  token_hash: string
  created_at: number
  expires_at: number
  used_at: number | null
}

/** What the OpenID provider library stores: identifiers as keyed hashes, payloads sealed (migration 0014). */
export interface OpRecordsTable {
  /** The library's model name: Grant, Session, AuthorizationCode, RefreshToken, DeviceCode, ... */
  model: string
  id_hash: string
  grant_hash: string | null
  uid_hash: string | null
  user_code_hash: string | null
  user_id: string | null
  client_id: string | null
  /** The Portcullis session a provider Session is. */
  session_id: string | null
  payload: string
  /** A rotated refresh token's successor, sealed, for the retry window. */
  successor: string | null
  /** A provider session's clients and their sids, JSON `[[client_id, sid], ...]`, for Back-Channel Logout. */
  sids: string | null
  created_at: number
  last_used_at: number | null
  expires_at: number
  consumed_at: number | null
}

/** The durable queue of Back-Channel Logout notices (migration 0014). */
export interface OpLogoutDeliveriesTable extends DurableQueueColumns {
  id: string
  client_id: string
  subject: string
  sid: string
}

/** A sign-in by e-mailed code or link (migration 0016). */
export interface EmailSignInsTable {
  id: string
  /** The normalised address the mail went to. */
  email: string
  /** Null for an address with no account yet (EMAIL_SIGNUP): the account is made on success. */
  user_id: string | null
  /** HMAC of the 6-digit code, bound to this row. */
  code_hash: string
  /** The code sealed under KEY_ENCRYPTION_KEY: shown on the link's page on a device with no binding. */
  code_sealed: string
  /** HMAC of the link's token. */
  token_hash: string
  failures: Generated<number>
  redirect_to: string | null
  code_challenge: string | null
  browser_hash: string | null
  credential_epoch: number
  created_at: number
  expires_at: number
  used_at: number | null
}

/** A change of address waiting for its link to be used (migration 0017). */
export interface EmailChangesTable {
  /** SHA-256 of the mailed link's token. */
  token_hash: string
  user_id: string
  /** The normalised address the account moves to. */
  new_email: string
  /** The session that asked: kept when the change happens, every other one ends. */
  session_id: string
  /** The account's credential_epoch when it was made: judged at the point of use (src/auth/pending-proofs.ts, migration 0019). */
  credential_epoch: number
  /** SHA-256 of the token in the notice to the old address, whose link cancels the change (null before migration 0019). */
  cancel_hash: string | null
  created_at: number
  expires_at: number
  used_at: number | null
}

/** An operator's webhook endpoint (migration 0018). */
export interface WebhookEndpointsTable {
  id: string
  url: string
  /** Space-separated event types, or `*`. */
  events: string
  description: string | null
  enabled: number
  /** The signing secret (`whsec_...`), sealed under KEY_ENCRYPTION_KEY. */
  secret: string
  previous_secret: string | null
  previous_secret_until: number | null
  failing_since: number | null
  disabled_reason: string | null
  created_at: number
  updated_at: number
}

/** One event for one endpoint: the outbox row and its delivery (migration 0018). */
export interface WebhookDeliveriesTable extends DurableQueueColumns {
  id: string
  /** The event's webhook-id: the same on every attempt and for every endpoint. */
  event_id: string
  endpoint_id: string
  user_id: string
  sequence: number
  type: string
  /** The body sent; emptied a week after the outcome. */
  payload: string | null
  last_status: number | null
}

export interface WebhookSequencesTable {
  user_id: string
  last: number
}

/** The roles catalogue (migration 0021); `permissions` space-separated. */
export interface RolesTable {
  name: string
  description: string | null
  permissions: string
  builtin: number
  created_at: number
  updated_at: number
}

/** An API registered as a resource of the provider (migration 0023); `scopes` a JSON array of {name, description}. */
export interface ResourcesTable {
  id: string
  uri: string
  name: string
  scopes: string
  created_at: number
  updated_at: number
}

export interface UserRolesTable {
  user_id: string
  role: string
  created_at: number
}

export interface OrganizationsTable {
  id: string
  name: string
  created_at: number
  updated_at: number
}

/** A member's roles in one organisation, space-separated. */
export interface MembershipsTable {
  organization_id: string
  user_id: string
  roles: string
  joined_at: number
}

/** A mailed single-use invitation: a pending proof (src/auth/pending-proofs.ts). */
export interface InvitationsTable {
  id: string
  organization_id: string
  email: string
  roles: string
  token_hash: string
  invited_by: string | null
  /** The account that had the address when it was invited, if any; its epoch is judged at acceptance. */
  user_id: string | null
  credential_epoch: number
  created_at: number
  expires_at: number
  used_at: number | null
}

export interface Database {
  users: UsersTable
  sessions: SessionsTable
  one_time_tokens: OneTimeTokensTable
  signing_keys: SigningKeysTable
  watchlists: WatchlistsTable
  secrets: SecretsTable
  auth_changes: AuthChangesTable
  change_feed: ChangeFeedTable
  audit_events: AuditEventsTable
  mail_outbox: MailOutboxTable
  api_keys: ApiKeysTable
  mfa_factors: MfaFactorsTable
  mfa_recovery_codes: MfaRecoveryCodesTable
  mfa_challenges: MfaChallengesTable
  webauthn_challenges: WebauthnChallengesTable
  user_identities: UserIdentitiesTable
  oidc_flows: OidcFlowsTable
  login_codes: LoginCodesTable
  op_clients: OpClientsTable
  op_records: OpRecordsTable
  resources: ResourcesTable
  registration_tokens: RegistrationTokensTable
  console_sessions: ConsoleSessionsTable
  op_logout_deliveries: OpLogoutDeliveriesTable
  email_sign_ins: EmailSignInsTable
  email_changes: EmailChangesTable
  webhook_endpoints: WebhookEndpointsTable
  webhook_deliveries: WebhookDeliveriesTable
  webhook_sequences: WebhookSequencesTable
  roles: RolesTable
  user_roles: UserRolesTable
  organizations: OrganizationsTable
  memberships: MembershipsTable
  invitations: InvitationsTable
}

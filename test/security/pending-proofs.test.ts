import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { decodeJwt } from 'jose'
import { sql } from 'kysely'
import { PENDING_PROOFS, type ProofTable } from '../../src/auth/pending-proofs.ts'
import { ENGINES, type EngineName } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { mailText, signInCodeFromMail, tokenFromMail, type ReceivedMail } from '../helpers/mail.ts'
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.ts'
import { oathtool } from '../helpers/totp.ts'
import { SoftAuthenticator, type CreationOptionsJSON } from '../helpers/webauthn.ts'

// The registry test of pending proofs (docs/SECURITY.md, "Pending proofs die with the account's
// sessions"; shared/API.md, "Changing the address" and "Second factors"). A pending proof is anything
// mailed, shown or handed over that later opens a session, changes the account or adds a way in.
// Every one records the account's credential epoch (and the session that asked, if one did) and is
// judged against them where it is used (src/auth/pending-proofs.ts).
//
// Part 1 reads the tables from the database itself and fails when a table shaped like a pending proof
// is neither in PENDING_PROOFS nor an exception below, so the next feature cannot forget to register
// its proofs. Part 2 makes each kind of proof through the real API on a fresh account, fires each
// event that ends all of the account's sessions, uses the proof through the real API and asserts the
// documented refusal; a control per kind shows the same use succeeding when nothing happened.
//
// The app runs with REQUIRE_EMAIL_VERIFICATION=false (shared/API.md, "Accounts"), so that an account
// with a verification link still pending can sign in, and so have its sessions end by logout-all or a
// password change: with verification required, those two events could not happen to it at all.
const PUBLIC_URL = 'http://localhost:4000'
/** The page origin passkey ceremonies come from: PUBLIC_URL's (RP ID `localhost`). */
const ORIGIN = PUBLIC_URL
const APP = 'https://app.example.com'
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/test/callback`
const FORM = 'application/x-www-form-urlencoded'

/** What makes a table look like a pending proof: it names an account and records the moment it was spent. */
const SPENT_COLUMNS = ['used_at', 'consumed_at', 'confirmed_at']

/**
 * Tables shaped like a pending proof that are not one, each with why. Adding a table here needs a
 * reason as good as these.
 */
const NOT_PENDING_PROOFS: Record<string, string> = {
  mfa_recovery_codes:
    'a standing second factor the user keeps, not a pending proof: alone it opens nothing (it is the second step after a first one, whose mfa_token is registered, or a step-up in a live session), and the account\'s sessions ending must not take away the way back in after a lost device',
  op_records:
    'the OpenID provider library\'s storage (src/provider/adapter.ts): its authorization codes and device codes hang on the account\'s grants, and every event that ends all of the account\'s sessions deletes all of them with the grants (endProviderGrants, src/provider/logouts.ts). test/provider/provider.test.ts test 18 shows the grants, tokens and browser session ending with logout-all and a disable; it does not redeem a code or a device code made before the event',
}

const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined

/** Every table of the database and its columns, read from the database itself (not from src/db/schema.ts). */
async function tablesOf(t: TestApp, engine: EngineName): Promise<Map<string, Set<string>>> {
  const db = t.app.services.db.kysely
  const rows =
    engine === 'sqlite'
      ? (await sql<{ table_name: string; column_name: string }>`select m.name as table_name, p.name as column_name from sqlite_master m join pragma_table_info(m.name) p where m.type = 'table'`.execute(db)).rows
      : (await sql<{ table_name: string; column_name: string }>`select c.table_name, c.column_name from information_schema.columns c join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name where c.table_schema = 'public' and t.table_type = 'BASE TABLE'`.execute(db)).rows
  const tables = new Map<string, Set<string>>()
  for (const row of rows) tables.set(row.table_name, (tables.get(row.table_name) ?? new Set()).add(row.column_name))
  return tables
}

const shapedLikeAProof = (columns: Set<string>) => columns.has('user_id') && SPENT_COLUMNS.some((column) => columns.has(column))

// ---- Part 2's shapes -----------------------------------------------------------------------------

/** A fresh account of one scenario, and the session it asks for its proof in. */
interface Account {
  email: string
  userId: string
  /** Its password now (a reset or a change moves it). */
  password: string
  /** The account's session: the one that asks for the proof. */
  access: string
  /** The TOTP secret of an account with MFA. */
  secret?: string
}

/** A proof made and not yet used. */
interface Pending {
  /** Uses it through the API (in the session `bearer` where one is needed) and asserts the documented refusal, and that nothing changed. */
  refused(bearer: () => Promise<string>, why: string): Promise<void>
  /** Uses it the same way and asserts it works. */
  accepted(bearer: () => Promise<string>): Promise<void>
}

interface Kind {
  /** The table its rows live in (PENDING_PROOFS). */
  table: ProofTable
  /** What the proof is, for the test names. */
  what: string
  /** The documented refusal, for the test names. */
  refusal: string
  /** A fresh account fit for this kind. */
  account(): Promise<Account>
  /** Makes the proof through the real API, as the account's session would. */
  make(account: Account): Promise<Pending>
  /** Events that cannot happen to this kind in a way that shows anything, each with why. */
  skip?: Partial<Record<EndingName, string>>
}

type EndingName = 'logout-all' | 'reset' | 'disable' | 'change'

interface Ending {
  name: EndingName
  what: string
  /**
   * Fires the event on the account; answers the session to use the proof in afterwards: a freshly
   * signed-in one, or the session that asked where it survives (a password change in it; a disable,
   * whose enable restores it).
   */
  fire(account: Account): Promise<() => Promise<string>>
}

for (const engine of ENGINES) {
  describe(`security: pending proofs die with the account's sessions, on ${engine}`, () => {
    let provider: TestProvider
    let t: TestApp
    let adminKey: string
    before(async () => {
      provider = await startTestProvider({ redirectUris: [CALLBACK] })
      t = await startTestApp(engine, {
        env: {
          PUBLIC_URL,
          APP_URL: `${APP}/`,
          CORS_ORIGINS: APP,
          OIDC_PROVIDERS: 'test',
          OIDC_TEST_ISSUER: provider.issuer,
          OIDC_TEST_CLIENT_ID: provider.clientId,
          OIDC_TEST_CLIENT_SECRET: provider.clientSecret,
          REQUIRE_EMAIL_VERIFICATION: 'false',
        },
      })
      adminKey = (await t.app.services.apiKeys.create({ name: 'pending proofs', scopes: ['users:write'], expiresAt: null })).key
    })
    after(async () => {
      await t?.close()
      await provider?.close()
    })

    // ---- Part 1: discovery ------------------------------------------------------------------------

    test('discovery: every table with a user_id and a used_at, consumed_at or confirmed_at column is in PENDING_PROOFS or a listed exception with its reason', async () => {
      const tables = await tablesOf(t, engine)
      assert.ok(tables.has('users') && tables.has('sessions'), `the catalogue was read: ${[...tables.keys()].join(', ')}`)
      const shaped = [...tables].filter(([, columns]) => shapedLikeAProof(columns)).map(([name]) => name).sort()
      const unregistered = shaped.filter((name) => !(name in PENDING_PROOFS) && !(name in NOT_PENDING_PROOFS))
      assert.deepEqual(unregistered, [], 'a table holds pending proofs that no one judges: add it to PENDING_PROOFS (src/auth/pending-proofs.ts), judge its rows with proofStands where they are used, and give it a scenario below')
      // The list of exceptions does not rot: each is still a table shaped like a proof.
      for (const [name, reason] of Object.entries(NOT_PENDING_PROOFS)) {
        assert.ok(reason.length > 0)
        assert.ok(shaped.includes(name), `${name} is listed as an exception but is not (or no longer) shaped like a pending proof`)
        assert.ok(!(name in PENDING_PROOFS), `${name} is both registered and an exception`)
      }
    })

    test('discovery: every PENDING_PROOFS table exists with user_id and credential_epoch columns, and session_id where it is a session\'s', async () => {
      const tables = await tablesOf(t, engine)
      for (const [name, { session }] of Object.entries(PENDING_PROOFS)) {
        const columns = tables.get(name)
        assert.ok(columns, `${name} is registered but is not a table`)
        for (const column of ['user_id', 'credential_epoch', ...(session ? ['session_id'] : [])]) assert.ok(columns.has(column), `${name}.${column}`)
      }
    })

    test('every PENDING_PROOFS table has a death scenario in this file', () => {
      assert.deepEqual([...new Set(kinds.map((kind) => kind.table))].sort(), Object.keys(PENDING_PROOFS).sort())
    })

    // ---- Helpers ---------------------------------------------------------------------------------

    /** The next mail to `email` with this subject, passing over others (notices) before it. */
    const mailTo = async (email: string, subject: string): Promise<ReceivedMail> => {
      for (;;) {
        const mail = await t.mail.next(email)
        if (mailText(mail).includes(`Subject: ${subject}`)) return mail
      }
    }
    const login = (email: string, password: string) => t.post('/auth/login', { email, password })
    const admin = (path: string, body?: unknown) =>
      t.app.inject({ method: 'POST', url: `${t.base}${path}`, headers: { authorization: `Bearer ${adminKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) })
    /** A new session of the account, as its owner signs in now (with the second factor, at a step not used before). */
    const signIn = async (account: Account): Promise<string> => {
      const response = await login(account.email, account.password)
      if (response.statusCode === 200) return response.json().data.access_token as string
      assert.equal(code(response), 'MFA_REQUIRED', response.body)
      t.clock.advance(30)
      const done = await t.post('/auth/mfa/verify', { mfa_token: response.json().error.mfa.mfa_token, method: 'totp', code: oathtool(account.secret!, t.clock.now()) })
      assert.equal(done.statusCode, 200, done.body)
      return done.json().data.access_token as string
    }
    const verified = async (prefix: string): Promise<Account> => {
      const user = await registerVerifyLogin(t, uniqueEmail(prefix))
      return { email: user.email, userId: user.userId, password: PASSWORD, access: user.access_token }
    }
    const identitiesOf = async (access: string) => (await t.get('/auth/me/identities', access)).json().data.identities as unknown[]
    const factorsOf = async (access: string) => (await t.get('/auth/mfa', access)).json().data.factors as { type: string }[]
    const pkce = () => {
      const verifier = randomBytes(32).toString('base64url')
      return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') }
    }
    const signedInAs = (response: LightMyRequestResponse, account: Account) => {
      assert.equal(response.statusCode, 200, response.body)
      assert.equal(decodeJwt(response.json().data.access_token).sub, account.userId)
    }
    const refusedAs = (response: LightMyRequestResponse, status: number, errorCode: string, why: string) => {
      assert.equal(response.statusCode, status, `${why}: ${response.body}`)
      assert.equal(code(response), errorCode, why)
    }

    // ---- The events that end all of an account's sessions -----------------------------------------

    const endings: Ending[] = [
      {
        name: 'logout-all',
        what: 'logout-all',
        async fire(account) {
          const all = await t.post('/auth/logout-all', undefined, account.access)
          assert.equal(all.statusCode, 200, all.body)
          return () => signIn(account)
        },
      },
      {
        name: 'reset',
        what: 'a password reset through the mailed link',
        async fire(account) {
          assert.equal((await t.post('/auth/forgot-password', { email: account.email })).statusCode, 202)
          const token = tokenFromMail(await mailTo(account.email, 'Reset your password'))
          const reset = await t.post('/auth/reset-password', { token, password: 'a passphrase after the reset' })
          assert.equal(reset.statusCode, 200, reset.body)
          account.password = 'a passphrase after the reset'
          return () => signIn(account)
        },
      },
      {
        name: 'disable',
        what: 'an operator\'s disable and enable (admin API), which restores the session that asked, so that only the epoch keeps it dead',
        async fire(account) {
          const disabled = await admin(`/admin/users/${account.userId}/disable`, { reason: 'suspended' })
          assert.equal(disabled.statusCode, 200, disabled.body)
          const enabled = await admin(`/admin/users/${account.userId}/enable`)
          assert.equal(enabled.statusCode, 200, enabled.body)
          // Back as it was (active, or unverified for an account whose address is not), and a disable
          // revokes no session: the enable restores the one that asked (docs/sessions.md). The proof
          // is used from it, so nothing but the epoch is left to refuse it.
          assert.notEqual(enabled.json().data.user.status, 'disabled')
          assert.equal((await t.get('/auth/me', account.access)).statusCode, 200, 'the enable restored the session that asked')
          return async () => account.access
        },
      },
      {
        name: 'change',
        what: 'a password change in the account\'s own session (the one that asked), which survives it',
        async fire(account) {
          const changed = await t.post('/auth/change-password', { current_password: account.password, new_password: 'a passphrase after the change' }, account.access)
          assert.equal(changed.statusCode, 200, changed.body)
          account.password = 'a passphrase after the change'
          // The session that asked lives on: only the epoch can tell its proof from a new one.
          assert.equal((await t.get('/auth/me', account.access)).statusCode, 200, 'the changing session survives')
          return async () => account.access
        },
      },
    ]

    // ---- The kinds of pending proof ----------------------------------------------------------------

    const kinds: Kind[] = [
      {
        table: 'one_time_tokens',
        what: 'an e-mail verification link',
        refusal: '400 INVALID_VERIFICATION_TOKEN',
        async account() {
          // Registered and signed in, the address not verified yet (REQUIRE_EMAIL_VERIFICATION=false).
          const email = uniqueEmail('verify')
          const registered = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Test User' })
          assert.equal(registered.statusCode, 201, registered.body)
          const session = await login(email, PASSWORD)
          assert.equal(session.statusCode, 200, session.body)
          return { email, userId: registered.json().data.user_id, password: PASSWORD, access: session.json().data.access_token }
        },
        async make(account) {
          assert.equal((await t.post('/auth/resend-verification', { email: account.email })).statusCode, 202)
          const token = tokenFromMail(await mailTo(account.email, 'Verify your e-mail address'))
          const use = () => t.post('/auth/verify-email', { token })
          return {
            async refused(_bearer, why) {
              refusedAs(await use(), 400, 'INVALID_VERIFICATION_TOKEN', why)
            },
            async accepted() {
              const used = await use()
              assert.equal(used.statusCode, 200, used.body)
              assert.deepEqual(used.json().data, { email: account.email, verified: true })
            },
          }
        },
      },
      {
        table: 'one_time_tokens',
        what: 'a password reset link',
        refusal: '400 INVALID_RESET_TOKEN, the password unchanged',
        account: () => verified('reset'),
        skip: {
          // Asking for a second reset link retires the first (one live reset link per account,
          // src/auth/one-time-tokens.ts), so the proof is dead before the event happens: this
          // combination could not fail if the epoch were not judged, and so proves nothing.
          reset: 'a second reset link retires the first before the reset happens, so this combination cannot show the epoch',
        },
        async make(account) {
          assert.equal((await t.post('/auth/forgot-password', { email: account.email })).statusCode, 202)
          const token = tokenFromMail(await mailTo(account.email, 'Reset your password'))
          const use = () => t.post('/auth/reset-password', { token, password: 'a passphrase from the old link' })
          return {
            async refused(_bearer, why) {
              refusedAs(await use(), 400, 'INVALID_RESET_TOKEN', why)
              refusedAs(await login(account.email, 'a passphrase from the old link'), 401, 'INVALID_CREDENTIALS', `${why}: the link set no password`)
            },
            async accepted() {
              const used = await use()
              assert.equal(used.statusCode, 200, used.body)
              assert.equal((await login(account.email, 'a passphrase from the old link')).statusCode, 200)
            },
          }
        },
      },
      {
        table: 'mfa_challenges',
        what: 'an mfa_token',
        refusal: '401 INVALID_MFA_TOKEN with the right code',
        async account() {
          // An account with an authenticator app; its session is recent (the confirmation made it so).
          const account = await verified('mfa')
          const started = await t.post('/auth/mfa/totp', undefined, account.access)
          assert.equal(started.statusCode, 201, started.body)
          const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
          const confirmed = await t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, account.access)
          assert.equal(confirmed.statusCode, 200, confirmed.body)
          return { ...account, secret }
        },
        async make(account) {
          const first = await login(account.email, account.password)
          assert.equal(code(first), 'MFA_REQUIRED', first.body)
          const mfaToken = first.json().error.mfa.mfa_token as string
          const use = () => {
            // A step not used before: only the mfa_token can be what is refused.
            t.clock.advance(30)
            return t.post('/auth/mfa/verify', { mfa_token: mfaToken, method: 'totp', code: oathtool(account.secret!, t.clock.now()) })
          }
          return {
            async refused(_bearer, why) {
              refusedAs(await use(), 401, 'INVALID_MFA_TOKEN', why)
            },
            async accepted() {
              signedInAs(await use(), account)
            },
          }
        },
      },
      {
        table: 'webauthn_challenges',
        what: 'a passkey registration challenge',
        refusal: '400 VALIDATION_ERROR on the challenge, no passkey enrolled',
        account: () => verified('passkey'),
        async make(account) {
          const asked = await t.post('/auth/passkeys/register/options', undefined, account.access)
          assert.equal(asked.statusCode, 200, asked.body)
          const options = asked.json().data.options as CreationOptionsJSON
          const use = (bearer: string) => t.post('/auth/passkeys/register', { credential: new SoftAuthenticator().register(options, { origin: ORIGIN }) }, bearer)
          return {
            async refused(bearer, why) {
              const session = await bearer()
              const used = await use(session)
              refusedAs(used, 400, 'VALIDATION_ERROR', why)
              assert.match(used.json().error.details[0].message, /challenge/, why)
              assert.deepEqual(await factorsOf(session), [], `${why}: no passkey was enrolled`)
            },
            async accepted(bearer) {
              const session = await bearer()
              const used = await use(session)
              assert.equal(used.statusCode, 201, used.body)
              assert.deepEqual((await factorsOf(session)).map((factor) => factor.type), ['passkey'])
            },
          }
        },
      },
      {
        table: 'mfa_factors',
        what: 'a TOTP enrolment not yet confirmed',
        refusal: '404 NOT_FOUND on its confirmation, no factor',
        account: () => verified('enrol'),
        async make(account) {
          const started = await t.post('/auth/mfa/totp', { name: 'Parked' }, account.access)
          assert.equal(started.statusCode, 201, started.body)
          const { factor_id, secret } = started.json().data as { factor_id: string; secret: string }
          const use = (bearer: string) => {
            t.clock.advance(30)
            return t.post(`/auth/mfa/totp/${factor_id}/confirm`, { code: oathtool(secret, t.clock.now()) }, bearer)
          }
          return {
            async refused(bearer, why) {
              const session = await bearer()
              refusedAs(await use(session), 404, 'NOT_FOUND', why)
              assert.deepEqual(await factorsOf(session), [], `${why}: no factor was confirmed`)
            },
            async accepted(bearer) {
              const session = await bearer()
              const used = await use(session)
              assert.equal(used.statusCode, 200, used.body)
              assert.equal(used.json().data.factor.id, factor_id)
            },
          }
        },
      },
      {
        table: 'oidc_flows',
        what: 'an identity-provider link flow',
        refusal: 'its callback redirects with error=access_denied and links nothing',
        account: () => verified('link'),
        async make(account) {
          const linking = await t.post('/auth/oidc/test/link', { redirect_to: `${APP}/settings` }, account.access)
          assert.equal(linking.statusCode, 200, linking.body)
          const browser = /portcullis_oidc=([^;]+)/.exec(String(linking.headers['set-cookie']))![1]!
          const who = { sub: `link-${randomBytes(6).toString('hex')}`, email: uniqueEmail('elsewhere'), email_verified: true, name: 'Ada' }
          provider.addAccount(who)
          // The person signs in at the provider and comes back with the flow's browser.
          const use = async () => {
            const back = new URL(await provider.signIn(linking.json().data.authorization_url, who.sub))
            assert.equal(`${back.origin}${back.pathname}`, CALLBACK)
            const callback = await t.app.inject({ method: 'GET', url: `${back.pathname}${back.search}`, headers: { cookie: `portcullis_oidc=${browser}` } })
            assert.equal(callback.statusCode, 302, callback.body)
            return String(callback.headers.location)
          }
          return {
            async refused(bearer, why) {
              assert.equal(await use(), `${APP}/settings?error=access_denied`, why)
              assert.deepEqual(await identitiesOf(await bearer()), [], `${why}: nothing was linked`)
            },
            async accepted(bearer) {
              assert.equal(await use(), `${APP}/settings?linked=test`)
              assert.equal((await identitiesOf(await bearer())).length, 1)
            },
          }
        },
      },
      {
        table: 'login_codes',
        what: 'a one-time login code from an e-mailed link (with a code_challenge)',
        refusal: '401 INVALID_CREDENTIALS at the exchange',
        account: () => verified('emailed-link'),
        async make(account) {
          const { verifier, challenge } = pkce()
          const started = await t.post('/auth/email/start', { email: account.email, redirect_to: `${APP}/signed-in`, code_challenge: challenge, code_challenge_method: 'S256' })
          assert.equal(started.statusCode, 202, started.body)
          const cookie = /portcullis_email=([^;]+)/.exec(String(started.headers['set-cookie']))![1]!
          const token = /sign-in\/email\?token=([A-Za-z0-9_-]+)/.exec(mailText(await mailTo(account.email, 'Your Portcullis sign-in code')))![1]!
          // The button on the link's page, in the browser that started: back to the app with the login code.
          const pressed = await t.app.inject({ method: 'POST', url: '/sign-in/email', headers: { 'content-type': FORM, 'sec-fetch-site': 'same-origin', cookie: `portcullis_email=${cookie}` }, payload: `token=${token}` })
          assert.equal(pressed.statusCode, 303, pressed.body)
          const loginCode = new URL(String(pressed.headers.location)).searchParams.get('code')
          assert.ok(loginCode, String(pressed.headers.location))
          const use = () => t.post('/auth/email/exchange', { code: loginCode, code_verifier: verifier })
          return {
            async refused(_bearer, why) {
              refusedAs(await use(), 401, 'INVALID_CREDENTIALS', why)
            },
            async accepted() {
              signedInAs(await use(), account)
            },
          }
        },
      },
      {
        table: 'login_codes',
        what: 'a one-time login code from an identity-provider sign-in (with a code_challenge)',
        refusal: '401 INVALID_CREDENTIALS at the exchange',
        async account() {
          // A password account the provider vouches for by its verified address: the first sign-in links it.
          return verified('federated')
        },
        async make(account) {
          const who = { sub: `signin-${randomBytes(6).toString('hex')}`, email: account.email, email_verified: true, name: 'Ada' }
          provider.addAccount(who)
          const { verifier, challenge } = pkce()
          const query = new URLSearchParams({ redirect_to: `${APP}/after-login`, code_challenge: challenge, code_challenge_method: 'S256' })
          const started = await t.app.inject({ method: 'GET', url: `${t.base}/auth/oidc/test/start?${query}` })
          assert.equal(started.statusCode, 302, started.body)
          const browser = /portcullis_oidc=([^;]+)/.exec(String(started.headers['set-cookie']))![1]!
          const returned = new URL(await provider.signIn(String(started.headers.location), who.sub))
          const back = await t.app.inject({ method: 'GET', url: `${returned.pathname}${returned.search}`, headers: { cookie: `portcullis_oidc=${browser}` } })
          assert.equal(back.statusCode, 302, back.body)
          const loginCode = new URL(String(back.headers.location)).searchParams.get('code')
          assert.ok(loginCode, String(back.headers.location))
          const use = () => t.post('/auth/oidc/exchange', { code: loginCode, code_verifier: verifier })
          return {
            async refused(_bearer, why) {
              refusedAs(await use(), 401, 'INVALID_CREDENTIALS', why)
            },
            async accepted() {
              signedInAs(await use(), account)
            },
          }
        },
      },
      {
        table: 'email_sign_ins',
        what: 'an e-mailed sign-in code',
        refusal: '401 INVALID_CREDENTIALS',
        account: () => verified('emailed-code'),
        async make(account) {
          assert.equal((await t.post('/auth/email/start', { email: account.email })).statusCode, 202)
          const signInCode = signInCodeFromMail(await mailTo(account.email, 'Your Portcullis sign-in code'))
          const use = () => t.post('/auth/email/verify', { email: account.email, code: signInCode })
          return {
            async refused(_bearer, why) {
              refusedAs(await use(), 401, 'INVALID_CREDENTIALS', why)
            },
            async accepted() {
              signedInAs(await use(), account)
            },
          }
        },
      },
      {
        table: 'email_changes',
        what: 'a change of address waiting for its link',
        refusal: 'the 400 page of /confirm-email-change, the address unchanged',
        account: () => verified('move'),
        async make(account) {
          const newEmail = uniqueEmail('moved')
          const asked = await t.post('/auth/me/email', { new_email: newEmail, password: account.password }, account.access)
          assert.equal(asked.statusCode, 202, asked.body)
          const token = tokenFromMail(await mailTo(newEmail, 'Confirm your new e-mail address'))
          const use = () => t.app.inject({ method: 'POST', url: '/confirm-email-change', headers: { 'content-type': FORM }, payload: `token=${encodeURIComponent(token)}` })
          const addressOf = async (bearer: string) => (await t.get('/auth/me', bearer)).json().data.email as string
          return {
            async refused(bearer, why) {
              const used = await use()
              assert.equal(used.statusCode, 400, `${why}: ${used.body}`)
              assert.match(String(used.headers['content-type']), /^text\/html/)
              assert.equal(await addressOf(await bearer()), account.email, `${why}: the address did not change`)
              refusedAs(await login(newEmail, account.password), 401, 'INVALID_CREDENTIALS', `${why}: the new address signs nothing in`)
            },
            async accepted(bearer) {
              const used = await use()
              assert.equal(used.statusCode, 200, used.body)
              assert.equal(await addressOf(await bearer()), newEmail)
            },
          }
        },
      },
      {
        table: 'invitations',
        what: 'an invitation to an organisation, mailed to the account\'s address',
        refusal: '404 NOT_FOUND at its acceptance, no membership (and a fresh invitation accepted)',
        account: () => verified('invited'),
        async make(account) {
          const owner = await verified('inviting')
          const created = await t.post('/auth/organizations', { name: 'Pending Proofs' }, owner.access)
          assert.equal(created.statusCode, 201, created.body)
          const organizationId = created.json().data.organization.id as string
          // The owner's membership moved their claims: a session of now to invite from.
          const ownerAccess = await signIn(owner)
          const inviteNow = async () => {
            const invited = await t.post(`/auth/organizations/${organizationId}/invitations`, { email: account.email, roles: ['member'] }, ownerAccess)
            assert.equal(invited.statusCode, 201, invited.body)
            return tokenFromMail(await mailTo(account.email, 'An invitation to an organisation on Portcullis'))
          }
          const token = await inviteNow()
          const use = (bearer: string, invitation = token) => t.post('/auth/invitations/accept', { token: invitation }, bearer)
          const organizationsOf = async (bearer: string) => (await t.get('/auth/organizations', bearer)).json().data.organizations as { id: string }[]
          return {
            async refused(bearer, why) {
              const session = await bearer()
              refusedAs(await use(session), 404, 'NOT_FOUND', why)
              assert.deepEqual(await organizationsOf(session), [], `${why}: no membership`)
              // The account itself is fine: an invitation made after the event is accepted.
              const fresh = await use(session, await inviteNow())
              assert.equal(fresh.statusCode, 200, `${why}: ${fresh.body}`)
            },
            async accepted(bearer) {
              const used = await use(await bearer())
              assert.equal(used.statusCode, 200, used.body)
              assert.equal(used.json().data.organization.id, organizationId)
              assert.deepEqual((await organizationsOf(await signIn(account))).map((o) => o.id), [organizationId])
            },
          }
        },
      },
    ]

    // ---- Part 2: each kind dies with each event, and lives without one ----------------------------

    for (const kind of kinds) {
      test(`control: with no event, ${kind.what} (${kind.table}) is accepted when used`, async () => {
        const account = await kind.account()
        const pending = await kind.make(account)
        await pending.accepted(async () => account.access)
      })
      for (const ending of endings) {
        const name = `${kind.what} (${kind.table}) dies with ${ending.what}: ${kind.refusal}`
        const skipped = kind.skip?.[ending.name]
        if (skipped) {
          test(name, { skip: skipped }, () => {})
          continue
        }
        test(name, async () => {
          const account = await kind.account()
          const pending = await kind.make(account)
          const bearer = await ending.fire(account)
          await pending.refused(bearer, ending.what)
        })
      }
    }
  })
}

import assert from 'node:assert/strict'
import { createHash, randomUUID } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { ENGINES } from '../helpers/db.ts'
import { PASSWORD, registerVerifyLogin, startTestApp, uniqueEmail, type TestApp } from '../helpers/app.ts'
import { linkFromMail, mailParts, mailText, tokenFromMail } from '../helpers/mail.ts'

/**
 * Invitations to an organisation (shared/API.md, "Roles, permissions and organisations";
 * docs/authorization.md): the mailed single-use link and its page (GET shows, POST accepts for the
 * confirmed account with the invited address, or says to make or confirm it first), the API's
 * acceptance (only by that account: FORBIDDEN otherwise, and the invitation stays), withdrawal,
 * replacement, expiry, who may invite whom, the limits (50 waiting, 20 mails an hour per
 * organisation and 3 to one address, the per-IP mail limit), and what an account's deletion does to invitations. That
 * invitations die with the invited account's sessions: test/security/pending-proofs.test.ts.
 */

const PUBLIC_URL = 'http://localhost:4100'
const FORM = 'application/x-www-form-urlencoded'
type Person = { email: string; userId: string; access_token: string; refresh_token: string }

for (const engine of ENGINES) {
  describe(`invitations on ${engine}`, () => {
    let t: TestApp
    before(async () => {
      t = await startTestApp(engine, { env: { PUBLIC_URL, APP_NAME: 'Acme Portal' } })
    })
    after(async () => {
      await t.close()
    })

    const code = (response: LightMyRequestResponse) => response.json().error?.code as string | undefined
    const person = (prefix: string): Promise<Person> => registerVerifyLogin(t, uniqueEmail(prefix))
    /** A call as `p`; an access token made out of date by a change of memberships is refreshed once, as the typed client does. */
    const act = async (p: Person, method: 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT', path: string, body?: unknown) => {
      const first = await t.call(method, path, p.access_token, body)
      if (first.statusCode !== 401 || code(first) !== 'TOKEN_EXPIRED') return first
      const renewed = await t.post('/auth/refresh', { refresh_token: p.refresh_token })
      // A session past its seven days (the tests move the clock): the person signs in again.
      const session = renewed.statusCode === 200 ? renewed : await t.post('/auth/login', { email: p.email, password: PASSWORD })
      assert.equal(session.statusCode, 200, session.body)
      p.access_token = session.json().data.access_token
      if (session.json().data.refresh_token) p.refresh_token = session.json().data.refresh_token
      return t.call(method, path, p.access_token, body)
    }
    const organizationOf = async (owner: Person, name = 'Acme Research') => {
      const created = await act(owner, 'POST', '/auth/organizations', { name })
      assert.equal(created.statusCode, 201, created.body)
      return created.json().data.organization.id as string
    }
    const invite = (by: Person, organizationId: string, email: string, roles = ['member']) => act(by, 'POST', `/auth/organizations/${organizationId}/invitations`, { email, roles })
    /** Invites and returns the link's token, read from the mail. */
    const invited = async (by: Person, organizationId: string, email: string, roles = ['member']) => {
      const response = await invite(by, organizationId, email, roles)
      assert.equal(response.statusCode, 201, response.body)
      return { invitation: response.json().data.invitation, token: tokenFromMail(await t.mail.next(email)) }
    }
    const page = (method: 'GET' | 'POST', token: string, headers: Record<string, string> = {}) =>
      method === 'GET'
        ? t.app.inject({ method, url: `/accept-invitation?token=${encodeURIComponent(token)}` })
        : t.app.inject({ method, url: '/accept-invitation', headers: { 'content-type': FORM, ...headers }, payload: `token=${encodeURIComponent(token)}` })
    const accept = (p: Person, token: string) => act(p, 'POST', '/auth/invitations/accept', { token })
    const rolesIn = async (organizationId: string, userId: string) =>
      (await t.app.services.db.kysely.selectFrom('memberships').select('roles').where('organization_id', '=', organizationId).where('user_id', '=', userId).executeTakeFirst())?.roles ?? null
    const pending = async (owner: Person, organizationId: string) => (await act(owner, 'GET', `/auth/organizations/${organizationId}/invitations`)).json().data.invitations as { id: string; email: string }[]

    test('an invitation mails a single-use link naming the organisation and the inviter, kept only as its hash; the invited account accepts it through the API at once', async () => {
      const owner = await person('inviter')
      const invitee = await person('invitee')
      const organizationId = await organizationOf(owner, 'Acme Research')
      const response = await invite(owner, organizationId, `  ${invitee.email.toUpperCase()} `, ['admin'])
      assert.equal(response.statusCode, 201, response.body)
      const invitation = response.json().data.invitation
      assert.deepEqual(Object.keys(invitation).sort(), ['created_at', 'email', 'expires_at', 'id', 'invited_by', 'roles'])
      assert.equal(invitation.email, invitee.email, 'normalised')
      assert.deepEqual(invitation.roles, ['admin'])
      assert.equal(invitation.invited_by, owner.userId)
      assert.equal(Date.parse(invitation.expires_at) - Date.parse(invitation.created_at), 7 * 24 * 3600_000)

      const mail = await t.mail.next(invitee.email)
      const link = new URL(linkFromMail(mail))
      assert.equal(`${link.origin}${link.pathname}`, `${PUBLIC_URL}/accept-invitation`)
      const token = link.searchParams.get('token')!
      assert.match(token, /^[A-Za-z0-9_-]{43}$/, '32 random bytes, base64url')
      const subject = /^Subject: (.*)$/m.exec(mailText(mail))![1]!
      assert.ok(!subject.includes(token) && !subject.includes('Acme Research'), `the subject carries no secret or member-typed name: ${subject}`)
      const text = mailParts(mail.raw).parts['text/plain']!
      assert.match(text, /Acme Research/)
      assert.ok(text.includes(owner.email), 'names the inviter')
      const stored = await t.app.services.db.kysely.selectFrom('invitations').select(['token_hash', 'user_id']).where('id', '=', invitation.id).executeTakeFirstOrThrow()
      assert.equal(stored.token_hash, createHash('sha256').update(token).digest('hex'))
      assert.equal(stored.user_id, invitee.userId, 'made for the account that has the address')
      assert.deepEqual((await pending(owner, organizationId)).map((i) => i.id), [invitation.id])

      // Someone else's account: FORBIDDEN, and the invitation stays.
      const other = await person('other')
      const refused = await accept(other, token)
      assert.equal(refused.statusCode, 403, refused.body)
      assert.equal(code(refused), 'FORBIDDEN')
      assert.equal(await rolesIn(organizationId, other.userId), null)
      assert.equal((await pending(owner, organizationId)).length, 1)

      const accepted = await accept(invitee, token)
      assert.equal(accepted.statusCode, 200, accepted.body)
      assert.equal(accepted.json().data.organization.id, organizationId)
      assert.equal(accepted.json().data.organization.name, 'Acme Research')
      assert.deepEqual(accepted.json().data.roles, ['admin'])
      // At once: the organisation is theirs to see and to work in.
      assert.equal((await act(invitee, 'GET', `/auth/organizations/${organizationId}`)).statusCode, 200)
      assert.equal((await t.post('/auth/refresh', { refresh_token: invitee.refresh_token, organization_id: organizationId })).statusCode, 200)
      assert.deepEqual(await pending(owner, organizationId), [], 'spent')
      const again = await accept(invitee, token)
      assert.equal(again.statusCode, 404, again.body)
      assert.equal(code(again), 'NOT_FOUND')
      assert.equal(code(await accept(invitee, 'x'.repeat(43))), 'NOT_FOUND')
    })

    test('the link\'s page: GET shows the organisation, the inviter and one button and uses nothing up; POST accepts for the confirmed account with that address, once', async () => {
      const owner = await person('page-owner')
      const invitee = await person('page-invitee')
      const organizationId = await organizationOf(owner, 'Page & <Co>')
      const { token } = await invited(owner, organizationId, invitee.email)
      for (let i = 0; i < 2; i++) {
        const shown = await page('GET', token)
        assert.equal(shown.statusCode, 200)
        assert.match(String(shown.headers['content-type']), /^text\/html/)
        assert.match(String(shown.headers['content-security-policy']), /default-src 'none'/)
        assert.ok(shown.body.includes('Page &amp; &lt;Co&gt;'), 'the name, escaped')
        assert.ok(shown.body.includes(owner.email))
        assert.equal(shown.body.match(/<button/g)?.length, 1)
        assert.match(shown.body, /<form method="post" action="accept-invitation"/)
      }
      assert.equal(await rolesIn(organizationId, invitee.userId), null, 'a GET accepts nothing')

      // From another site: refused with a page, nothing accepted.
      const crossSite = await page('POST', token, { 'sec-fetch-site': 'cross-site' })
      assert.equal(crossSite.statusCode, 403)
      assert.match(String(crossSite.headers['content-type']), /^text\/html/)
      assert.equal(await rolesIn(organizationId, invitee.userId), null)

      const pressed = await page('POST', token, { 'sec-fetch-site': 'same-origin' })
      assert.equal(pressed.statusCode, 200, pressed.body)
      assert.ok(pressed.body.includes('Page &amp; &lt;Co&gt;'))
      assert.equal(await rolesIn(organizationId, invitee.userId), 'member')
      assert.equal((await page('POST', token)).statusCode, 400, 'once')
      assert.equal((await page('GET', token)).statusCode, 400)
      assert.equal((await page('GET', 'not-a-token')).statusCode, 400)
    })

    test('an address with no confirmed account yet: the page says to make or confirm it and accepts nothing; once confirmed, the same link works', async () => {
      const owner = await person('future-owner')
      const organizationId = await organizationOf(owner)
      const email = uniqueEmail('newcomer')
      const { token, invitation } = await invited(owner, organizationId, email)
      assert.equal((await page('GET', token)).statusCode, 200)
      const early = await page('POST', token)
      assert.equal(early.statusCode, 409, early.body)
      assert.match(early.body, /Create or confirm the account first/)
      assert.deepEqual((await pending(owner, organizationId)).map((i) => i.id), [invitation.id], 'the invitation stays')

      // Registered but not confirmed: still nothing.
      assert.equal((await t.post('/auth/register', { email, password: PASSWORD, full_name: 'New Comer' })).statusCode, 201)
      assert.equal((await page('POST', token)).statusCode, 409)
      assert.equal((await t.post('/auth/verify-email', { token: tokenFromMail(await t.mail.next(email)) })).statusCode, 200)
      const joined = await page('POST', token)
      assert.equal(joined.statusCode, 200, joined.body)
      const userId = (await t.app.services.db.kysely.selectFrom('users').select('id').where('email', '=', email).executeTakeFirstOrThrow()).id
      assert.equal(await rolesIn(organizationId, userId), 'member')
    })

    test('withdrawal, replacement and expiry end a link; a withdrawn or unknown invitation is NOT_FOUND', async () => {
      const owner = await person('withdrawer')
      const invitee = await person('withdrawn')
      const organizationId = await organizationOf(owner)
      const first = await invited(owner, organizationId, invitee.email)
      const withdrawn = await act(owner, 'DELETE', `/auth/organizations/${organizationId}/invitations/${first.invitation.id}`)
      assert.equal(withdrawn.statusCode, 200, withdrawn.body)
      assert.deepEqual(withdrawn.json().data, { id: first.invitation.id, revoked: true })
      assert.equal(code(await accept(invitee, first.token)), 'NOT_FOUND')
      assert.equal((await page('GET', first.token)).statusCode, 400)
      assert.equal(code(await act(owner, 'DELETE', `/auth/organizations/${organizationId}/invitations/${first.invitation.id}`)), 'NOT_FOUND', 'withdrawn already')
      assert.equal(code(await act(owner, 'DELETE', `/auth/organizations/${organizationId}/invitations/${randomUUID()}`)), 'NOT_FOUND')

      // A new invitation to the same address replaces the one waiting.
      const older = await invited(owner, organizationId, invitee.email)
      const newer = await invited(owner, organizationId, invitee.email, ['admin'])
      assert.deepEqual((await pending(owner, organizationId)).map((i) => i.id), [newer.invitation.id])
      assert.equal(code(await accept(invitee, older.token)), 'NOT_FOUND')

      // Seven days later the newest has expired too.
      t.clock.advance(7 * 24 * 3600 + 1)
      assert.equal(code(await accept(invitee, newer.token)), 'NOT_FOUND')
      assert.deepEqual(await pending(owner, organizationId), [])
      assert.equal(await rolesIn(organizationId, invitee.userId), null)

      // Replacing is no way to flood one mailbox: three invitations an hour to one address.
      for (let i = 0; i < 3; i++) await invited(owner, organizationId, invitee.email)
      const flooding = await invite(owner, organizationId, invitee.email)
      assert.equal(flooding.statusCode, 429, flooding.body)
      assert.equal(code(flooding), 'RATE_LIMITED')
      assert.equal((await invite(owner, organizationId, uniqueEmail('someone-else'))).statusCode, 201, 'other addresses still may be invited')
    })

    test('who may invite whom: members:invite; nobody grants a permission they lack, at invitation and again at acceptance', async () => {
      const owner = await person('gatekeeper')
      const adminMember = await person('invite-admin')
      const plain = await person('invite-plain')
      const organizationId = await organizationOf(owner)
      assert.equal(code(await accept(adminMember, (await invited(owner, organizationId, adminMember.email, ['admin'])).token)), undefined)
      assert.equal(code(await accept(plain, (await invited(owner, organizationId, plain.email, ['member'])).token)), undefined)

      const email = uniqueEmail('candidate')
      assert.equal(code(await invite(plain, organizationId, email)), 'FORBIDDEN', 'a member may not invite')
      assert.equal(code(await invite(adminMember, organizationId, email, ['owner'])), 'FORBIDDEN', 'an admin may not make an owner')
      assert.equal(code(await invite(adminMember, organizationId, email, ['no-such-role'])), 'VALIDATION_ERROR')
      assert.equal(code(await invite(adminMember, organizationId, 'not-an-address')), 'VALIDATION_ERROR')
      assert.equal(code(await invite(adminMember, organizationId, plain.email)), 'VALIDATION_ERROR', 'a member already')
      assert.equal(code(await invite(await person('stranger'), organizationId, email)), 'NOT_FOUND')
      assert.equal(code(await act(plain, 'GET', `/auth/organizations/${organizationId}/invitations`)), 'FORBIDDEN')

      // The admin invites a member; before it is accepted the admin is demoted: the invitation no longer works.
      const candidate = await person('candidate')
      const { token } = await invited(adminMember, organizationId, candidate.email, ['admin'])
      assert.equal((await act(owner, 'PUT', `/auth/organizations/${organizationId}/members/${adminMember.userId}`, { roles: ['member'] })).statusCode, 200)
      assert.equal(code(await accept(candidate, token)), 'NOT_FOUND')
      assert.equal(await rolesIn(organizationId, candidate.userId), null)
    })

    test('limits: 50 invitations waiting per organisation (LIMIT_EXCEEDED), 20 invitation mails an hour per organisation (RATE_LIMITED)', async () => {
      const owner = await person('busy')
      const organizationId = await organizationOf(owner)
      const addresses: string[] = []
      const inviteNew = async (prefix: string) => {
        const email = uniqueEmail(prefix)
        const response = await invite(owner, organizationId, email)
        if (response.statusCode === 201) addresses.push(email)
        return response
      }
      for (let hour = 0; hour < 3; hour++) {
        for (let i = 0; i < (hour < 2 ? 20 : 10); i++) {
          const response = await inviteNew(`bulk${hour}`)
          assert.equal(response.statusCode, 201, response.body)
        }
        if (hour === 0) {
          const throttled = await inviteNew('one-too-many')
          assert.equal(throttled.statusCode, 429, throttled.body)
          assert.equal(code(throttled), 'RATE_LIMITED')
          assert.ok(Number(throttled.headers['retry-after']) > 0 && Number(throttled.headers['retry-after']) <= 3600)
        }
        t.clock.advance(3601)
      }
      assert.equal((await pending(owner, organizationId)).length, 50)
      const full = await inviteNew('fifty-first')
      assert.equal(full.statusCode, 409, full.body)
      assert.equal(code(full), 'LIMIT_EXCEEDED')
      // Withdrawing one makes room (and a withdrawal does not refill the hour's mails).
      const [oldest] = await pending(owner, organizationId)
      assert.equal((await act(owner, 'DELETE', `/auth/organizations/${organizationId}/invitations/${oldest!.id}`)).statusCode, 200)
      assert.equal((await inviteNew('room')).statusCode, 201)
      // One mail for each invitation made, none for the refused ones (read, so the queue is empty for the next test).
      for (const email of addresses) await t.mail.next(email, 30_000)
      assert.equal(addresses.length, 51)
    })

    test('deleting an account removes the invitations to its address; the inviter\'s deletion leaves theirs without a working inviter', async () => {
      const owner = await person('forgetful')
      const invitee = await person('leaving')
      const organizationId = await organizationOf(owner)
      await invited(owner, organizationId, invitee.email)
      const deleted = await act(invitee, 'DELETE', '/auth/me', { password: PASSWORD })
      assert.equal(deleted.statusCode, 200, deleted.body)
      assert.equal((await t.app.services.db.kysely.selectFrom('invitations').select('id').where('email', '=', invitee.email).execute()).length, 0)

      // An invitation to an address with no account yet goes too when an account that took it is deleted.
      const email = uniqueEmail('passer-by')
      await invited(owner, organizationId, email)
      const passer = await registerVerifyLogin(t, email)
      assert.equal((await t.call('DELETE', '/auth/me', passer.access_token, { password: PASSWORD })).statusCode, 200)
      assert.deepEqual(await pending(owner, organizationId), [])

      // An admin invites, then deletes their account: the invitation no longer names them, and no longer works.
      const adminMember = await person('departing-admin')
      assert.equal(code(await accept(adminMember, (await invited(owner, organizationId, adminMember.email, ['admin'])).token)), undefined)
      const candidate = await person('orphaned')
      const { token, invitation } = await invited(adminMember, organizationId, candidate.email)
      assert.equal((await act(adminMember, 'DELETE', '/auth/me', { password: PASSWORD })).statusCode, 200)
      const listed = await pending(owner, organizationId)
      assert.deepEqual(listed.map((i) => [i.id, (i as { invited_by?: string | null }).invited_by]), [[invitation.id, null]])
      assert.equal(code(await accept(candidate, token)), 'NOT_FOUND')
      assert.equal(await rolesIn(organizationId, candidate.userId), null)
    })
  })

  describe(`invitation mails and the per-IP mail limit on ${engine}`, () => {
    test('the invitations route counts against RATE_LIMIT_MAIL_PER_IP', async () => {
      const t = await startTestApp(engine, { env: { RATE_LIMIT_MAIL_PER_IP: '2' } })
      try {
        const email = uniqueEmail('ip-owner')
        const registered = await t.post('/auth/register', { email, password: PASSWORD, full_name: 'Owner' })
        assert.equal(registered.statusCode, 201)
        assert.equal((await t.post('/auth/verify-email', { token: tokenFromMail(await t.mail.next(email)) })).statusCode, 200)
        let access = (await t.post('/auth/login', { email, password: PASSWORD })).json().data.access_token as string
        const refreshToken = (await t.post('/auth/login', { email, password: PASSWORD })).json().data.refresh_token as string
        const created = await t.post('/auth/organizations', { name: 'Limited' }, access)
        access = (await t.post('/auth/refresh', { refresh_token: refreshToken })).json().data.access_token
        const organizationId = created.json().data.organization.id
        const answers = []
        for (let i = 0; i < 3; i++) answers.push(await t.post(`/auth/organizations/${organizationId}/invitations`, { email: uniqueEmail('ip'), roles: ['member'] }, access))
        assert.deepEqual(answers.map((a) => a.statusCode), [201, 201, 429])
        assert.equal(answers.at(-1)!.json().error.code, 'RATE_LIMITED')
      } finally {
        await t.close()
      }
    })
  })
}

import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  generateAuthenticationOptions,
  generateRegistrationOptions,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
  type WebAuthnCredential,
} from '@simplewebauthn/server'
import { SoftAuthenticator } from '../helpers/webauthn.ts'

// The software authenticator is checked against an independent verifier (@simplewebauthn/server),
// so tests that use it exercise real WebAuthn bytes, not the helper's own idea of them.

const rpID = 'portcullis.test'
const origin = 'https://portcullis.test'

/** Registers a fresh passkey and returns what a server would store for it. */
async function registered(authenticator = new SoftAuthenticator()) {
  const options = await generateRegistrationOptions({
    rpName: 'Portcullis',
    rpID,
    userName: 'ada@example.com',
    attestationType: 'none',
    authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
  })
  const response = authenticator.register(options, { origin })
  const verified = await verifyRegistrationResponse({ response, expectedChallenge: options.challenge, expectedOrigin: origin, expectedRPID: rpID, requireUserVerification: true })
  assert.ok(verified.verified)
  return { authenticator, options, info: verified.registrationInfo }
}

async function login(authenticator: SoftAuthenticator, credential: WebAuthnCredential, args: { origin?: string; counter?: number } = {}) {
  const options = await generateAuthenticationOptions({ rpID, userVerification: 'required' })
  const response = authenticator.authenticate(options, { origin: args.origin ?? origin, ...(args.counter === undefined ? {} : { counter: args.counter }) })
  return { response, verify: () => verifyAuthenticationResponse({ response, expectedChallenge: options.challenge, expectedOrigin: origin, expectedRPID: rpID, credential, requireUserVerification: true }) }
}

test('a registration with attestation "none" verifies, user verified, counter 0', async () => {
  const { authenticator, options, info } = await registered()
  assert.equal(info.fmt, 'none')
  assert.equal(info.userVerified, true)
  assert.equal(info.aaguid, '00000000-0000-0000-0000-000000000000')
  assert.equal(info.credentialDeviceType, 'singleDevice')
  assert.equal(info.credential.counter, 0)
  assert.deepEqual(authenticator.credentials(), [{ id: info.credential.id, rpId: rpID, userHandle: options.user.id, counter: 0 }])

  // The backup flags and the AAGUID reach the verifier too.
  const synced = await registered(new SoftAuthenticator({ aaguid: Buffer.alloc(16, 0xab), backupEligible: true, backedUp: true }))
  assert.equal(synced.info.credentialDeviceType, 'multiDevice')
  assert.equal(synced.info.credentialBackedUp, true)
  assert.equal(synced.info.aaguid, 'abababab-abab-abab-abab-abababababab')

  // Without user verification a server that requires it refuses.
  const strict = await generateRegistrationOptions({ rpName: 'Portcullis', rpID, userName: 'bob@example.com', attestationType: 'none' })
  const unverified = new SoftAuthenticator().register(strict, { origin, userVerified: false })
  await assert.rejects(
    verifyRegistrationResponse({ response: unverified, expectedChallenge: strict.challenge, expectedOrigin: origin, expectedRPID: rpID, requireUserVerification: true }),
    /User verification was required/,
  )
})

test('a discoverable authentication verifies with the stored public key and counts up', async () => {
  const { authenticator, options: creation, info } = await registered()
  let credential = info.credential
  for (const expected of [1, 2]) {
    const { response, verify } = await login(authenticator, credential)
    assert.equal(response.id, credential.id)
    assert.equal(response.response.userHandle, creation.user.id)
    const result = await verify()
    assert.equal(result.verified, true)
    assert.equal(result.authenticationInfo.newCounter, expected)
    assert.equal(result.authenticationInfo.userVerified, true)
    credential = { ...credential, counter: result.authenticationInfo.newCounter }
  }
  assert.equal(authenticator.credentials()[0]?.counter, 2)
})

test('allowCredentials picks the named credential among several', async () => {
  const authenticator = new SoftAuthenticator()
  const first = await registered(authenticator)
  const second = await registered(authenticator)
  const options = await generateAuthenticationOptions({ rpID, allowCredentials: [{ id: first.info.credential.id }] })
  const response = authenticator.authenticate(options, { origin })
  assert.equal(response.id, first.info.credential.id)
  const result = await verifyAuthenticationResponse({ response, expectedChallenge: options.challenge, expectedOrigin: origin, expectedRPID: rpID, credential: first.info.credential })
  assert.equal(result.verified, true)
  // Discoverable, the most recent credential for the RP answers.
  assert.equal(authenticator.authenticate(await generateAuthenticationOptions({ rpID }), { origin }).id, second.info.credential.id)
  assert.throws(() => authenticator.authenticate({ challenge: 'x', rpId: 'elsewhere.test' }, { origin }), { name: 'NotAllowedError' })
})

test('a response made for another origin is refused', async () => {
  const options = await generateRegistrationOptions({ rpName: 'Portcullis', rpID, userName: 'eve@example.com', attestationType: 'none' })
  const response = new SoftAuthenticator().register(options, { origin: 'https://portcullis.evil' })
  await assert.rejects(
    verifyRegistrationResponse({ response, expectedChallenge: options.challenge, expectedOrigin: origin, expectedRPID: rpID }),
    /Unexpected registration response origin "https:\/\/portcullis.evil"/,
  )

  const { authenticator, info } = await registered()
  const { verify } = await login(authenticator, info.credential, { origin: 'https://portcullis.evil' })
  await assert.rejects(verify(), /Unexpected authentication response origin/)
})

test('a counter forced backwards is refused, and the held counter is left alone', async () => {
  const { authenticator, info } = await registered()
  const first = await (await login(authenticator, info.credential)).verify()
  const second = await (await login(authenticator, { ...info.credential, counter: first.authenticationInfo.newCounter })).verify()
  assert.equal(second.authenticationInfo.newCounter, 2)
  const stored = { ...info.credential, counter: 2 }

  const { verify } = await login(authenticator, stored, { counter: 1 })
  await assert.rejects(verify(), /Response counter value 1 was lower than expected 2/)
  assert.equal(authenticator.credentials()[0]?.counter, 2)
  // The next ordinary use carries on from the held counter.
  assert.equal((await (await login(authenticator, stored)).verify()).authenticationInfo.newCounter, 3)
})

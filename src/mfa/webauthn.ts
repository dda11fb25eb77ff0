import { randomBytes } from 'node:crypto'
import type {
  AuthenticationResponseJSON,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/server'

/** The library, loaded on the first ceremony rather than at start (it is a tenth of start-up). */
let library: Promise<typeof import('@simplewebauthn/server')> | undefined
const simpleWebAuthn = () => (library ??= import('@simplewebauthn/server'))

/**
 * The relying party's side of the two WebAuthn ceremonies (docs/mfa.md, Passkeys), with
 * @simplewebauthn/server doing the parsing and the signature checks. What makes a passkey worth
 * something beyond that (challenges made here, used once and bound to a purpose; the counter rule)
 * is ours and lives in the service and the store.
 */
export interface RelyingPartyConfig {
  /** WEBAUTHN_RP_ID: the host name credentials are scoped to. */
  id: string
  /** WEBAUTHN_RP_NAME. */
  name: string
  /** WEBAUTHN_ORIGINS: the page origins a ceremony may come from. */
  origins: string[]
}

/** A ceremony's life, and the browser's timeout: the same five minutes. */
export const CEREMONY_TTL_MS = 5 * 60_000
/** EdDSA, ES256, RS256: what common authenticators make. */
const ALGORITHMS = [-8, -7, -257]

export type CreationOptions = PublicKeyCredentialCreationOptionsJSON
export type RequestOptions = PublicKeyCredentialRequestOptionsJSON

/** A credential as a browser's toJSON() writes it (src/mfa/schemas.ts validates the shape). */
interface CredentialJSON {
  id: string
  rawId: string
  type: 'public-key'
  clientExtensionResults: object
  authenticatorAttachment?: string | null
}
export interface RegistrationCredential extends CredentialJSON {
  response: { clientDataJSON: string; attestationObject: string; transports?: string[] }
}
export interface AssertionCredential extends CredentialJSON {
  response: { clientDataJSON: string; authenticatorData: string; signature: string; userHandle?: string | null }
}

/** The library's form: absent rather than null (some browsers write null for "none"). */
function withoutNulls<T>(credential: CredentialJSON & { response: object }): T {
  const { authenticatorAttachment, response, ...rest } = credential
  const cleaned = Object.fromEntries(Object.entries(response).filter(([, value]) => value !== null))
  return { ...rest, response: cleaned, ...(authenticatorAttachment ? { authenticatorAttachment } : {}) } as T
}

/** A stored passkey as the ceremonies need it. */
export interface StoredPasskey {
  credentialId: string
  publicKey: string
  transports: string[]
}

export interface NewPasskey {
  credentialId: string
  /** COSE key, base64url. */
  publicKey: string
  counter: number
  transports: string[]
  backupEligible: boolean
  backedUp: boolean
  aaguid: string
}

export interface Assertion {
  counter: number
  userVerified: boolean
  backedUp: boolean
}

/** A credential that did not verify, with a reason a developer can act on (never a secret). */
export class CeremonyFailed extends Error {}

/** At least 128 random bits (WebAuthn asks for 16 bytes or more); 256 here. */
export function newChallenge(): string {
  return randomBytes(32).toString('base64url')
}

/** The challenge a credential answers, read from its client data (untrusted until verified). */
export function challengeOf(credential: { response: { clientDataJSON: string } }): string | null {
  try {
    const clientData = JSON.parse(Buffer.from(credential.response.clientDataJSON, 'base64url').toString('utf8')) as { challenge?: unknown }
    return typeof clientData.challenge === 'string' && clientData.challenge.length <= 256 ? clientData.challenge : null
  } catch {
    return null
  }
}

/** The library's messages, reduced to what went wrong. */
function reasonOf(error: unknown): string {
  const message = error instanceof Error ? error.message : ''
  if (/origin/i.test(message)) return 'the origin is not one of WEBAUTHN_ORIGINS'
  if (/rp ?id/i.test(message)) return 'the RP ID does not match WEBAUTHN_RP_ID'
  if (/user verification|user could not be verified/i.test(message)) return 'the authenticator did not verify the user'
  if (/user presen|user was not present/i.test(message)) return 'the authenticator did not see the user present'
  if (/challenge/i.test(message)) return 'the challenge does not match'
  if (/type/i.test(message)) return 'the client data has the wrong ceremony type'
  if (/signature/i.test(message)) return 'the signature does not verify'
  return 'the credential could not be verified'
}

export class RelyingParty {
  constructor(readonly config: RelyingPartyConfig) {}

  /** Registration: a resident key with user verification, no attestation, the account's own credentials excluded. */
  async creationOptions(user: { id: string; email: string }, existing: StoredPasskey[], challenge: string): Promise<CreationOptions> {
    const { generateRegistrationOptions } = await simpleWebAuthn()
    return generateRegistrationOptions({
      rpName: this.config.name,
      rpID: this.config.id,
      userName: user.email,
      userDisplayName: user.email,
      // The user handle is the account id: stable, and no address inside the authenticator's handle.
      userID: new TextEncoder().encode(user.id),
      // Bytes: a string would be taken as UTF-8 text and encoded again.
      challenge: Buffer.from(challenge, 'base64url'),
      timeout: CEREMONY_TTL_MS,
      attestationType: 'none',
      excludeCredentials: existing.map((p) => ({ id: p.credentialId, transports: p.transports })),
      authenticatorSelection: { residentKey: 'required', requireResidentKey: true, userVerification: 'required' },
      supportedAlgorithmIDs: ALGORITHMS,
    })
  }

  /** Authentication: empty `allow` for a discoverable login, the account's passkeys for a second factor. */
  async requestOptions(allow: StoredPasskey[], challenge: string): Promise<RequestOptions> {
    const { generateAuthenticationOptions } = await simpleWebAuthn()
    return generateAuthenticationOptions({
      rpID: this.config.id,
      // Bytes: a string would be taken as UTF-8 text and encoded again.
      challenge: Buffer.from(challenge, 'base64url'),
      timeout: CEREMONY_TTL_MS,
      userVerification: 'required',
      allowCredentials: allow.map((p) => ({ id: p.credentialId, transports: p.transports })),
    })
  }

  async verifyRegistration(credential: RegistrationCredential, challenge: string): Promise<NewPasskey> {
    const { verifyRegistrationResponse } = await simpleWebAuthn()
    let result: Awaited<ReturnType<typeof verifyRegistrationResponse>>
    try {
      result = await verifyRegistrationResponse({
        response: withoutNulls<RegistrationResponseJSON>(credential),
        expectedChallenge: challenge,
        expectedOrigin: this.config.origins,
        expectedRPID: this.config.id,
        requireUserVerification: true,
        supportedAlgorithmIDs: ALGORITHMS,
      })
    } catch (error) {
      throw new CeremonyFailed(reasonOf(error))
    }
    if (!result.verified) throw new CeremonyFailed('the credential could not be verified')
    const info = result.registrationInfo
    return {
      credentialId: info.credential.id,
      publicKey: Buffer.from(info.credential.publicKey).toString('base64url'),
      counter: info.credential.counter,
      transports: (credential.response.transports ?? []).filter((t) => typeof t === 'string' && t.length <= 32).slice(0, 8),
      backupEligible: info.credentialDeviceType === 'multiDevice',
      backedUp: info.credentialBackedUp,
      aaguid: info.aaguid,
    }
  }

  /**
   * Checks an assertion's signature, origin, RP ID, challenge and user verification. The counter
   * rule is the caller's (the library is given 0, so it never refuses on the counter alone).
   */
  async verifyAssertion(credential: AssertionCredential, challenge: string, stored: StoredPasskey): Promise<Assertion> {
    const { verifyAuthenticationResponse } = await simpleWebAuthn()
    let result: Awaited<ReturnType<typeof verifyAuthenticationResponse>>
    try {
      result = await verifyAuthenticationResponse({
        response: withoutNulls<AuthenticationResponseJSON>(credential),
        expectedChallenge: challenge,
        expectedOrigin: this.config.origins,
        expectedRPID: this.config.id,
        credential: { id: stored.credentialId, publicKey: Buffer.from(stored.publicKey, 'base64url'), counter: 0, transports: stored.transports },
        requireUserVerification: true,
      })
    } catch (error) {
      throw new CeremonyFailed(reasonOf(error))
    }
    if (!result.verified) throw new CeremonyFailed('the signature does not verify')
    const info = result.authenticationInfo
    return { counter: info.newCounter, userVerified: info.userVerified, backedUp: info.credentialBackedUp }
  }
}

/**
 * The counter rule (WebAuthn §6.1.1): a counter that does not move forward, when either side is
 * above zero, means a cloned authenticator. Synced passkeys report 0 every time, which is fine.
 */
export function counterWentBackwards(stored: number, seen: number): boolean {
  return (stored > 0 || seen > 0) && seen <= stored
}

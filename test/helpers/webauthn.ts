import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto'

/**
 * A software WebAuthn authenticator (plus the browser's part of the ceremony) for server-side tests:
 * it answers the JSON options the server hands out with the JSON a browser would post back.
 * P-256 keys (ES256), attestation format "none", a passkey-style discoverable credential per
 * register() call. Written against the WebAuthn Level 3 and CTAP2 byte layouts, independent of the
 * library the service verifies with.
 */

// ---------------------------------------------------------------------------------------------
// JSON shapes (only the fields this helper reads or writes; extensions are ignored and
// clientExtensionResults is always {}). Binary values are base64url strings.

export type Base64Url = string

export interface CredentialDescriptorJSON {
  id: Base64Url
  type?: string
  transports?: string[]
}

/** PublicKeyCredentialCreationOptionsJSON, as the server sends it for navigator.credentials.create. */
export interface CreationOptionsJSON {
  rp: { id?: string; name: string }
  user: { id: Base64Url; name: string; displayName: string }
  challenge: Base64Url
  pubKeyCredParams?: { alg: number; type: string }[]
  excludeCredentials?: CredentialDescriptorJSON[]
  timeout?: number
  attestation?: string
  authenticatorSelection?: { authenticatorAttachment?: string; residentKey?: string; requireResidentKey?: boolean; userVerification?: string }
}

/** PublicKeyCredentialRequestOptionsJSON, as the server sends it for navigator.credentials.get. */
export interface RequestOptionsJSON {
  challenge: Base64Url
  rpId?: string
  allowCredentials?: CredentialDescriptorJSON[]
  timeout?: number
  userVerification?: string
}

export interface RegistrationResponseJSON {
  id: Base64Url
  rawId: Base64Url
  type: 'public-key'
  response: {
    clientDataJSON: Base64Url
    attestationObject: Base64Url
    authenticatorData: Base64Url
    transports: string[]
    publicKeyAlgorithm: number
    /** SubjectPublicKeyInfo (DER) of the credential key. */
    publicKey: Base64Url
  }
  clientExtensionResults: Record<string, never>
  authenticatorAttachment: 'platform'
}

export interface AuthenticationResponseJSON {
  id: Base64Url
  rawId: Base64Url
  type: 'public-key'
  response: {
    clientDataJSON: Base64Url
    authenticatorData: Base64Url
    signature: Base64Url
    userHandle: Base64Url
  }
  clientExtensionResults: Record<string, never>
  authenticatorAttachment: 'platform'
}

/** What credentials() reports about one held credential. */
export interface HeldCredential {
  /** Credential id, base64url. */
  id: Base64Url
  rpId: string
  /** The user.id the server gave at registration, base64url, as given. */
  userHandle: Base64Url
  /** The signCount of the last response made with it (0 after registration). */
  counter: number
}

export interface SoftAuthenticatorOptions {
  /** 16 bytes; all zeros by default (what "none" attestation usually reports). */
  aaguid?: Buffer
  /** Sets the BE flag (a multi-device, syncable credential). Default false. */
  backupEligible?: boolean
  /** Sets the BS flag (the credential is backed up). Default false. */
  backedUp?: boolean
}

export interface RegisterArgs {
  origin: string
  /** Default options.rp.id, else the origin's host (as a browser does). */
  rpId?: string
  /** UV flag. Default true. */
  userVerified?: boolean
  /** UP flag. Default true. */
  userPresent?: boolean
  /** Put this challenge in clientDataJSON instead of options.challenge (negative tests). */
  challenge?: string
  /** clientDataJSON.type. Default 'webauthn.create'. */
  type?: string
}

export interface AuthenticateArgs {
  origin: string
  /** Default options.rpId, else the origin's host (as a browser does). */
  rpId?: string
  /** UV flag. Default true. */
  userVerified?: boolean
  /** UP flag. Default true. */
  userPresent?: boolean
  /** Use this held credential (base64url id), whatever allowCredentials and rpId say. */
  credentialId?: string
  /** signCount for this one response (e.g. to go backwards); the held counter is left as it was. */
  counter?: number
  /** Put this challenge in clientDataJSON instead of options.challenge (negative tests). */
  challenge?: string
  /** clientDataJSON.type. Default 'webauthn.get'. */
  type?: string
}

// ---------------------------------------------------------------------------------------------
// A tiny CBOR encoder (RFC 8949): unsigned and negative integers, byte strings, text strings,
// arrays and maps. Maps are written in insertion order; the callers below insert in CTAP2
// canonical order.

export type CborValue = number | bigint | Uint8Array | string | CborValue[] | Map<number | string, CborValue>

function cborHead(major: number, value: number | bigint): Buffer {
  const n = BigInt(value)
  if (n < 0n) throw new RangeError('CBOR head: negative argument')
  const type = major << 5
  if (n < 24n) return Buffer.from([type | Number(n)])
  if (n < 0x100n) return Buffer.from([type | 24, Number(n)])
  if (n < 0x10000n) {
    const out = Buffer.alloc(3)
    out[0] = type | 25
    out.writeUInt16BE(Number(n), 1)
    return out
  }
  if (n < 0x100000000n) {
    const out = Buffer.alloc(5)
    out[0] = type | 26
    out.writeUInt32BE(Number(n), 1)
    return out
  }
  if (n < 1n << 64n) {
    const out = Buffer.alloc(9)
    out[0] = type | 27
    out.writeBigUInt64BE(n, 1)
    return out
  }
  throw new RangeError('CBOR head: argument does not fit in 64 bits')
}

export function encodeCbor(value: CborValue): Buffer {
  if (typeof value === 'number' || typeof value === 'bigint') {
    if (typeof value === 'number' && !Number.isSafeInteger(value)) throw new TypeError(`CBOR: ${value} is not an integer this encoder writes`)
    const n = BigInt(value)
    return n >= 0n ? cborHead(0, n) : cborHead(1, -1n - n)
  }
  if (typeof value === 'string') {
    const bytes = Buffer.from(value, 'utf8')
    return Buffer.concat([cborHead(3, bytes.length), bytes])
  }
  if (value instanceof Uint8Array) return Buffer.concat([cborHead(2, value.length), value])
  if (Array.isArray(value)) return Buffer.concat([cborHead(4, value.length), ...value.map(encodeCbor)])
  if (value instanceof Map) {
    const parts: Buffer[] = [cborHead(5, value.size)]
    for (const [key, item] of value) parts.push(encodeCbor(key), encodeCbor(item))
    return Buffer.concat(parts)
  }
  throw new TypeError('CBOR: unsupported value')
}

// ---------------------------------------------------------------------------------------------

const FLAG_UP = 0x01
const FLAG_UV = 0x04
const FLAG_BE = 0x08
const FLAG_BS = 0x10
const FLAG_AT = 0x40
const ES256 = -7

interface Held {
  id: Buffer
  rpId: string
  userHandle: Base64Url
  counter: number
  privateKey: KeyObject
  publicKey: KeyObject
}

const sha256 = (data: Buffer | string): Buffer => createHash('sha256').update(data).digest()
const b64url = (data: Buffer): Base64Url => data.toString('base64url')

function hostOf(origin: string): string {
  return new URL(origin).hostname
}

function notAllowed(message: string): Error {
  const error = new Error(`NotAllowedError: ${message}`)
  error.name = 'NotAllowedError'
  return error
}

export class SoftAuthenticator {
  readonly #aaguid: Buffer
  readonly #backupEligible: boolean
  readonly #backedUp: boolean
  readonly #held: Held[] = []

  constructor(options: SoftAuthenticatorOptions = {}) {
    const aaguid = options.aaguid ?? Buffer.alloc(16)
    if (aaguid.length !== 16) throw new RangeError('SoftAuthenticator: aaguid must be 16 bytes')
    this.#aaguid = Buffer.from(aaguid)
    this.#backupEligible = options.backupEligible ?? false
    this.#backedUp = options.backedUp ?? false
  }

  /**
   * Answers navigator.credentials.create: takes the server's PublicKeyCredentialCreationOptionsJSON,
   * returns RegistrationResponseJSON. Like a browser, it refuses (NotAllowedError / InvalidStateError)
   * when ES256 is not among pubKeyCredParams or when it already holds one of excludeCredentials.
   */
  register(options: CreationOptionsJSON, args: RegisterArgs): RegistrationResponseJSON {
    const rpId = args.rpId ?? options.rp.id ?? hostOf(args.origin)
    const params = options.pubKeyCredParams
    if (params && params.length > 0 && !params.some((param) => param.alg === ES256 && param.type === 'public-key')) {
      const error = new Error('NotSupportedError: the server does not accept ES256')
      error.name = 'NotSupportedError'
      throw error
    }
    const excluded = new Set((options.excludeCredentials ?? []).map((descriptor) => descriptor.id))
    if (this.#held.some((held) => held.rpId === rpId && excluded.has(b64url(held.id)))) {
      const error = new Error('InvalidStateError: this authenticator already holds an excluded credential')
      error.name = 'InvalidStateError'
      throw error
    }

    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const credential: Held = { id: randomBytes(32), rpId, userHandle: options.user.id, counter: 0, privateKey, publicKey }

    const jwk = publicKey.export({ format: 'jwk' })
    const x = Buffer.from(jwk.x ?? '', 'base64url')
    const y = Buffer.from(jwk.y ?? '', 'base64url')
    if (x.length !== 32 || y.length !== 32) throw new Error('SoftAuthenticator: unexpected P-256 coordinate length')
    // COSE_Key (RFC 9053): kty EC2, alg ES256, crv P-256, x, y.
    const coseKey = encodeCbor(
      new Map<number, CborValue>([
        [1, 2],
        [3, ES256],
        [-1, 1],
        [-2, x],
        [-3, y],
      ]),
    )
    const idLength = Buffer.alloc(2)
    idLength.writeUInt16BE(credential.id.length)
    const authData = Buffer.concat([
      this.#authDataHead(rpId, args.userPresent ?? true, args.userVerified ?? true, true, credential.counter),
      this.#aaguid,
      idLength,
      credential.id,
      coseKey,
    ])
    const attestationObject = encodeCbor(
      new Map<string, CborValue>([
        ['fmt', 'none'],
        ['attStmt', new Map()],
        ['authData', authData],
      ]),
    )
    const clientDataJSON = clientData(args.type ?? 'webauthn.create', args.challenge ?? options.challenge, args.origin)

    this.#held.push(credential)
    const id = b64url(credential.id)
    return {
      id,
      rawId: id,
      type: 'public-key',
      response: {
        clientDataJSON: b64url(clientDataJSON),
        attestationObject: b64url(attestationObject),
        authenticatorData: b64url(authData),
        transports: ['internal'],
        publicKeyAlgorithm: ES256,
        publicKey: b64url(publicKey.export({ format: 'der', type: 'spki' })),
      },
      clientExtensionResults: {},
      authenticatorAttachment: 'platform',
    }
  }

  /**
   * Answers navigator.credentials.get for a credential this authenticator holds: args.credentialId
   * if given; else the first held credential named in a non-empty allowCredentials (and scoped to
   * rpId); else (discoverable) the most recently registered credential for rpId. Throws a
   * NotAllowedError when none fits. Returns AuthenticationResponseJSON with userHandle set.
   */
  authenticate(options: RequestOptionsJSON, args: AuthenticateArgs): AuthenticationResponseJSON {
    const rpId = args.rpId ?? options.rpId ?? hostOf(args.origin)
    const credential = this.#pick(options, rpId, args.credentialId)

    let signCount: number
    if (args.counter === undefined) {
      credential.counter += 1
      signCount = credential.counter
    } else {
      signCount = args.counter
    }
    const authData = this.#authDataHead(rpId, args.userPresent ?? true, args.userVerified ?? true, false, signCount)
    const clientDataJSON = clientData(args.type ?? 'webauthn.get', args.challenge ?? options.challenge, args.origin)
    // ECDSA P-256 with SHA-256 over authenticatorData || SHA-256(clientDataJSON); node writes DER.
    const signature = sign('sha256', Buffer.concat([authData, sha256(clientDataJSON)]), credential.privateKey)

    const id = b64url(credential.id)
    return {
      id,
      rawId: id,
      type: 'public-key',
      response: {
        clientDataJSON: b64url(clientDataJSON),
        authenticatorData: b64url(authData),
        signature: b64url(signature),
        userHandle: credential.userHandle,
      },
      clientExtensionResults: {},
      authenticatorAttachment: 'platform',
    }
  }

  /** The credentials it holds, oldest first (copies). */
  credentials(): HeldCredential[] {
    return this.#held.map((held) => ({ id: b64url(held.id), rpId: held.rpId, userHandle: held.userHandle, counter: held.counter }))
  }

  #pick(options: RequestOptionsJSON, rpId: string, credentialId: string | undefined): Held {
    if (credentialId !== undefined) {
      const found = this.#held.find((held) => b64url(held.id) === credentialId)
      if (!found) throw notAllowed(`no held credential ${credentialId}`)
      return found
    }
    const forRp = this.#held.filter((held) => held.rpId === rpId)
    const allowed = options.allowCredentials ?? []
    if (allowed.length > 0) {
      const ids = new Set(allowed.map((descriptor) => descriptor.id))
      const found = forRp.find((held) => ids.has(b64url(held.id)))
      if (!found) throw notAllowed(`no held credential for ${rpId} among allowCredentials`)
      return found
    }
    const latest = forRp.at(-1)
    if (!latest) throw notAllowed(`no held credential for ${rpId}`)
    return latest
  }

  /** rpIdHash | flags | signCount: the 37 bytes every authenticatorData starts with. */
  #authDataHead(rpId: string, userPresent: boolean, userVerified: boolean, attested: boolean, signCount: number): Buffer {
    let flags = 0
    if (userPresent) flags |= FLAG_UP
    if (userVerified) flags |= FLAG_UV
    if (this.#backupEligible) flags |= FLAG_BE
    if (this.#backedUp) flags |= FLAG_BS
    if (attested) flags |= FLAG_AT
    const head = Buffer.alloc(37)
    sha256(rpId).copy(head, 0)
    head[32] = flags
    head.writeUInt32BE(signCount, 33) // throws RangeError outside 0..2^32-1
    return head
  }
}

function clientData(type: string, challenge: string, origin: string): Buffer {
  return Buffer.from(JSON.stringify({ type, challenge, origin, crossOrigin: false }), 'utf8')
}

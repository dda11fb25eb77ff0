// The browser's half of a passkey ceremony, with no dependency: the server's JSON options become
// the arguments of navigator.credentials.create/get, and the credential comes back as the JSON the
// server reads. WebAuthn Level 3 browsers do both conversions themselves
// (PublicKeyCredential.parseCreationOptionsFromJSON, credential.toJSON()); older ones get the same
// result from the few lines below.

/** The server's options: PublicKeyCredentialCreationOptionsJSON or ...RequestOptionsJSON. */
export type OptionsJSON = Record<string, unknown>
/** What PublicKeyCredential.toJSON() gives. */
export type CredentialJSON = {
  id: string
  rawId: string
  type: 'public-key'
  response: Record<string, unknown>
  clientExtensionResults: Record<string, unknown>
  authenticatorAttachment?: string | null
}

interface Level3 {
  parseCreationOptionsFromJSON?(options: OptionsJSON): CredentialCreationOptions['publicKey']
  parseRequestOptionsFromJSON?(options: OptionsJSON): CredentialRequestOptions['publicKey']
}

function fromBase64Url(text: string): ArrayBuffer {
  const base64 = text.replace(/-/g, '+').replace(/_/g, '/')
  const binary = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4))
  const bytes = new Uint8Array(binary.length)
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i)
  return bytes.buffer
}

function toBase64Url(buffer: ArrayBuffer | ArrayBufferView): string {
  const bytes = buffer instanceof ArrayBuffer ? new Uint8Array(buffer) : new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength)
  let binary = ''
  for (const byte of bytes) binary += String.fromCharCode(byte)
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

type Descriptor = { id: string; type: string; transports?: string[] }
const descriptors = (list: unknown) => ((list as Descriptor[] | undefined) ?? []).map((d) => ({ ...d, id: fromBase64Url(d.id) })) as PublicKeyCredentialDescriptor[]

function creationOptions(options: OptionsJSON): PublicKeyCredentialCreationOptions {
  const parse = (globalThis.PublicKeyCredential as unknown as Level3 | undefined)?.parseCreationOptionsFromJSON
  if (parse) return parse.call(globalThis.PublicKeyCredential, options)!
  const user = options.user as { id: string; name: string; displayName: string }
  return {
    ...(options as unknown as PublicKeyCredentialCreationOptions),
    challenge: fromBase64Url(options.challenge as string),
    user: { ...user, id: fromBase64Url(user.id) },
    excludeCredentials: descriptors(options.excludeCredentials),
  }
}

function requestOptions(options: OptionsJSON): PublicKeyCredentialRequestOptions {
  const parse = (globalThis.PublicKeyCredential as unknown as Level3 | undefined)?.parseRequestOptionsFromJSON
  if (parse) return parse.call(globalThis.PublicKeyCredential, options)!
  return { ...(options as unknown as PublicKeyCredentialRequestOptions), challenge: fromBase64Url(options.challenge as string), allowCredentials: descriptors(options.allowCredentials) }
}

function toJSON(credential: PublicKeyCredential): CredentialJSON {
  const own = (credential as unknown as { toJSON?: () => CredentialJSON }).toJSON
  if (own) return own.call(credential)
  const response = credential.response as AuthenticatorAttestationResponse & AuthenticatorAssertionResponse
  const json: Record<string, unknown> = { clientDataJSON: toBase64Url(response.clientDataJSON) }
  if ('attestationObject' in response && response.attestationObject) {
    json.attestationObject = toBase64Url(response.attestationObject)
    json.transports = response.getTransports?.() ?? []
  } else {
    json.authenticatorData = toBase64Url(response.authenticatorData)
    json.signature = toBase64Url(response.signature)
    json.userHandle = response.userHandle ? toBase64Url(response.userHandle) : null
  }
  return {
    id: credential.id,
    rawId: toBase64Url(credential.rawId),
    type: 'public-key',
    response: json,
    clientExtensionResults: credential.getClientExtensionResults() as Record<string, unknown>,
    authenticatorAttachment: credential.authenticatorAttachment,
  }
}

function webAuthn(): CredentialsContainer {
  if (typeof navigator === 'undefined' || !navigator.credentials || typeof globalThis.PublicKeyCredential === 'undefined') {
    throw new Error('Passkeys need a browser with WebAuthn (navigator.credentials and PublicKeyCredential).')
  }
  return navigator.credentials
}

/** navigator.credentials.create() with the server's creation options; the new credential as JSON. */
export async function createCredential(options: OptionsJSON): Promise<CredentialJSON> {
  const credential = await webAuthn().create({ publicKey: creationOptions(options) })
  if (!credential) throw new Error('No passkey was created.')
  return toJSON(credential as PublicKeyCredential)
}

/** navigator.credentials.get() with the server's request options; the assertion as JSON. */
export async function getCredential(options: OptionsJSON): Promise<CredentialJSON> {
  const credential = await webAuthn().get({ publicKey: requestOptions(options) })
  if (!credential) throw new Error('No passkey was chosen.')
  return toJSON(credential as PublicKeyCredential)
}

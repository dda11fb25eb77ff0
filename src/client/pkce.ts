/**
 * RFC 7636 between the application and Portcullis for a provider sign-in (API.md, "The login code
 * is bound to whoever started the flow"): startOidc() sends the S256 challenge and keeps the
 * verifier; exchangeOidcCode() sends it back. A login code planted in this tab by someone else's
 * sign-in then arrives without the verifier of its own start, and opens nothing.
 */

function base64url(bytes: Uint8Array): string {
  let binary = ''
  for (const byte of bytes) binary += String.fromCharCode(byte)
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

/** A verifier of 256 random bits (43 base64url characters) and its S256 challenge. */
export async function pkcePair(): Promise<{ verifier: string; challenge: string }> {
  const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)))
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))
  return { verifier, challenge: base64url(new Uint8Array(digest)) }
}

export interface VerifierStore {
  save(verifier: string): void
  /** The verifier, removed: it serves one exchange. */
  take(): string | null
}

/** Where sessionStorage is missing or refused (Node, a sandboxed frame): this process's memory. */
const memory = new Map<string, string>()

function tabStorage(): Storage | null {
  try {
    return typeof sessionStorage === 'undefined' ? null : sessionStorage
  } catch {
    return null
  }
}

/**
 * The verifier of the last provider sign-in started for this service. In a browser it lives in
 * sessionStorage, which survives the trip through the provider and belongs to the tab that started
 * it (the provider flow returns to that tab); another tab, or another site, cannot read it.
 */
export function verifierStore(baseUrl: string): VerifierStore {
  const key = `portcullis.oidc.code_verifier ${baseUrl}`
  return {
    save(verifier) {
      const storage = tabStorage()
      if (!storage) return void memory.set(key, verifier)
      try {
        storage.setItem(key, verifier)
      } catch {
        memory.set(key, verifier)
      }
    },
    take() {
      const storage = tabStorage()
      let verifier: string | null = memory.get(key) ?? null
      memory.delete(key)
      try {
        verifier = storage?.getItem(key) ?? verifier
        storage?.removeItem(key)
      } catch {
        // Storage refused: what memory held is all there is.
      }
      return verifier
    },
  }
}

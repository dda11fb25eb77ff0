/**
 * RFC 7636 between the application and Portcullis for a provider sign-in (docs/oidc.md: the login code
 * is bound to whoever started the flow): startOidc() sends the S256 challenge and keeps the
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

/** Where the storage is missing or refused (Node, a sandboxed frame): this process's memory. */
const memory = new Map<string, string>()

function browserStorage(kind: 'session' | 'local'): Storage | null {
  try {
    const storage = kind === 'session' ? globalThis.sessionStorage : globalThis.localStorage
    return storage ?? null
  } catch {
    return null
  }
}

/** How long an e-mailed sign-in's verifier is kept: the code's and link's 10 minutes. */
const EMAIL_FLOW_MS = 10 * 60_000

/**
 * The verifier of the last sign-in of a kind started for this service. A provider sign-in returns
 * to the tab that started it, so its verifier lives in that tab's sessionStorage, which another tab
 * or site cannot read. An e-mailed link opens a new tab, where sessionStorage is empty, so that
 * flow's verifier lives in localStorage (this site's tabs share it) and only for the code's 10
 * minutes: it is removed once used or once expired.
 */
export function verifierStore(baseUrl: string, flow: 'oidc' | 'email' = 'oidc'): VerifierStore {
  const key = `portcullis.${flow}.code_verifier ${baseUrl}`
  const kind = flow === 'email' ? 'local' : 'session'
  const wrap = (verifier: string) => (flow === 'email' ? JSON.stringify({ verifier, until: Date.now() + EMAIL_FLOW_MS }) : verifier)
  const unwrap = (stored: string | null): string | null => {
    if (stored === null || flow !== 'email') return stored
    try {
      const { verifier, until } = JSON.parse(stored) as { verifier: string; until: number }
      return until > Date.now() ? verifier : null
    } catch {
      return null
    }
  }
  return {
    save(verifier) {
      const storage = browserStorage(kind)
      if (!storage) return void memory.set(key, wrap(verifier))
      try {
        storage.setItem(key, wrap(verifier))
      } catch {
        memory.set(key, wrap(verifier))
      }
    },
    take() {
      const storage = browserStorage(kind)
      let stored: string | null = memory.get(key) ?? null
      memory.delete(key)
      try {
        stored = storage?.getItem(key) ?? stored
        storage?.removeItem(key)
      } catch {
        // Storage refused: what memory held is all there is.
      }
      return unwrap(stored)
    },
  }
}

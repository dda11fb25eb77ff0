/** The tokens a client holds in the body transport. */
export interface Tokens {
  accessToken: string
  refreshToken: string
}

/**
 * Where the body transport keeps its tokens. Memory is the default; a native application plugs in
 * its platform's encrypted store (Keychain, Keystore, an encrypted file) by implementing this.
 * Browsers should use the cookie transport instead, where the refresh token is never visible to
 * script and the access token lives only in memory.
 */
export interface TokenStorage {
  load(): Tokens | null | Promise<Tokens | null>
  save(tokens: Tokens): void | Promise<void>
  clear(): void | Promise<void>
}

export function memoryStorage(): TokenStorage {
  let tokens: Tokens | null = null
  return {
    load: () => tokens,
    save: (next) => {
      tokens = { ...next }
    },
    clear: () => {
      tokens = null
    },
  }
}

import { causeChain } from '../errors.ts'
import { createRemoteJWKSet, type JWTVerifyGetKey } from 'jose'
import type { Configuration } from 'openid-client'
import type { OidcProviderConfig } from '../config.ts'
import type { Logger } from '../logger.ts'

/** openid-client, loaded when a provider is configured rather than at every start. */
let library: Promise<typeof import('openid-client')> | undefined
export const openidClient = () => (library ??= import('openid-client'))

/** How often discovery is tried again for a provider that was down (docs/oidc.md: every 60 s). */
export const DISCOVERY_RETRY_MS = 60_000
/** How long one discovery may take at start before the provider counts as unavailable for now. */
const DISCOVERY_TIMEOUT_SECONDS = 5

/** A configured provider, and what discovery found (null while it has not answered). */
export interface Provider {
  config: OidcProviderConfig
  client: Configuration | null
  /** The provider's signing keys (its jwks_uri), fetched and cached by jose. */
  jwks: JWTVerifyGetKey | null
}

/**
 * The identity providers from configuration, each found by discovery
 * (`{issuer}/.well-known/openid-configuration`, via openid-client). A provider that does not answer
 * at start is logged and shown as unavailable; it does not stop the service, and discovery is tried
 * again every minute until it answers.
 */
export class OidcProviders {
  private readonly providers = new Map<string, Provider>()
  private retry: NodeJS.Timeout | undefined

  constructor(configs: OidcProviderConfig[], private readonly logger: Logger, private readonly retryMs = DISCOVERY_RETRY_MS) {
    for (const config of configs) this.providers.set(config.name, { config, client: null, jwks: null })
  }

  /** Discovers every provider once; failures are logged and retried in the background. */
  async start(): Promise<void> {
    await this.discoverMissing()
    if (this.providers.size === 0) return
    this.retry = setInterval(() => void this.discoverMissing(), this.retryMs)
    this.retry.unref()
  }

  stop(): void {
    clearInterval(this.retry)
  }

  list(): { name: string; label: string; available: boolean }[] {
    return [...this.providers.values()].map((p) => ({ name: p.config.name, label: p.config.label, available: p.client !== null }))
  }

  get(name: string): Provider | undefined {
    return this.providers.get(name)
  }

  private async discoverMissing(): Promise<void> {
    await Promise.all([...this.providers.values()].filter((p) => p.client === null).map((p) => this.discover(p)))
  }

  private async discover(provider: Provider): Promise<void> {
    const { config } = provider
    const issuer = new URL(config.issuer)
    try {
      const oidc = await openidClient()
      const client = await oidc.discovery(
        issuer,
        config.clientId,
        config.clientSecret,
        config.clientSecret === undefined ? oidc.None() : undefined,
        // Plain http only for a loopback issuer outside production (src/config.ts refuses the rest).
        { timeout: DISCOVERY_TIMEOUT_SECONDS, ...(issuer.protocol === 'http:' ? { execute: [oidc.allowInsecureRequests] } : {}) },
      )
      const jwksUri = client.serverMetadata().jwks_uri
      if (!jwksUri) throw new Error('the provider publishes no jwks_uri')
      provider.jwks = createRemoteJWKSet(new URL(jwksUri))
      provider.client = client
      this.logger.info({ provider: config.name, issuer: config.issuer }, 'identity provider discovered')
    } catch (error) {
      this.logger.warn({ provider: config.name, issuer: config.issuer, err: { message: causeChain(error) } }, 'identity provider unavailable; discovery is tried again every minute')
    }
  }
}

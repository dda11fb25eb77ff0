import type { Configuration, KoaContextWithOIDC } from 'oidc-provider'
import type { JWK } from 'jose'
import type { Html } from '../html.ts'

/**
 * The scopes a client may ask for (docs/provider.md): OpenID Connect's (with `organizations`, the
 * person's organisations and roles in them), and the watchlists API's.
 */
export const OIDC_SCOPES = ['openid', 'profile', 'email', 'offline_access', 'organizations'] as const
export const RESOURCE_SCOPES = ['watchlists:read', 'watchlists:write'] as const
export const ALL_SCOPES = [...OIDC_SCOPES, ...RESOURCE_SCOPES]

/** Where each endpoint lives, outside the base path (docs/provider.md, Endpoints). */
export const ROUTES = {
  authorization: '/oauth/authorize',
  token: '/oauth/token',
  userinfo: '/oauth/userinfo',
  revocation: '/oauth/revoke',
  introspection: '/oauth/introspect',
  end_session: '/oauth/end-session',
  device_authorization: '/oauth/device/auth',
  code_verification: '/oauth/device',
  jwks: '/oauth/jwks',
  registration: '/oauth/register',
  // Never enabled below; named so that nothing of the library's lands outside /oauth/.
  pushed_authorization_request: '/oauth/par',
  backchannel_authentication: '/oauth/backchannel',
  challenge: '/oauth/challenge',
  credential: '/oauth/credential',
} as const

/** An account as the library sees it: its id and the claims each scope releases (`scope`: the scopes granted, space-separated). */
export interface ProviderAccount {
  accountId: string
  claims(use: string, scope: string): Promise<{ sub: string; name?: string; email?: string; email_verified?: boolean; organizations?: unknown[] }>
}

/** What the configuration needs from the rest of the module (src/provider/service.ts). */
export interface ConfigurationDeps {
  adapter: NonNullable<Configuration['adapter']>
  jwks: JWK[]
  cookieKeys: string[]
  /** The API a JWT access token is for by default: `{PUBLIC_URL}{BASE_PATH}`. */
  apiResource: string
  accessTokenTtlSeconds: number
  findClient: (clientId: string) => Promise<{ first_party?: boolean; pkce_required?: boolean } | undefined>
  findAccount: (accountId: string) => Promise<ProviderAccount | undefined>
  /** The keyed hash of a grant id: the grant reference a JWT access token carries. */
  grantReference: (grantId: string) => string
  /**
   * What a JWT access token for the API says the user may do: their global `roles`,
   * `permissions`, `app_metadata` and the claims version `cv` (src/authz/claims.ts, the one seam).
   */
  tokenClaims: (accountId: string) => Promise<Record<string, unknown>>
  /** The pages the library renders itself, in Portcullis's style. */
  pages: {
    error: (ctx: KoaContextWithOIDC, error: { error: string; error_description?: string }) => Html
    logout: (ctx: KoaContextWithOIDC, form: string) => Html
    loggedOut: (ctx: KoaContextWithOIDC) => Html
    deviceInput: (ctx: KoaContextWithOIDC, form: string, out?: { error_description?: string }, error?: unknown) => Html
    deviceConfirm: (ctx: KoaContextWithOIDC, form: string, clientName: string, userCode: string) => Html
    deviceDone: (ctx: KoaContextWithOIDC) => Html
  }
  /** A resource operators registered (src/provider/resources.ts): its scopes' names; null for an unknown one. */
  findResource: (uri: string) => Promise<{ scopes: string[] } | null>
  /** The library's error for a resource it does not know (errors.InvalidTarget). */
  invalidTarget: () => Error
  /** The library's outbound requests (back-channel logout, a client's jwks_uri). */
  fetch: (url: string | URL, options: RequestInit & { dispatcher?: unknown }) => Promise<Response>
  /** The library's interaction policy with Portcullis's checks added (see service.ts). */
  policy: NonNullable<NonNullable<Configuration['interactions']>['policy']>
}

// The library's objects are untyped (src/provider/oidc-provider.d.ts).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Loose = any
type Ctx = KoaContextWithOIDC

type TokenLike = { grantId?: string; kind: string; resourceServer?: unknown; accountId?: string }

/**
 * The library's configuration, strict: only the authorization code flow (with the device and
 * client-credentials grants for the clients that registered them), PKCE S256 for every client by
 * default, exact redirect URIs, and nothing advertised that does not work. Everything that is
 * Portcullis's own (accounts, sessions, keys, pages, storage) comes in through `deps`.
 */
export function providerConfiguration(deps: ConfigurationDeps): Configuration {
  const source = (ctx: KoaContextWithOIDC) => ctx.oidc.entities.AuthorizationCode ?? ctx.oidc.entities.RefreshToken ?? ctx.oidc.entities.DeviceCode
  return {
    adapter: deps.adapter,
    jwks: { keys: deps.jwks as never },
    cookies: {
      keys: deps.cookieKeys,
      long: { signed: true, httpOnly: true, sameSite: 'lax' },
      short: { signed: true, httpOnly: true, sameSite: 'lax' },
    },
    findAccount: async (_ctx: Ctx, sub: string) => deps.findAccount(sub),
    claims: {
      // `organizations` is listed under openid too: with an access token for userinfo, the library
      // releases only openid's claims in the ID token (conformIdTokenClaims), and the scope's claim
      // belongs in both. The account returns it only when `organizations` was granted.
      openid: ['sub', 'acr', 'amr', 'auth_time', 'organizations'],
      profile: ['name'],
      email: ['email', 'email_verified'],
      organizations: ['organizations'],
    },
    scopes: [...ALL_SCOPES],
    responseTypes: ['code'],
    clientDefaults: {
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'RS256',
    },
    clientAuthMethods: ['none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    extraClientMetadata: { properties: ['first_party', 'pkce_required'] },
    enabledJWA: {
      idTokenSigningAlgValues: ['RS256', 'EdDSA'],
      userinfoSigningAlgValues: ['RS256', 'EdDSA'],
      introspectionSigningAlgValues: ['RS256', 'EdDSA'],
      clientAuthSigningAlgValues: ['RS256', 'PS256', 'ES256', 'EdDSA', 'Ed25519'],
      requestObjectSigningAlgValues: ['RS256', 'PS256', 'ES256', 'EdDSA', 'Ed25519'],
    },
    pkce: {
      // Every client, unless an operator registered a confidential one that cannot send it.
      required: (_ctx: Ctx, client: Loose) => client.clientAuthMethod === 'none' || (client as unknown as { pkce_required?: boolean }).pkce_required !== false,
    },
    allowOmittingSingleRegisteredRedirectUri: false,
    // Browsers may call the token, userinfo and revocation endpoints only from a public client's own
    // redirect origins (and userinfo from any client's); CORS_ORIGINS plays no part here.
    clientBasedCORS: (ctx: Ctx, origin: string, client: Loose) =>
      origin !== 'null' && (ctx.oidc.route === 'userinfo' || client.clientAuthMethod === 'none') && (client.redirectUris as string[]).some((uri) => URL.parse(uri)?.origin === origin),
    clockTolerance: 30,
    fetch: deps.fetch,
    rotateRefreshToken: true,
    issueRefreshToken: async (_ctx: Ctx, client: Loose, code: Loose) => client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access'),
    routes: { ...ROUTES },
    ttl: {
      AccessToken: deps.accessTokenTtlSeconds,
      ClientCredentials: deps.accessTokenTtlSeconds,
      AuthorizationCode: 60,
      IdToken: 3600,
      DeviceCode: 600,
      Interaction: 3600,
      // A provider session is a Portcullis session and lives as long (7 days); a refresh token as long as its grant.
      Session: 7 * 24 * 3600,
      Grant: 30 * 24 * 3600,
      RefreshToken: 30 * 24 * 3600,
      BackchannelAuthenticationRequest: 600,
    },
    interactions: {
      url: (_ctx: Ctx, interaction: { uid: string }) => `/oauth/interaction/${interaction.uid}`,
      policy: deps.policy,
    },
    // A first-party client is not asked for consent: its grant is made for what it asks, within what it registered.
    loadExistingGrant: async (ctx: Ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session!.grantIdFor(ctx.oidc.client!.clientId)
      if (grantId) {
        const existing = await ctx.oidc.provider.Grant.find(grantId)
        if (existing) return existing
      }
      const client = await deps.findClient(ctx.oidc.client!.clientId)
      if (!client?.first_party || !ctx.oidc.session?.accountId) return undefined
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client!.clientId, accountId: ctx.oidc.session.accountId })
      const oidc = [...ctx.oidc.requestParamOIDCScopes].join(' ')
      if (oidc) grant.addOIDCScope(oidc)
      const asked = ctx.oidc.params!.scope ? String(ctx.oidc.params!.scope).split(' ') : []
      // Each resource's own scopes among those asked (the built-in API's, or a registered resource's).
      for (const [resource, server] of Object.entries((ctx.oidc.resourceServers ?? {}) as Record<string, { scope?: string }>)) {
        const offered = new Set((server.scope ?? '').split(' '))
        const resourceScopes = asked.filter((scope) => offered.has(scope)).join(' ')
        if (resourceScopes) grant.addResourceScope(resource, resourceScopes)
      }
      await grant.save()
      return grant
    },
    extraTokenClaims: async (ctx: Ctx, token: Loose) => {
      const t = token as unknown as TokenLike
      // Only the JWT access tokens for a resource carry these; opaque tokens keep them server-side.
      if (!t.resourceServer || !t.grantId) return undefined
      const from = source(ctx) as unknown as { acr?: string; authTime?: number } | undefined
      // A user's token says what they may do, like Portcullis's own (a client_credentials token has no user).
      const authz = t.accountId ? await deps.tokenClaims(t.accountId) : {}
      return { ...authz, ...(from?.acr ? { acr: from.acr } : {}), ...(from?.authTime ? { auth_time: from.authTime } : {}), gid: deps.grantReference(t.grantId) }
    },
    features: {
      devInteractions: { enabled: false },
      dPoP: { enabled: false },
      pushedAuthorizationRequests: { enabled: false },
      claimsParameter: { enabled: false },
      userinfo: { enabled: true },
      // A client revokes only its own tokens (RFC 7009 section 2.1); another's is refused, a public client learns nothing.
      revocation: {
        enabled: true,
        allowedPolicy: async (_ctx: Ctx, client: Loose, token: Loose) => token.clientId === client.clientId,
      },
      introspection: {
        enabled: true,
        // Confidential clients only (docs/provider.md, Endpoints), and only about their own tokens.
        allowedPolicy: async (_ctx: Ctx, client: Loose, token: Loose) => client.clientAuthMethod !== 'none' && (!('clientId' in token) || token.clientId === client.clientId),
      },
      clientCredentials: { enabled: true },
      deviceFlow: {
        enabled: true,
        userCodeInputSource: async (ctx: Ctx, form: string, out: Loose, error: unknown) => {
          ctx.type = 'html'
          ctx.body = deps.pages.deviceInput(ctx, form, out, error).value
        },
        userCodeConfirmSource: async (ctx: Ctx, form: string, client: Loose, _deviceInfo: unknown, userCode: string) => {
          ctx.type = 'html'
          ctx.body = deps.pages.deviceConfirm(ctx, form, client.clientName ?? client.clientId, userCode).value
        },
        successSource: async (ctx: Ctx) => {
          ctx.type = 'html'
          ctx.body = deps.pages.deviceDone(ctx).value
        },
      },
      rpInitiatedLogout: {
        enabled: true,
        logoutSource: async (ctx: Ctx, form: string) => {
          ctx.type = 'html'
          ctx.body = deps.pages.logout(ctx, form).value
        },
        postLogoutSuccessSource: async (ctx: Ctx) => {
          ctx.type = 'html'
          ctx.body = deps.pages.loggedOut(ctx).value
        },
      },
      backchannelLogout: { enabled: true },
      // Operators register clients (the registry); dynamic registration stays off (config refuses turning it on).
      registration: { enabled: false },
      resourceIndicators: {
        enabled: true,
        // At the authorization endpoint a request names the API unless it names another resource;
        // at the token endpoint, none: with `openid` and no `resource` the token is for userinfo.
        defaultResource: async (ctx: Ctx, _client: unknown, oneOf?: string | string[]) => {
          if (oneOf) return oneOf
          return ctx.oidc.route === 'authorization' || ctx.oidc.route === 'device_authorization' ? deps.apiResource : undefined
        },
        useGrantedResource: async () => false,
        // The built-in API, or a resource operators registered; anything else is invalid_target. A
        // token's audience is the resource itself, exactly as registered, with only its scopes.
        getResourceServerInfo: async (_ctx: Ctx, resource: string) => {
          const scopes = resource === deps.apiResource ? [...RESOURCE_SCOPES] : (await deps.findResource(resource))?.scopes
          if (!scopes) throw deps.invalidTarget()
          return {
            scope: scopes.join(' '),
            audience: resource,
            accessTokenTTL: deps.accessTokenTtlSeconds,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'EdDSA' } },
          }
        },
      },
    },
    renderError: async (ctx: Ctx, out: unknown) => {
      ctx.type = 'html'
      ctx.body = deps.pages.error(ctx, out as { error: string; error_description?: string }).value
    },
  }
}

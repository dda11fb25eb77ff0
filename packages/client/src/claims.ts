import type { AccessClaims } from './types.ts'

/**
 * A JWT's claims, unverified: the client reads its own access token to decide when to refresh,
 * which session is its own, and what to show (can()), never to trust anything. A malformed token
 * has no claims.
 */
export function claimsOf(jwt: string): Record<string, unknown> {
  try {
    const part = jwt.split('.')[1]!.replace(/-/g, '+').replace(/_/g, '/')
    const bytes = Uint8Array.from(atob(part), (char) => char.charCodeAt(0))
    const claims: unknown = JSON.parse(new TextDecoder().decode(bytes))
    return typeof claims === 'object' && claims !== null && !Array.isArray(claims) ? (claims as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : [])

/** What an access token says its user may do (docs/authorization.md, "The claims"). */
export function accessClaimsOf(jwt: string): AccessClaims {
  const claims = claimsOf(jwt)
  const metadata = claims.app_metadata
  const organization = typeof claims.org_id === 'string' ? claims.org_id : null
  return {
    roles: strings(claims.roles),
    permissions: strings(claims.permissions),
    app_metadata: typeof metadata === 'object' && metadata !== null && !Array.isArray(metadata) ? (metadata as Record<string, unknown>) : null,
    org_id: organization,
    org_roles: organization === null ? [] : strings(claims.org_roles),
    org_permissions: organization === null ? [] : strings(claims.org_permissions),
  }
}

/** `resource:action`, as the service defines a permission. */
export const PERMISSION_PATTERN = /^[a-z][a-z0-9_.-]{0,30}:[a-z*][a-z0-9_.*-]{0,30}$/

/** The owner's permission: everything inside its organisation, nothing outside it. */
const ORGANIZATION_ALL = 'organization:*'

/**
 * Whether `held` grants `wanted`: the same string; a held action with `*` matching any run of
 * characters (so `resource:*` grants every action of the resource); inside an organisation,
 * `organization:*` grants everything. The service's own rule (`grants` in
 * src/authz/permissions.ts), written again here because the package cannot import the server;
 * test/client/authorization.test.ts holds the two to the same answers.
 */
export function grants(held: readonly string[], wanted: string, inOrganization: boolean): boolean {
  const [resource, action] = split(wanted)
  for (const permission of held) {
    if (permission === wanted) return true
    if (inOrganization && permission === ORGANIZATION_ALL) return true
    const [heldResource, heldAction] = split(permission)
    if (heldResource === resource && heldAction.includes('*') && matches(heldAction, action)) return true
  }
  return false
}

function split(permission: string): [string, string] {
  const colon = permission.indexOf(':')
  return [permission.slice(0, colon), permission.slice(colon + 1)]
}

/** Whether `text` matches `pattern`, where each `*` stands for any run of characters (none too). */
function matches(pattern: string, text: string): boolean {
  const parts = pattern.split('*')
  const first = parts[0]!
  const last = parts[parts.length - 1]!
  if (text.length < first.length + last.length || !text.startsWith(first) || !text.endsWith(last)) return false
  // The leftmost place for each middle part leaves the most room for the rest.
  let at = first.length
  const end = text.length - last.length
  for (const middle of parts.slice(1, -1)) {
    const found = text.indexOf(middle, at)
    if (found < 0 || found + middle.length > end) return false
    at = found + middle.length
  }
  return true
}

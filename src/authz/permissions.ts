/**
 * The words of authorisation (docs/authorization.md): what a permission and a role name look like,
 * the limits that keep a token small, and the one rule for whether held permissions grant one.
 */

/** `resource:action`; an action may be `*` (every action of the resource) or hold `*` as a wildcard. */
export const PERMISSION_PATTERN = /^[a-z][a-z0-9_.-]{0,30}:[a-z*][a-z0-9_.*-]{0,30}$/
export const ROLE_NAME_PATTERN = /^[a-z][a-z0-9_-]{1,39}$/

/** Distinct permissions one user may hold globally, or in one organisation (a token stays under 4 KB). */
export const MAX_PERMISSIONS = 100
/** Global roles one user may hold. */
export const MAX_USER_ROLES = 20
/** app_metadata and user_metadata, serialised. */
export const MAX_METADATA_BYTES = 2048
/** The permission of an organisation's owner: every permission, inside that organisation. */
export const ORGANIZATION_ALL = 'organization:*'

/**
 * Whether `held` grants `wanted`: the same string; `resource:*` for any action of the resource; an
 * action pattern with `*` matching any run of characters; and, inside an organisation only,
 * `organization:*` for everything.
 */
export function grants(held: Iterable<string>, wanted: string, inOrganization: boolean): boolean {
  const [resource, action] = split(wanted)
  for (const permission of held) {
    if (permission === wanted) return true
    if (inOrganization && permission === ORGANIZATION_ALL) return true
    const [heldResource, heldAction] = split(permission)
    if (heldResource !== resource || !heldAction.includes('*')) continue
    if (wildcard(heldAction).test(action)) return true
  }
  return false
}

/** The permissions of `roles` together, sorted, each once; roles missing from the catalogue add nothing. */
export function unionOf(roles: Iterable<string>, permissionsOf: (role: string) => readonly string[] | undefined): string[] {
  const all = new Set<string>()
  for (const role of roles) for (const permission of permissionsOf(role) ?? []) all.add(permission)
  return [...all].sort()
}

/** Space-separated storage of role and permission lists (neither ever holds a space). */
export const words = (stored: string): string[] => stored.split(' ').filter(Boolean)

function split(permission: string): [string, string] {
  const colon = permission.indexOf(':')
  return [permission.slice(0, colon), permission.slice(colon + 1)]
}

const patterns = new Map<string, RegExp>()
function wildcard(action: string): RegExp {
  let pattern = patterns.get(action)
  if (!pattern) {
    pattern = new RegExp(`^${action.split('*').map((part) => part.replace(/[.\\-]/g, '\\$&')).join('.*')}$`)
    if (patterns.size < 10_000) patterns.set(action, pattern)
  }
  return pattern
}

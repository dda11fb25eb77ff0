import type { Kysely } from 'kysely'
import type { Database } from '../db/schema.ts'
import { words } from './permissions.ts'

type Executor = Kysely<Database>

/** The most organisations the `organizations` scope releases (API.md): the ID token stays small. */
export const MAX_RELEASED_ORGANIZATIONS = 50

/** One organisation as the OpenID provider's `organizations` claim lists it. */
export interface ReleasedOrganization {
  id: string
  name: string
  roles: string[]
}

/**
 * The user's organisations with their roles in each, for the OpenID provider's `organizations`
 * scope (ID token and userinfo; docs/provider.md): the ones joined first, at most
 * MAX_RELEASED_ORGANIZATIONS, so that the same request always answers the same list.
 */
export async function organizationsOf(db: Executor, userId: string): Promise<ReleasedOrganization[]> {
  const rows = await db
    .selectFrom('memberships')
    .innerJoin('organizations', 'organizations.id', 'memberships.organization_id')
    .select(['organizations.id', 'organizations.name', 'memberships.roles'])
    .where('memberships.user_id', '=', userId)
    .orderBy('memberships.joined_at')
    .orderBy('memberships.organization_id')
    .limit(MAX_RELEASED_ORGANIZATIONS)
    .execute()
  return rows.map((row) => ({ id: row.id, name: row.name, roles: words(row.roles) }))
}

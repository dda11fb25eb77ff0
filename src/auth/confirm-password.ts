import { recordEvent, type RequestContext } from '../audit/events.ts'
import type { Clock } from '../clock.ts'
import type { Db } from '../db/index.ts'
import type { UserRow } from '../db/repositories.ts'
import { AppError } from '../errors.ts'
import type { Limits } from '../limits/limits.ts'
import type { PasswordCheck } from './password-check.ts'

/**
 * The current password a sensitive action asks for (change-password, deletion, a change of
 * address), checked like a login: the attempt is claimed on the account's progressive delay before
 * it is judged, and a wrong one is an audited failed login (`reason` names the action) and
 * INVALID_CREDENTIALS, so a stolen access token is not a way to guess the password. One the hashing
 * could not judge (503) is taken back, as for a login.
 */
export async function confirmPassword(
  deps: { db: Db; clock: Clock; passwords: PasswordCheck; limits: Limits },
  user: Pick<UserRow, 'id' | 'email' | 'password_hash'>,
  password: string,
  reason: string,
  context: RequestContext,
): Promise<void> {
  await using attempt = await deps.limits.claimLoginAttempt(user.email)
  if (!(await deps.passwords.matches(user, password, context))) {
    attempt.judgedWrong()
    await recordEvent(deps.db.kysely, deps.clock, { type: 'login.failed', userId: user.id, reason, context })
    throw new AppError('INVALID_CREDENTIALS')
  }
  await deps.limits.loginSucceeded(user.email)
}

import { execFileSync } from 'node:child_process'

/**
 * A TOTP code from Debian's oathtool (`apt-get install oathtool`; .ci/run installs it), an
 * implementation independent of the one the service uses, at `at` (ms) plus `steps` 30-second steps.
 */
export function oathtool(secret: string, at: number, steps = 0): string {
  return execFileSync('oathtool', ['--totp', '-b', secret, '--now', `@${Math.floor(at / 1000) + steps * 30}`], { encoding: 'utf8' }).trim()
}

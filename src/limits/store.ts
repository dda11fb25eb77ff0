import type { Redis } from 'ioredis'
import { load } from '../optional.ts'
import type { Clock } from '../clock.ts'
import { AppError } from '../errors.ts'

/**
 * Counters for the abuse limits. In memory they are per instance; in Redis they are shared by
 * every instance pointed at it. Expiry is only for cleanup: the limit logic itself works from the
 * service's clock and keys that name their time window.
 */
/** An account's progressive delay (API.md, Abuse limits): free failures, then a wait doubling from 1 s up to a cap. */
export interface DelayPolicy {
  freeFailures: number
  maxDelayMs: number
}

/** The wait after `failures` consecutive failures (the Redis script below mirrors this formula). */
export function delayAfter(failures: number, policy: DelayPolicy): number {
  const over = failures - policy.freeFailures
  if (over < 0) return 0
  return Math.min(1000 * 2 ** Math.min(over, 30), policy.maxDelayMs)
}

/** The two keys of an account's delay: consecutive failures, and the time of the last one. */
export interface LoginKeys {
  failures: string
  last: string
}

export interface CounterStore {
  /**
   * One attempt against an account's progressive delay, atomically, across every instance sharing
   * the store: when the wait after the recorded failures has passed, the attempt is recorded as a
   * failure (count + 1, at `now`) before anyone judges it, and 0 is returned; otherwise nothing is
   * recorded and the milliseconds still to wait are returned, with the failure time recorded before
   * (to put back if the attempt proves right). A success deletes both keys.
   */
  claimAttempt(keys: LoginKeys, now: number, policy: DelayPolicy, ttlMs: number): Promise<{ waitMs: number; previousLast: string | null }>
  /** Takes back one claimed attempt (never below zero) and puts back the failure time before it. */
  unclaimAttempt(keys: LoginKeys, previousLast: string | null, ttlMs: number): Promise<void>
  /** Adds one and returns the new value; the key is dropped `ttlMs` after its last increment. */
  increment(key: string, ttlMs: number): Promise<number>
  get(key: string): Promise<string | null>
  set(key: string, value: string, ttlMs: number): Promise<void>
  delete(...keys: string[]): Promise<void>
  close(): Promise<void>
}

export class MemoryStore implements CounterStore {
  private readonly entries = new Map<string, { value: string; expiresAt: number }>()
  private readonly timer: NodeJS.Timeout

  constructor(private readonly clock: Clock) {
    this.timer = setInterval(() => this.sweep(), 60_000)
    this.timer.unref()
  }

  private sweep(): void {
    const now = this.clock.now()
    for (const [key, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(key)
  }

  private live(key: string) {
    const entry = this.entries.get(key)
    return entry && entry.expiresAt > this.clock.now() ? entry : undefined
  }

  async claimAttempt(keys: LoginKeys, now: number, policy: DelayPolicy, ttlMs: number): Promise<{ waitMs: number; previousLast: string | null }> {
    // One synchronous turn: nothing else on this instance runs between the read and the write.
    const failures = Number(this.live(keys.failures)?.value ?? 0)
    const last = this.live(keys.last)?.value ?? null
    const waitMs = last === null ? 0 : Number(last) + delayAfter(failures, policy) - now
    if (waitMs > 0) return { waitMs, previousLast: last }
    this.entries.set(keys.failures, { value: String(failures + 1), expiresAt: now + ttlMs })
    this.entries.set(keys.last, { value: String(now), expiresAt: now + ttlMs })
    return { waitMs: 0, previousLast: last }
  }

  async unclaimAttempt(keys: LoginKeys, previousLast: string | null, ttlMs: number): Promise<void> {
    const entry = this.live(keys.failures)
    if (entry && Number(entry.value) > 0) entry.value = String(Number(entry.value) - 1)
    if (previousLast === null) this.entries.delete(keys.last)
    else this.entries.set(keys.last, { value: previousLast, expiresAt: this.clock.now() + ttlMs })
  }

  async increment(key: string, ttlMs: number): Promise<number> {
    const next = Number(this.live(key)?.value ?? 0) + 1
    this.entries.set(key, { value: String(next), expiresAt: this.clock.now() + ttlMs })
    return next
  }

  async get(key: string): Promise<string | null> {
    return this.live(key)?.value ?? null
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    this.entries.set(key, { value, expiresAt: this.clock.now() + ttlMs })
  }

  async delete(...keys: string[]): Promise<void> {
    for (const key of keys) this.entries.delete(key)
  }

  async close(): Promise<void> {
    clearInterval(this.timer)
  }
}

/** Redis trouble answers 503 like a database outage, never a 500 and never a silent pass. */
async function available<T>(operation: Promise<T>): Promise<T> {
  try {
    return await operation
  } catch (error) {
    throw new AppError('SERVICE_UNAVAILABLE', { cause: error, headers: { 'retry-after': '5' } })
  }
}

/**
 * claimAttempt in one Redis script, so concurrent attempts from any number of instances are
 * counted one by one. KEYS: failures, last. ARGV: now, free failures, max delay (ms), ttl (ms).
 * The delay is delayAfter's formula above. Answers {ms to wait, the failure time before ('' for none)}.
 */
const CLAIM_ATTEMPT = `
local failures = tonumber(redis.call('GET', KEYS[1]) or '0')
local last = redis.call('GET', KEYS[2])
local now = tonumber(ARGV[1])
if last then
  local over = failures - tonumber(ARGV[2])
  if over >= 0 then
    local wait = math.min(1000 * 2 ^ math.min(over, 30), tonumber(ARGV[3]))
    local left = tonumber(last) + wait - now
    if left > 0 then return {math.ceil(left), last} end
  end
end
redis.call('SET', KEYS[1], failures + 1, 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
return {0, last or ''}`

/** unclaimAttempt: one less, never below zero; the failure time before put back (ARGV: it or '', ttl). */
const UNCLAIM_ATTEMPT = `
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
if ARGV[1] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
return 0`

export class RedisStore implements CounterStore {
  private readonly redis: Redis

  constructor(url: string, onError: (error: Error) => void) {
    // No offline queue and one retry: while Redis is away a limit check fails fast (503) instead of
    // piling requests up in memory.
    const { Redis: RedisClient } = load<typeof import('ioredis')>('ioredis')
    this.redis = new RedisClient(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: false, keyPrefix: 'portcullis:' })
    this.redis.on('error', onError)
  }

  async ready(): Promise<void> {
    if (this.redis.status === 'ready') return
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('Redis did not become ready within 5 s')), 5000)
      this.redis.once('ready', () => {
        clearTimeout(timer)
        resolve()
      })
    })
  }

  async claimAttempt(keys: LoginKeys, now: number, policy: DelayPolicy, ttlMs: number): Promise<{ waitMs: number; previousLast: string | null }> {
    const [wait, last] = (await available(this.redis.eval(CLAIM_ATTEMPT, 2, keys.failures, keys.last, now, policy.freeFailures, policy.maxDelayMs, ttlMs))) as [number, string]
    return { waitMs: Number(wait), previousLast: last === '' ? null : last }
  }

  async unclaimAttempt(keys: LoginKeys, previousLast: string | null, ttlMs: number): Promise<void> {
    await available(this.redis.eval(UNCLAIM_ATTEMPT, 2, keys.failures, keys.last, previousLast ?? '', ttlMs))
  }

  async increment(key: string, ttlMs: number): Promise<number> {
    const results = await available(this.redis.multi().incr(key).pexpire(key, ttlMs).exec())
    const [error, value] = results?.[0] ?? [new Error('no reply from Redis'), null]
    if (error) throw new AppError('SERVICE_UNAVAILABLE', { cause: error, headers: { 'retry-after': '5' } })
    return Number(value)
  }

  async get(key: string): Promise<string | null> {
    return available(this.redis.get(key))
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    await available(this.redis.set(key, value, 'PX', ttlMs))
  }

  async delete(...keys: string[]): Promise<void> {
    if (keys.length > 0) await available(this.redis.del(...keys))
  }

  async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect())
  }
}

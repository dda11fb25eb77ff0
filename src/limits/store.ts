import type { Redis } from 'ioredis'
import { load } from '../optional.ts'
import type { Clock } from '../clock.ts'
import type { Logger } from '../logger.ts'

/**
 * Counters for the abuse limits. In memory they are per instance; in Redis they are shared by
 * every instance pointed at it (and per instance again while Redis is away: RedisStore). Expiry
 * is only for cleanup: the limit logic itself works from the service's clock and keys that name
 * their time window.
 */
/** An account's progressive delay (docs/SECURITY.md, Abuse limits): free failures, then a wait doubling from 1 s up to a cap. */
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

  /** Forgets every count (the counts made alone while Redis was away, once it is back). */
  clear(): void {
    this.entries.clear()
  }

  async close(): Promise<void> {
    clearInterval(this.timer)
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

/** How long one Redis command may take before it counts as Redis being away. */
const COMMAND_TIMEOUT_MS = 1000
/** How long the start waits for a first connection before it goes on with this instance's counters. */
const START_WAIT_MS = 5000
/** How often, while falling back over a connection that is up, a write tells whether Redis takes them again. */
const PROBE_EVERY_MS = 2000

export interface RedisStoreOptions {
  /** This instance's own counters: the ones counted while Redis is away. */
  local: MemoryStore
  logger: Logger
  /** Each switch to this instance's own counters (one per outage); a metric counts them. */
  onFallback?: () => void
}

/**
 * The counters shared in Redis, falling back to this instance's own (`local`) while Redis is away
 * (docs/SECURITY.md, Abuse limits): Redis is a cache of counters, and losing it must not stop every sign-in
 * across the fleet, so no limited route answers 503 for it. While falling back each instance
 * counts alone, as without REDIS_URL: guessing stays bounded, by the number of instances times the
 * limits. Nothing waits on a dead Redis: no offline queue, one retry and a command timeout make a
 * command fail at once or within a second, and while falling back no request touches Redis at all.
 * The switch is logged (a warning, once per outage) and counted; the connection's 'ready' (ioredis
 * reconnects by itself), or a write probe when the connection stayed up but refused writes, brings
 * the shared counters back. Counts made alone are then dropped rather than carried into Redis: the
 * shared counts rule again, and a later outage starts from nothing rather than from stale counts
 * (an account whose owner has since signed in is not held back by old failures).
 */
export class RedisStore implements CounterStore {
  private readonly redis: Redis
  private readonly local: MemoryStore
  private readonly logger: Logger
  private readonly onFallback: () => void
  /** 'shared' while Redis answers; 'local' while this instance counts alone; 'starting' until start() decided. */
  private mode: 'starting' | 'shared' | 'local' = 'starting'
  private lastError: Error | undefined
  private closing = false
  private readonly probeTimer: NodeJS.Timeout

  constructor(url: string, options: RedisStoreOptions) {
    this.local = options.local
    this.logger = options.logger
    this.onFallback = options.onFallback ?? (() => {})
    const { Redis: RedisClient } = load<typeof import('ioredis')>('ioredis')
    this.redis = new RedisClient(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: COMMAND_TIMEOUT_MS,
      lazyConnect: false,
      keyPrefix: 'portcullis:',
    })
    // Every failed reconnection emits an error: kept for the one warning of the outage, not logged each time.
    this.redis.on('error', (error: Error) => (this.lastError = error))
    this.redis.on('close', () => {
      if (this.mode === 'shared') this.fallBack(this.lastError ?? new Error('connection closed'))
    })
    this.redis.on('ready', () => this.share())
    this.probeTimer = setInterval(() => void this.probe(), PROBE_EVERY_MS)
    this.probeTimer.unref()
  }

  /**
   * Waits for the first connection, at most 5 s and no longer than the first connection error.
   * A Redis that is down at start does not stop the service: it starts counting alone (logged and
   * counted like any outage) and shares the counters once Redis answers.
   */
  async start(): Promise<void> {
    if (this.redis.status !== 'ready') {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer)
          this.redis.off('ready', done)
          this.redis.off('error', done)
          resolve()
        }
        const timer = setTimeout(done, START_WAIT_MS)
        this.redis.once('ready', done)
        this.redis.once('error', done)
      })
    }
    if (this.redis.status === 'ready') this.share()
    else this.fallBack(this.lastError ?? new Error(`no connection within ${START_WAIT_MS / 1000} s`))
  }

  /** Whether this instance counts alone just now (the /metrics gauge an operator alerts on). */
  fallingBack(): boolean {
    return this.mode === 'local'
  }

  private fallBack(error: Error): void {
    if (this.mode === 'local' || this.closing) return
    this.mode = 'local'
    this.onFallback()
    this.logger.warn({ err: { message: error.message } }, 'redis unreachable: rate limits counted by this instance alone until it returns')
  }

  private share(): void {
    if (this.mode === 'shared' || this.closing) return
    const wasLocal = this.mode === 'local'
    this.mode = 'shared'
    if (!wasLocal) return
    this.local.clear()
    this.logger.info({}, 'redis reachable again: rate limits shared again')
  }

  /** Over a connection that is up but refused writes (out of memory, read-only), 'ready' never comes again. */
  private async probe(): Promise<void> {
    if (this.mode !== 'local' || this.redis.status !== 'ready') return
    try {
      await this.redis.set('limits:probe', '1', 'PX', PROBE_EVERY_MS * 5)
      this.share()
    } catch {
      // Still refused: the next probe tries again.
    }
  }

  /** The operation on the shared counters, or on this instance's own while Redis is away. */
  private async either<T>(shared: () => Promise<T>, local: (store: MemoryStore) => Promise<T>): Promise<T> {
    if (this.mode === 'shared') {
      try {
        return await shared()
      } catch (error) {
        this.fallBack(error instanceof Error ? error : new Error(String(error)))
      }
    }
    return local(this.local)
  }

  async claimAttempt(keys: LoginKeys, now: number, policy: DelayPolicy, ttlMs: number): Promise<{ waitMs: number; previousLast: string | null }> {
    return this.either(
      async () => {
        const [wait, last] = (await this.redis.eval(CLAIM_ATTEMPT, 2, keys.failures, keys.last, now, policy.freeFailures, policy.maxDelayMs, ttlMs)) as [number, string]
        return { waitMs: Number(wait), previousLast: last === '' ? null : last }
      },
      (local) => local.claimAttempt(keys, now, policy, ttlMs),
    )
  }

  async unclaimAttempt(keys: LoginKeys, previousLast: string | null, ttlMs: number): Promise<void> {
    await this.either(
      async () => void (await this.redis.eval(UNCLAIM_ATTEMPT, 2, keys.failures, keys.last, previousLast ?? '', ttlMs)),
      (local) => local.unclaimAttempt(keys, previousLast, ttlMs),
    )
  }

  async increment(key: string, ttlMs: number): Promise<number> {
    return this.either(
      async () => {
        const results = await this.redis.multi().incr(key).pexpire(key, ttlMs).exec()
        const [error, value] = results?.[0] ?? [new Error('no reply from Redis'), null]
        if (error) throw error
        return Number(value)
      },
      (local) => local.increment(key, ttlMs),
    )
  }

  async get(key: string): Promise<string | null> {
    return this.either(() => this.redis.get(key), (local) => local.get(key))
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    await this.either(
      async () => void (await this.redis.set(key, value, 'PX', ttlMs)),
      (local) => local.set(key, value, ttlMs),
    )
  }

  async delete(...keys: string[]): Promise<void> {
    if (keys.length === 0) return
    await this.either(
      async () => void (await this.redis.del(...keys)),
      (local) => local.delete(...keys),
    )
  }

  async close(): Promise<void> {
    this.closing = true
    clearInterval(this.probeTimer)
    await this.redis.quit().catch(() => this.redis.disconnect())
    await this.local.close()
  }
}

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

export interface CounterStore {
  /**
   * One attempt against an account's progressive delay, atomically, across every instance sharing
   * the store. The account's failures are a set of attempts, each under its own id with its time:
   * when the wait after the recorded ones has passed (the latest time plus delayAfter their
   * number), this attempt joins them under `attemptId` at `now` before anyone judges it, and 0 is
   * returned; otherwise nothing is recorded and the milliseconds still to wait are returned. The
   * set is forgotten `ttlMs` after its latest attempt; a success deletes it (delete(key)).
   */
  claimAttempt(key: string, attemptId: string, now: number, policy: DelayPolicy, ttlMs: number): Promise<number>
  /**
   * Takes back exactly the attempt recorded under `attemptId`, if it is still there: never another
   * one, whatever was claimed, taken back or cleared in between (a success, or the counts made alone
   * during a Redis outage being dropped), and a second take-back of it changes nothing. The set is
   * then forgotten `ttlMs` after its latest remaining attempt, as if this one had never been made.
   */
  unclaimAttempt(key: string, attemptId: string, now: number, ttlMs: number): Promise<void>
  /** Adds one and returns the new value; the key is dropped `ttlMs` after its last increment. */
  increment(key: string, ttlMs: number): Promise<number>
  get(key: string): Promise<string | null>
  set(key: string, value: string, ttlMs: number): Promise<void>
  delete(...keys: string[]): Promise<void>
  close(): Promise<void>
}

/** An account's recorded attempts in memory: each id with its time, and when the whole set is forgotten. */
interface AttemptSet {
  times: Map<string, number>
  expiresAt: number
}

/** The latest time in a set of attempts (0 for none). */
function latest(times: Map<string, number>): number {
  let last = 0
  for (const time of times.values()) if (time > last) last = time
  return last
}

export class MemoryStore implements CounterStore {
  private readonly entries = new Map<string, { value: string; expiresAt: number }>()
  private readonly attempts = new Map<string, AttemptSet>()
  private readonly timer: NodeJS.Timeout

  constructor(private readonly clock: Clock) {
    this.timer = setInterval(() => this.sweep(), 60_000)
    this.timer.unref()
  }

  private sweep(): void {
    const now = this.clock.now()
    for (const [key, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(key)
    for (const [key, set] of this.attempts) if (set.expiresAt <= now) this.attempts.delete(key)
  }

  private live(key: string) {
    const entry = this.entries.get(key)
    return entry && entry.expiresAt > this.clock.now() ? entry : undefined
  }

  private liveAttempts(key: string): AttemptSet | undefined {
    const set = this.attempts.get(key)
    return set && set.expiresAt > this.clock.now() ? set : undefined
  }

  async claimAttempt(key: string, attemptId: string, now: number, policy: DelayPolicy, ttlMs: number): Promise<number> {
    // One synchronous turn: nothing else on this instance runs between the read and the write.
    const set = this.liveAttempts(key)
    if (set && set.times.size > 0) {
      const waitMs = latest(set.times) + delayAfter(set.times.size, policy) - now
      if (waitMs > 0) return waitMs
    }
    const times = set?.times ?? new Map<string, number>()
    times.set(attemptId, now)
    this.attempts.set(key, { times, expiresAt: now + ttlMs })
    return 0
  }

  async unclaimAttempt(key: string, attemptId: string, now: number, ttlMs: number): Promise<void> {
    const set = this.liveAttempts(key)
    if (!set?.times.delete(attemptId)) return
    if (set.times.size === 0) this.attempts.delete(key)
    else set.expiresAt = latest(set.times) + ttlMs
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
    for (const key of keys) {
      this.entries.delete(key)
      this.attempts.delete(key)
    }
  }

  /** Forgets every count (the counts made alone while Redis was away, once it is back). */
  clear(): void {
    this.entries.clear()
    this.attempts.clear()
  }

  async close(): Promise<void> {
    clearInterval(this.timer)
  }
}

/**
 * claimAttempt in one Redis script, so concurrent attempts from any number of instances are
 * counted one by one. The account's attempts are a sorted set: member the attempt's id, score its
 * time. KEYS: the set. ARGV: now, free failures, max delay (ms), ttl (ms), the attempt's id. The
 * delay is delayAfter's formula above. Answers the ms to wait (0: recorded).
 */
const CLAIM_ATTEMPT = `
local failures = redis.call('ZCARD', KEYS[1])
local over = failures - tonumber(ARGV[2])
if failures > 0 and over >= 0 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local wait = math.min(1000 * 2 ^ math.min(over, 30), tonumber(ARGV[3]))
  local left = tonumber(last[2]) + wait - tonumber(ARGV[1])
  if left > 0 then return math.ceil(left) end
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 0`

/**
 * unclaimAttempt: removes this attempt's member only (ZREM of one that is gone does nothing), then
 * the set lives `ttl` after its latest remaining attempt. KEYS: the set. ARGV: the attempt's id, now, ttl (ms).
 */
const UNCLAIM_ATTEMPT = `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    local left = tonumber(last[2]) + tonumber(ARGV[3]) - tonumber(ARGV[2])
    if left > 0 then redis.call('PEXPIRE', KEYS[1], math.ceil(left)) else redis.call('DEL', KEYS[1]) end
  end
end
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

  async claimAttempt(key: string, attemptId: string, now: number, policy: DelayPolicy, ttlMs: number): Promise<number> {
    return this.either(
      async () => Number(await this.redis.eval(CLAIM_ATTEMPT, 1, key, now, policy.freeFailures, policy.maxDelayMs, ttlMs, attemptId)),
      (local) => local.claimAttempt(key, attemptId, now, policy, ttlMs),
    )
  }

  async unclaimAttempt(key: string, attemptId: string, now: number, ttlMs: number): Promise<void> {
    await this.either(
      async () => void (await this.redis.eval(UNCLAIM_ATTEMPT, 1, key, attemptId, now, ttlMs)),
      (local) => local.unclaimAttempt(key, attemptId, now, ttlMs),
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

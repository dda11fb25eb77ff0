import type { Redis } from 'ioredis'
import { load } from '../optional.ts'
import type { Clock } from '../clock.ts'
import { AppError } from '../errors.ts'

/**
 * Counters for the abuse limits. In memory they are per instance; in Redis they are shared by
 * every instance pointed at it. Expiry is only for cleanup: the limit logic itself works from the
 * service's clock and keys that name their time window.
 */
export interface CounterStore {
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

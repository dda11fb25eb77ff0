/**
 * Says yes to the first of each key's events in a window and no to the rest, in memory, for one
 * instance: so a burst of the same event writes one row a window, not one a request (the audit of
 * a throttled address, an API key's last use).
 * Keys are forgotten once their window is over; at most `max` are held, and while that many are
 * held within their windows a new key gets no (a bound on memory that a flood of distinct keys
 * cannot push past; those refusals still answer the same).
 */
export class OncePerWindow {
  /** Key to the start of its window, oldest first (a Map keeps insertion order; a key is re-inserted when its window starts again). */
  private readonly started = new Map<string, number>()

  constructor(
    private readonly windowMs: number,
    private readonly max = 10_000,
  ) {}

  first(key: string, now: number): boolean {
    for (const [oldest, at] of this.started) {
      if (now - at < this.windowMs) break
      this.started.delete(oldest)
    }
    const at = this.started.get(key)
    if (at !== undefined && now - at < this.windowMs) return false
    if (this.started.size >= this.max) return false
    this.started.delete(key)
    this.started.set(key, now)
    return true
  }
}

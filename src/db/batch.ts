interface Slot<Key, Result> {
  key: Key
  waiters: { resolve(result: Result): void; reject(error: unknown): void }[]
}

/**
 * Reads that requests make at about the same time (a user row, a page of watchlists), gathered
 * over one turn of the event loop and sent as one query: on PostgreSQL one round trip and one
 * executor start-up for the lot instead of one each. Requests asking for the same key share a
 * slot. `many` answers every key it is given, in order. A read joins the batch of the turn it
 * was asked in, so it sees every write committed before it was asked; if the query fails, every
 * read in the batch fails with that error, as each would have alone.
 */
export class ReadBatch<Key, Result> {
  private pending = new Map<string, Slot<Key, Result>>()
  private scheduled = false
  /** Queries sent and reads they answered, for /metrics and the tests. */
  readonly stats = { queries: 0, reads: 0 }

  constructor(
    private readonly idOf: (key: Key) => string,
    private readonly many: (keys: Key[]) => Promise<Result[]>,
    private readonly maxBatch = 256,
  ) {}

  load(key: Key): Promise<Result> {
    return new Promise<Result>((resolve, reject) => {
      const id = this.idOf(key)
      let slot = this.pending.get(id)
      if (!slot) {
        slot = { key, waiters: [] }
        this.pending.set(id, slot)
      }
      slot.waiters.push({ resolve, reject })
      if (!this.scheduled) {
        this.scheduled = true
        setImmediate(() => this.flush())
      }
    })
  }

  private flush(): void {
    this.scheduled = false
    const slots = [...this.pending.values()]
    this.pending = new Map()
    for (let i = 0; i < slots.length; i += this.maxBatch) void this.run(slots.slice(i, i + this.maxBatch))
  }

  private async run(slots: Slot<Key, Result>[]): Promise<void> {
    try {
      const results = await this.many(slots.map((slot) => slot.key))
      this.stats.queries++
      slots.forEach((slot, i) => {
        this.stats.reads += slot.waiters.length
        for (const waiter of slot.waiters) waiter.resolve(results[i]!)
      })
    } catch (error) {
      for (const slot of slots) for (const waiter of slot.waiters) waiter.reject(error)
    }
  }
}

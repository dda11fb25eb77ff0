type TabMessage = { type: 'token'; accessToken: string } | { type: 'ended' }

/**
 * The tabs of one browser share one refresh cookie, so they share one session: a refresh is done
 * by one tab at a time (a Web Lock) and its result is handed to the others (a BroadcastChannel),
 * and a session ended in one tab ends in all. Browsers only; elsewhere the client works alone.
 */
export class Tabs {
  private readonly channel: BroadcastChannel
  private readonly lockName: string

  static available(): boolean {
    return typeof BroadcastChannel === 'function' && typeof navigator === 'object' && navigator !== null && 'locks' in navigator
  }

  constructor(name: string, handlers: { token(accessToken: string): void; ended(): void }) {
    this.lockName = `${name}:refresh`
    this.channel = new BroadcastChannel(name)
    this.channel.onmessage = (event: MessageEvent<TabMessage>) => {
      if (event.data?.type === 'token' && typeof event.data.accessToken === 'string') handlers.token(event.data.accessToken)
      else if (event.data?.type === 'ended') handlers.ended()
    }
  }

  /**
   * Runs `task` while no other tab runs one. A tab that waited may have been handed a fresh token
   * meanwhile: the holder posts it before releasing the lock, and one turn of the event loop after
   * the grant lets it arrive before `task` decides whether a refresh is still needed.
   */
  async exclusive<T>(task: () => Promise<T>): Promise<T> {
    return await navigator.locks.request(this.lockName, async () => {
      await new Promise((resolve) => setTimeout(resolve, 0))
      return task()
    })
  }

  shareToken(accessToken: string): void {
    this.channel.postMessage({ type: 'token', accessToken } satisfies TabMessage)
  }

  shareEnded(): void {
    this.channel.postMessage({ type: 'ended' } satisfies TabMessage)
  }

  close(): void {
    this.channel.close()
  }
}

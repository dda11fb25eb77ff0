type TabMessage =
  | { type: 'token'; accessToken: string; id: string }
  | { type: 'ack'; id: string }
  | { type: 'ended' }

/** How long a refreshing tab waits for the others to confirm (a frozen background tab never does). */
const ACK_TIMEOUT_MS = 1000

/**
 * The tabs of one browser share one refresh cookie, so they share one session: a refresh is done
 * by one tab at a time (a Web Lock) and its result is handed to the others (a BroadcastChannel),
 * and a session ended in one tab ends in all. Browsers only; elsewhere the client works alone.
 *
 * Lock grants and channel messages travel separately, so a tab waiting for the lock could be let
 * in before the new token reaches it, and refresh again. To rule that out, each open tab holds a
 * shared presence lock, and the refreshing tab keeps the refresh lock until every other open tab
 * has confirmed it holds the new token.
 */
export class Tabs {
  private readonly channel: BroadcastChannel
  private readonly refreshLock: string
  private readonly presenceLock: string
  private readonly awaitingAcks = new Map<string, () => void>()
  private leave: (() => void) | null = null

  static available(): boolean {
    return typeof BroadcastChannel === 'function' && typeof navigator === 'object' && navigator !== null && 'locks' in navigator
  }

  constructor(name: string, handlers: { token(accessToken: string): void; ended(): void }) {
    this.refreshLock = `${name}:refresh`
    this.presenceLock = `${name}:tab`
    void navigator.locks.request(this.presenceLock, { mode: 'shared' }, () => new Promise<void>((resolve) => (this.leave = resolve)))
    this.channel = new BroadcastChannel(name)
    this.channel.onmessage = (event: MessageEvent<TabMessage>) => {
      const message = event.data
      if (message?.type === 'token' && typeof message.accessToken === 'string') {
        handlers.token(message.accessToken)
        this.post({ type: 'ack', id: message.id })
      } else if (message?.type === 'ack') {
        this.awaitingAcks.get(message.id)?.()
      } else if (message?.type === 'ended') {
        handlers.ended()
      }
    }
  }

  /** Runs `task` while no other tab runs one. */
  async exclusive<T>(task: () => Promise<T>): Promise<T> {
    return await navigator.locks.request(this.refreshLock, task)
  }

  /** Hands a new access token to the other tabs; resolves once each has it (or after a second). */
  async shareToken(accessToken: string): Promise<void> {
    const { held = [] } = await navigator.locks.query()
    const others = held.filter((lock) => lock.name === this.presenceLock).length - 1
    const id = crypto.randomUUID()
    await new Promise<void>((resolve) => {
      let remaining = others
      const done = () => {
        clearTimeout(timer)
        this.awaitingAcks.delete(id)
        resolve()
      }
      const timer = setTimeout(done, others > 0 ? ACK_TIMEOUT_MS : 0)
      this.awaitingAcks.set(id, () => {
        if (--remaining <= 0) done()
      })
      this.post({ type: 'token', accessToken, id })
    })
  }

  shareEnded(): void {
    this.post({ type: 'ended' })
  }

  private post(message: TabMessage): void {
    this.channel.postMessage(message)
  }

  close(): void {
    this.channel.close()
    this.leave?.()
  }
}

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Webhook } from 'standardwebhooks'

/**
 * A webhook receiver on loopback, as an application would run one (docs/webhooks.md): every POST is
 * recorded and verified with the `standardwebhooks` library, and the test decides each answer.
 * Works for a service in this process or in another one: it only needs the URL.
 */

/** The body Portcullis sends: `{type, timestamp, data: {user_id, sequence, email?, ...}}`. */
export interface WebhookPayload {
  type: string
  timestamp: string
  data: { user_id: string; sequence: number; email?: string; [field: string]: unknown }
}

/** What the receiver answers one request: a status code, or `'hang'` (held open until `release()`). */
export type Answer = number | 'hang'

export interface ReceivedDelivery {
  path: string
  /** Lower-cased names, as node gives them. */
  headers: Record<string, string>
  body: string
  /** The body parsed as JSON whether or not it verified; null when it is not JSON. */
  payload: WebhookPayload | null
  /** The library accepted it with one of `secrets` (signature and a timestamp within its 5 minutes of real time). */
  verified: boolean
  /** Why the library refused it with every secret (the last refusal), or null. */
  error: string | null
  answer: Answer
}

/** The library's verdict on a body and its headers under one secret: null when accepted, else its message. */
export function verifyError(secret: string, body: string, headers: Record<string, string>): string | null {
  try {
    new Webhook(secret).verify(body, headers)
    return null
  } catch (error) {
    return (error as Error).message
  }
}

/**
 * Whether one of the delivery's signatures is this secret's, computed with the library's `sign`
 * for the delivery's own id and timestamp: the check that does not depend on the receiver's clock
 * (tests that move the service's clock by hours cannot pass `verify`'s 5-minute window).
 */
export function signedWith(secret: string, delivery: Pick<ReceivedDelivery, 'headers' | 'body'>): boolean {
  const timestamp = Number(delivery.headers['webhook-timestamp'])
  const expected = new Webhook(secret).sign(delivery.headers['webhook-id'] ?? '', new Date(timestamp * 1000), delivery.body)
  return (delivery.headers['webhook-signature'] ?? '').split(' ').includes(expected)
}

export class WebhookReceiver {
  /** Every request received, in arrival order. */
  readonly deliveries: ReceivedDelivery[] = []
  /** The secrets a delivery verifies with (any one will do): set them once the endpoint is made. */
  secrets: string[] = []
  /** Answers for the next requests, taken first, in order. */
  readonly next: Answer[] = []
  /** The answer when `next` is empty. */
  answer: (delivery: ReceivedDelivery) => Answer = () => 200
  url = ''
  private readonly hanging: ServerResponse[] = []
  private waiters: { ready: () => boolean; resolve: () => void }[] = []
  private readonly server = createServer((request, response) => void this.receive(request, response))

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`
    return this
  }

  /** Requests held open by a `'hang'` answer and not released yet. */
  get held(): number {
    return this.hanging.length
  }

  /** Answers every held request now with `status`. */
  release(status = 200): void {
    for (const response of this.hanging.splice(0)) response.writeHead(status).end()
  }

  /** The deliveries that match, in arrival order. */
  where(match: (delivery: ReceivedDelivery) => boolean): ReceivedDelivery[] {
    return this.deliveries.filter(match)
  }

  /** Resolves with the matching deliveries once there are at least `count` of them; fails after `timeoutMs`. */
  async waitFor(count: number, options: { match?: (delivery: ReceivedDelivery) => boolean; timeoutMs?: number } = {}): Promise<ReceivedDelivery[]> {
    const match = options.match ?? (() => true)
    const ready = () => this.where(match).length >= count
    if (!ready()) {
      const timeoutMs = options.timeoutMs ?? 5000
      await new Promise<void>((resolve, reject) => {
        const waiter = { ready, resolve: () => (clearTimeout(timer), resolve()) }
        const timer = setTimeout(() => {
          this.waiters = this.waiters.filter((other) => other !== waiter)
          reject(new Error(`the receiver got ${this.where(match).length} of ${count} deliveries within ${timeoutMs} ms`))
        }, timeoutMs)
        this.waiters.push(waiter)
      })
    }
    return this.where(match)
  }

  /** Resolves once `count` requests have been answered `'hang'` (released or not). */
  async waitForHeld(count: number, timeoutMs = 5000): Promise<void> {
    await this.waitFor(count, { match: (delivery) => delivery.answer === 'hang', timeoutMs })
  }

  /** Answers what is still held (503) and stops listening. */
  async close(): Promise<void> {
    this.release(503)
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private async receive(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString('utf8')
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(request.headers)) if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value
    let payload: WebhookPayload | null = null
    try {
      payload = JSON.parse(body) as WebhookPayload
    } catch {
      payload = null
    }
    let error: string | null = this.secrets.length === 0 ? 'no secret to verify with' : null
    for (const secret of this.secrets) {
      error = verifyError(secret, body, headers)
      if (error === null) break
    }
    const delivery: ReceivedDelivery = { path: request.url ?? '', headers, body, payload, verified: error === null, error, answer: 200 }
    delivery.answer = this.next.length > 0 ? this.next.shift()! : this.answer(delivery)
    this.deliveries.push(delivery)
    if (delivery.answer === 'hang') this.hanging.push(response)
    else response.writeHead(delivery.answer).end()
    // Waiters are told after the answer is decided, so one waiting for a held request sees it held.
    this.waiters = this.waiters.filter((waiter) => {
      if (!waiter.ready()) return true
      waiter.resolve()
      return false
    })
  }
}

/** A receiver listening on 127.0.0.1 on a port the OS chose. */
export function startWebhookReceiver(): Promise<WebhookReceiver> {
  return new WebhookReceiver().start()
}

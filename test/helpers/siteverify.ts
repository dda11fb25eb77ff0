import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * How the stand-in answers: `judge` checks the secret and the token as the provider would; the
 * others are the ways a provider fails (the server must then refuse with 503, never let through).
 */
export type Mode = 'judge' | 'garbage' | 'error' | 'secret-refused' | 'close' | 'hang'

export interface Received {
  path: string
  contentType: string
  form: Record<string, string>
}

/**
 * A bot-protection provider's siteverify endpoint on loopback (docs/SECURITY.md, "Bot protection"),
 * answering as Turnstile and hCaptcha do: a form POST of `secret`, `response`, `remoteip`, JSON
 * `{success, "error-codes"}` back. It accepts only `secret` with the token `good`, records every
 * request, and can fail in each way a provider can. Serves a service in this process or another.
 */
export class Siteverify {
  mode: Mode = 'judge'
  readonly received: Received[] = []
  private readonly server: Server
  url = ''

  constructor(
    private readonly secret: string,
    private readonly good: string,
  ) {
    this.server = createServer((request, response) => {
      void readBody(request).then((body) => {
        this.received.push({ path: request.url ?? '', contentType: String(request.headers['content-type']), form: Object.fromEntries(new URLSearchParams(body)) })
        const form = this.received.at(-1)!.form
        const json = (status: number, value: unknown) => response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value))
        switch (this.mode) {
          case 'hang':
            return
          case 'close':
            return request.socket.destroy()
          case 'garbage':
            return response.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>Down for maintenance</body></html>')
          case 'error':
            return json(502, { success: false })
          case 'secret-refused':
            return json(200, { success: false, 'error-codes': ['invalid-input-secret'] })
          case 'judge': {
            const codes = [...(form.secret === this.secret ? [] : ['invalid-input-secret']), ...(form.response === this.good ? [] : ['invalid-input-response'])]
            return json(200, codes.length > 0 ? { success: false, 'error-codes': codes } : { success: true, challenge_ts: new Date().toISOString(), hostname: 'localhost', 'error-codes': [] })
          }
        }
      })
    })
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/siteverify`
    return this
  }

  async close(): Promise<void> {
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
  })
}

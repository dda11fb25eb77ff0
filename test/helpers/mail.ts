import type { AddressInfo } from 'node:net'
import { SMTPServer } from 'smtp-server'

export interface ReceivedMail {
  to: string[]
  raw: string
}

/**
 * A real SMTP server on loopback. The app under test sends through nodemailer to it, exactly as
 * it would to a production relay, and tests read what arrived.
 */
export class MailCatcher {
  readonly received: ReceivedMail[] = []
  private waiters: { match: (mail: ReceivedMail) => boolean; resolve: (mail: ReceivedMail) => void }[] = []
  private server: SMTPServer
  url = ''

  /** SMTP reply codes to refuse the next recipients with, one per message, in order (451, 550...). */
  readonly refusals: number[] = []

  constructor() {
    this.server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      onRcptTo: (_address, _session, callback) => {
        const code = this.refusals.shift()
        if (code === undefined) return callback()
        callback(Object.assign(new Error(code < 500 ? 'Try again later' : 'Mailbox unavailable'), { responseCode: code }))
      },
      onData: (stream, session, callback) => {
        const chunks: Buffer[] = []
        stream.on('data', (chunk: Buffer) => chunks.push(chunk))
        stream.on('end', () => {
          const mail = { to: session.envelope.rcptTo.map((r) => r.address.toLowerCase()), raw: Buffer.concat(chunks).toString('utf8') }
          this.received.push(mail)
          this.waiters = this.waiters.filter((waiter) => {
            if (!waiter.match(mail)) return true
            waiter.resolve(mail)
            return false
          })
          callback()
        })
      },
    })
  }

  async start(listenOn = 0): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(listenOn, '127.0.0.1', resolve))
    const { port } = this.server.server.address() as AddressInfo
    this.url = `smtp://127.0.0.1:${port}`
    return this
  }

  /** The next mail to this address not yet consumed; waits up to `ms` for it to arrive. */
  async next(to: string, ms = 5000): Promise<ReceivedMail> {
    const match = (mail: ReceivedMail) => mail.to.includes(to.toLowerCase())
    const index = this.received.findIndex(match)
    if (index >= 0) return this.received.splice(index, 1)[0]!
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no mail to ${to} within ${ms} ms`)), ms)
      this.waiters.push({
        match,
        resolve: (mail) => {
          clearTimeout(timer)
          this.received.splice(this.received.indexOf(mail), 1)
          resolve(mail)
        },
      })
    })
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}

/** The mail's text as a mail client shows it (quoted-printable decoded). */
export function mailText(mail: ReceivedMail): string {
  const bytes = mail.raw
    .replace(/=\r?\n/g, '')
    .replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
  return Buffer.from(bytes, 'latin1').toString('utf8')
}

/** The one-time token a mail carries: the bare code on its own line. */
export function tokenFromMail(mail: ReceivedMail): string {
  const match = /^([A-Za-z0-9_-]{43})\r?$/m.exec(mailText(mail))
  if (!match) throw new Error(`no token in mail:\n${mail.raw}`)
  return match[1]!
}

function decodeQuotedPrintable(body: string): string {
  const bytes = body.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
  return Buffer.from(bytes, 'latin1').toString('utf8')
}

/**
 * The parts of a multipart mail by content type (`text/plain`, `text/html`), each decoded from its
 * transfer encoding, as a mail client would show them. Throws if the mail is not multipart.
 */
export function mailParts(raw: string): { contentType: string; parts: Record<string, string> } {
  const [head = '', ...rest] = raw.split(/\r?\n\r?\n/)
  const headers = head.replace(/\r?\n[ \t]+/g, ' ')
  const contentType = /^content-type:\s*([^;\r\n]+)/im.exec(headers)?.[1]?.trim().toLowerCase() ?? ''
  const boundary = /boundary="?([^";\r\n]+)"?/i.exec(headers)?.[1]
  if (!boundary) throw new Error(`not a multipart mail:\n${raw}`)
  const body = rest.join('\r\n\r\n')
  const parts: Record<string, string> = {}
  for (const chunk of body.split(`--${boundary}`).slice(1)) {
    if (chunk.startsWith('--')) break
    const [partHead = '', ...partBody] = chunk.replace(/^\r?\n/, '').split(/\r?\n\r?\n/)
    const type = /^content-type:\s*([^;\r\n]+)/im.exec(partHead)?.[1]?.trim().toLowerCase() ?? 'text/plain'
    const encoding = /^content-transfer-encoding:\s*(\S+)/im.exec(partHead)?.[1]?.toLowerCase() ?? '7bit'
    const content = partBody.join('\r\n\r\n').replace(/\r?\n$/, '')
    const decoded =
      encoding === 'quoted-printable' ? decodeQuotedPrintable(content)
      : encoding === 'base64' ? Buffer.from(content, 'base64').toString('utf8')
      : content
    parts[type] = decoded.replace(/\r\n/g, '\n')
  }
  return { contentType, parts }
}

/** The link a mail's text part carries (the line that is a URL). */
export function linkFromMail(mail: ReceivedMail): string {
  const text = mailParts(mail.raw).parts['text/plain'] ?? ''
  const match = /^(https?:\/\/\S+)\r?$/m.exec(text)
  if (!match) throw new Error(`no link in mail:\n${text}`)
  return match[1]!
}

/**
 * The 6-digit code of an e-mailed sign-in: the line of the text part that is only the code. Read
 * from the body, never the subject, which carries no code (docs/SECURITY.md, the third review).
 */
export function signInCodeFromMail(mail: ReceivedMail): string {
  const text = mailParts(mail.raw).parts['text/plain'] ?? ''
  const match = /^(\d{6})$/m.exec(text)
  if (!match) throw new Error(`no sign-in code in mail:\n${text}`)
  return match[1]!
}

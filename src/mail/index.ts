import { randomBytes } from 'node:crypto'
import { mkdir, rename, writeFile } from 'node:fs/promises'
import path from 'node:path'
import type Nodemailer from 'nodemailer'
import type { Logger } from '../logger.ts'
import { load } from '../optional.ts'

export interface MailMessage {
  to: string
  subject: string
  /** The plain-text part; the HTML part says the same with the link as a button. */
  text: string
  html: string
}

export interface MailTransport {
  send(message: MailMessage): Promise<void>
  close(): void
}

export interface MailerOptions {
  smtpUrl?: string | undefined
  from: string
  outboxDir: string
  logger: Logger
}

export { passwordResetMail, securityNoticeMail, verificationMail, type MailBrand } from './templates.ts'

/** Real SMTP when SMTP_URL is set; otherwise (development only) .eml files in the outbox. */
export function createMailTransport(options: MailerOptions): MailTransport {
  if (options.smtpUrl) {
    // Bounded waits: a relay that stalls must fail the attempt (the queue retries it) well within
    // the queue's lease, rather than hold it for nodemailer's default of an hour.
    const nodemailer = load<typeof Nodemailer>('nodemailer')
    const transport = nodemailer.createTransport({ url: withoutMailerLogging(options.smtpUrl), connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000 })
    return {
      async send(message) {
        await transport.sendMail({ from: options.from, ...message })
      },
      close: () => transport.close(),
    }
  }
  let sequence = 0
  return {
    async send(message) {
      await mkdir(options.outboxDir, { recursive: true, mode: 0o700 })
      const file = path.join(options.outboxDir, `${Date.now()}-${process.pid}-${++sequence}.eml`)
      // Written aside and renamed, so a reader never sees half a message.
      await writeFile(`${file}.part`, outboxMessage(options.from, message), { mode: 0o600 })
      await rename(`${file}.part`, file)
      // The log says where the mail is, never what it says: the body holds a link or a code, and
      // the subject is left out too, so no part of a mail ever reaches a log whatever a template
      // puts in it. The recipient stays, as the one way a developer finds their mail among the
      // files: an address is not a credential, this transport exists only outside production, and
      // nothing else on the line (the file's name is a time, a pid and a counter) tells a secret.
      options.logger.info({ mail: { to: message.to, file } }, 'mail written to the outbox')
    },
    close() {},
  }
}

/** nodemailer's own options a URL may carry (`?logger=true&debug=true`) that print whole messages, subject and body, to stdout. */
const MAILER_LOGGING = ['logger', 'debug', 'transactionLog']

/**
 * SMTP_URL without the query options that would make nodemailer log each message in full: logs
 * never carry a mail's subject or body (docs/SECURITY.md), whatever the URL asks. A URL without
 * them is passed on untouched.
 */
export function withoutMailerLogging(smtpUrl: string): string {
  let url: URL
  try {
    url = new URL(smtpUrl)
  } catch {
    return smtpUrl
  }
  if (!MAILER_LOGGING.some((name) => url.searchParams.has(name))) return smtpUrl
  for (const name of MAILER_LOGGING) url.searchParams.delete(name)
  return url.toString()
}

/**
 * A readable .eml (8bit, RFC 6152) so a developer can copy the link straight out of the file, as
 * multipart/alternative like the SMTP mail. Every header value here is ours or an address that
 * passed validation (no CR or LF); a non-ASCII subject is encoded (RFC 2047).
 */
function outboxMessage(from: string, message: MailMessage): string {
  const boundary = `portcullis-${randomBytes(12).toString('hex')}`
  const part = (type: string, body: string) =>
    [`--${boundary}`, `Content-Type: ${type}; charset=utf-8`, 'Content-Transfer-Encoding: 8bit', '', body].join('\r\n')
  return [
    `From: ${from}`,
    `To: ${message.to}`,
    `Subject: ${encodeHeader(message.subject)}`,
    `Date: ${new Date().toUTCString()}`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/alternative; boundary="${boundary}"`,
    '',
    part('text/plain', message.text),
    part('text/html', message.html),
    `--${boundary}--`,
    '',
  ].join('\r\n')
}

function encodeHeader(value: string): string {
  return /^[\x20-\x7e]*$/.test(value) ? value : `=?UTF-8?B?${Buffer.from(value).toString('base64')}?=`
}

import { mkdir, rename, writeFile } from 'node:fs/promises'
import path from 'node:path'
import nodemailer from 'nodemailer'
import type { Logger } from '../logger.ts'

export interface MailMessage {
  to: string
  subject: string
  text: string
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

/** Real SMTP when SMTP_URL is set; otherwise (development only) .eml files in the outbox. */
export function createMailTransport(options: MailerOptions): MailTransport {
  if (options.smtpUrl) {
    const transport = nodemailer.createTransport(options.smtpUrl)
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
      // The link inside is a secret: the log says where the mail is, never what it says.
      options.logger.info({ mail: { to: message.to, subject: message.subject, file } }, 'mail written to the outbox')
    },
    close() {},
  }
}

/**
 * A readable .eml (8bit, RFC 6152) so a developer can copy the link straight out of the file.
 * Every header value here is ours or an address that passed validation (no CR or LF).
 */
function outboxMessage(from: string, message: MailMessage): string {
  return [
    `From: ${from}`,
    `To: ${message.to}`,
    `Subject: ${message.subject}`,
    `Date: ${new Date().toUTCString()}`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: 8bit',
    '',
    message.text,
    '',
  ].join('\r\n')
}

export function verificationMail(to: string, link: string, token: string): MailMessage {
  return {
    to,
    subject: 'Verify your e-mail address',
    text: [
      'Welcome to Portcullis.',
      '',
      'Open this link to verify your e-mail address (it works once, for 24 hours):',
      link,
      '',
      'Or give this verification code to the application:',
      token,
      '',
      'If you did not create an account, ignore this message.',
    ].join('\n'),
  }
}

export function passwordResetMail(to: string, link: string, token: string): MailMessage {
  return {
    to,
    subject: 'Reset your password',
    text: [
      'Someone asked to reset the password of your Portcullis account.',
      '',
      'Open this link to choose a new password (it works once, for 1 hour):',
      link,
      '',
      'Or give this reset code to the application:',
      token,
      '',
      'If it was not you, ignore this message: your password stays as it is.',
    ].join('\n'),
  }
}

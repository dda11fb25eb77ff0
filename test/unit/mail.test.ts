import assert from 'node:assert/strict'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, mock, test } from 'node:test'
import type { Logger } from '../../src/logger.ts'
import { createMailTransport, passwordResetMail, verificationMail, type MailMessage } from '../../src/mail/index.ts'
import * as templates from '../../src/mail/templates.ts'
import { MailCatcher, mailParts } from '../helpers/mail.ts'

const silent: Logger = { info() {}, warn() {}, error() {} }

describe('mail', () => {
  test('the development outbox writes multipart/alternative: the text and the HTML part, whole and readable', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-outbox-'))
    try {
      const transport = createMailTransport({ from: 'Portcullis <no-reply@localhost>', outboxDir: dir, logger: silent })
      const link = 'http://localhost:3000/reset-password?token=abc&x=1'
      await transport.send(passwordResetMail({ appName: 'Zürich Tools' }, 'ada@example.com', link, 'abc'))
      const [file, ...others] = readdirSync(dir)
      assert.equal(others.length, 0, 'no half-written .part file is left')
      assert.match(file!, /\.eml$/)
      assert.equal(statSync(path.join(dir, file!)).mode & 0o777, 0o600)
      const raw = readFileSync(path.join(dir, file!), 'utf8')
      assert.match(raw, /^Subject: Reset your password\r$/m)
      const { contentType, parts } = mailParts(raw)
      assert.equal(contentType, 'multipart/alternative')
      assert.ok(parts['text/plain']!.includes(`\n${link}\n`), 'the link is copyable as is from the text part')
      assert.ok(parts['text/plain']!.includes('your Zürich Tools account'))
      assert.ok(parts['text/html']!.includes('href="http://localhost:3000/reset-password?token=abc&amp;x=1"'))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('an HTML mail escapes what it is given and needs neither images nor styles to be read', () => {
    const message = verificationMail({ appName: '<b>Evil</b>' }, 'ada@example.com', 'https://x.example/v?a="1"&token=t', 't')
    assert.ok(!message.html.includes('<b>Evil</b>'))
    assert.ok(message.html.includes('&lt;b&gt;Evil&lt;/b&gt;'))
    assert.ok(message.html.includes('href="https://x.example/v?a=&quot;1&quot;&amp;token=t"'))
    assert.doesNotMatch(message.html, /<img|<link|<script|url\(/i)
    // With styles ignored, the link still stands as a link and as its full text.
    assert.ok(message.html.includes('>https://x.example/v?a=&quot;1&quot;&amp;token=t</a>'))
  })

  test('no mail subject carries a secret: the sign-in code, every link and every token are in the body only, in every template', () => {
    const brand = { appName: 'Portcullis' }
    const to = 'ada@example.com'
    const LINK = 'https://app.example/act?token=LinkTokenLinkTokenLinkTokenLinkTokenLinkTok'
    const TOKEN = 'LinkTokenLinkTokenLinkTokenLinkTokenLinkTok'
    const CODE = '405387'
    // One entry per template; the list is checked against what templates.ts exports, so a new
    // template is not forgotten here.
    const built: Record<string, { message: MailMessage; secrets: string[] }> = {
      verificationMail: { message: templates.verificationMail(brand, to, LINK, TOKEN), secrets: [LINK, TOKEN] },
      passwordResetMail: { message: templates.passwordResetMail(brand, to, LINK, TOKEN), secrets: [LINK, TOKEN] },
      signInCodeMail: { message: templates.signInCodeMail(brand, to, LINK, CODE), secrets: [LINK, CODE] },
      emailChangeMail: { message: templates.emailChangeMail(brand, to, LINK, TOKEN), secrets: [LINK, TOKEN] },
      emailChangeNoticeMail: { message: templates.emailChangeNoticeMail(brand, to, 'new@example.com', LINK, TOKEN), secrets: [LINK, TOKEN] },
      securityNoticeMail: { message: templates.securityNoticeMail(brand, to, { subject: 'A second factor was added', what: 'A second factor was added.' }), secrets: [] },
      identityLinkedMail: { message: templates.identityLinkedMail(brand, to, 'Example ID'), secrets: [] },
      invitationMail: { message: templates.invitationMail(brand, to, LINK, TOKEN, { organization: 'Acme', inviter: 'Ada <ada@example.com>' }), secrets: [LINK, TOKEN] },
    }
    const exported = Object.entries(templates).filter(([name, value]) => typeof value === 'function' && name.endsWith('Mail')).map(([name]) => name)
    assert.deepEqual(Object.keys(built).sort(), exported.sort(), 'every template is checked')
    for (const [name, { message, secrets }] of Object.entries(built)) {
      assert.ok(message.subject.length > 0, name)
      for (const secret of secrets) {
        assert.ok(message.text.includes(secret), `${name} carries its secret in the body`)
        assert.ok(!message.subject.includes(secret), `${name}'s subject carries a secret: ${message.subject}`)
      }
      assert.doesNotMatch(message.subject, /\d{6}|https?:|token/i, `${name}'s subject: ${message.subject}`)
    }
    assert.equal(built.signInCodeMail!.message.subject, 'Your Portcullis sign-in code')
    assert.match(built.signInCodeMail!.message.text, /^405387$/m, 'the code stands on a line of its own in the body, where the tests read it')
  })

  test("the development outbox's log line names the recipient and the file, never the subject or the body", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-outbox-'))
    const logged: string[] = []
    const capture: Logger = { info: (obj, msg) => logged.push(JSON.stringify({ ...obj, msg })), warn: (obj, msg) => logged.push(JSON.stringify({ ...obj, msg })), error: (obj, msg) => logged.push(JSON.stringify({ ...obj, msg })) }
    try {
      const transport = createMailTransport({ from: 'Portcullis <no-reply@localhost>', outboxDir: dir, logger: capture })
      const message = templates.signInCodeMail({ appName: 'Portcullis' }, 'ada@example.com', 'http://localhost:3000/sign-in/email?token=abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG', '405387')
      await transport.send(message)
      const [file] = readdirSync(dir)
      assert.equal(logged.length, 1)
      const line = logged[0]!
      assert.ok(line.includes('ada@example.com') && line.includes(file!), `the line says whose mail and where: ${line}`)
      assert.ok(!line.includes(message.subject), `the subject in the log line: ${line}`)
      for (const piece of ['405387', 'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG', 'sign-in code', 'Someone asked']) assert.ok(!line.includes(piece), `${piece} in the log line: ${line}`)
      // The file itself is whole: it is where the developer reads the mail.
      const raw = readFileSync(path.join(dir, file!), 'utf8')
      assert.match(raw, /^Subject: Your Portcullis sign-in code\r$/m)
      assert.match(mailParts(raw).parts['text/plain']!, /^405387$/m)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('an SMTP_URL asking nodemailer to log (?logger=true&debug=true) does not put a message on stdout; the mail still goes', async () => {
    const relay = await new MailCatcher().start()
    const printed: string[] = []
    // nodemailer's own logger writes with console.log.
    const spy = mock.method(console, 'log', (...args: unknown[]) => void printed.push(args.map(String).join(' ')))
    try {
      const transport = createMailTransport({ smtpUrl: `${relay.url}?logger=true&debug=true&transactionLog=true`, from: 'Portcullis <no-reply@localhost>', outboxDir: '/nonexistent', logger: silent })
      const message = templates.signInCodeMail({ appName: 'Portcullis' }, 'ada@example.com', 'http://localhost:3000/sign-in/email?token=abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG', '405387')
      await transport.send(message)
      transport.close()
      spy.mock.restore()
      const arrived = await relay.next('ada@example.com')
      assert.match(mailParts(arrived.raw).parts['text/plain']!, /^405387$/m)
      const out = printed.join('\n')
      for (const piece of [message.subject, '405387', 'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG']) assert.ok(!out.includes(piece), `${piece} printed by the mailer: ${out.slice(0, 500)}`)
    } finally {
      spy.mock.restore()
      await relay.close()
    }
  })
})

import assert from 'node:assert/strict'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import type { Logger } from '../../src/logger.ts'
import { createMailTransport, passwordResetMail, verificationMail } from '../../src/mail/index.ts'
import { mailParts } from '../helpers/mail.ts'

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
})

import assert from 'node:assert/strict'
import { createDecipheriv, randomBytes } from 'node:crypto'
import { test } from 'node:test'
import { KeySealer } from '../../src/auth/key-encryption.ts'

test('sealing draws a different IV for every value, across the blocks the IVs are drawn in, and each opens with its own AAD only', () => {
  const kek = randomBytes(32)
  const sealer = new KeySealer(kek)
  // More than two blocks of 512 IVs.
  const sealed = Array.from({ length: 1300 }, (_, i) => sealer.seal(`value ${i}`, `aad ${i}`))
  const ivs = sealed.map((value) => value.slice('enc:v1:'.length).split('.')[0]!)
  assert.equal(new Set(ivs).size, sealed.length)
  assert.ok(ivs.every((iv) => Buffer.from(iv, 'base64url').length === 12))
  sealed.forEach((value, i) => assert.equal(sealer.open(value, `aad ${i}`), `value ${i}`))
  assert.equal(sealer.tryOpen(sealed[0]!, 'aad 1'), null)
  // AES-256-GCM as any implementation reads it: IV, ciphertext, tag, AAD.
  const [iv, ciphertext, tag] = sealed[700]!.slice('enc:v1:'.length).split('.')
  const decipher = createDecipheriv('aes-256-gcm', kek, Buffer.from(iv!, 'base64url'))
  decipher.setAAD(Buffer.from('aad 700'))
  decipher.setAuthTag(Buffer.from(tag!, 'base64url'))
  assert.equal(Buffer.concat([decipher.update(Buffer.from(ciphertext!, 'base64url')), decipher.final()]).toString(), 'value 700')
})

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { AppError } from '../../src/errors.ts'

describe('AppError', () => {
  test('carries no stack frames, keeps its cause, and leaves other errors their stacks', () => {
    const cause = new Error('the database went away')
    const error = new AppError('SERVICE_UNAVAILABLE', { cause, headers: { 'retry-after': '1' } })
    assert.equal(error.status, 503)
    assert.equal(error.cause, cause)
    assert.doesNotMatch(error.stack ?? '', /\n\s+at /)
    assert.match(cause.stack ?? '', /\n\s+at /)
    assert.match(new Error('after').stack ?? '', /\n\s+at /, 'the stack trace limit is restored')
  })
})

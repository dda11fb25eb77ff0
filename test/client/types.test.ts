import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import { clientTypes, GENERATED_FILE } from '../../scripts/client-types.ts'

// The client package cannot import the server, so its types are generated from the server's
// schemas and committed. These hold the two together; test/client/types-match.ts does the same
// at the type level (the type-check of `npm test`).

test('the committed types.generated.ts is what `npm run client:types` makes of the schemas today', () => {
  assert.equal(readFileSync(GENERATED_FILE, 'utf8'), clientTypes(), 'the server schemas changed: run `npm run client:types` and commit the file')
})

test('types-match.ts compares every generated type with its schema', () => {
  const generated = [...clientTypes().matchAll(/^export type (\w+)/gm)].map((match) => match[1]!)
  const checks = readFileSync(new URL('types-match.ts', import.meta.url), 'utf8')
  assert.ok(generated.length > 30)
  for (const name of generated) {
    assert.match(checks, new RegExp(`Expect<Equal<(client\\.)?${name},`), `no Equal check for ${name}`)
  }
})

// Part of `npm run build`, after tsc: replaces dist/server.js (what `npm start` runs) with one
// file holding our code and the dependency-free ESM packages it imports (typebox, kysely, jose).
// Node 20 loads ESM one small file at a time; as one file the server is ready in about half the
// time and smaller in memory. Everything else (native addons, CommonJS packages with files of
// their own) stays an ordinary import from node_modules. The rest of dist/ (the CLI,
// the .d.ts files) is tsc's output as before.
import { readFileSync } from 'node:fs'
import { build } from 'esbuild'

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
const inlined = new Set(['typebox', 'kysely', 'jose'])
const external = Object.keys({ ...pkg.dependencies, ...pkg.devDependencies })
  .filter((name) => !inlined.has(name))
  .flatMap((name) => [name, `${name}/*`])

await build({
  entryPoints: ['src/server.ts'],
  outfile: 'dist/server.js',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  external,
  sourcemap: 'linked',
  sourcesContent: false,
  logLevel: 'warning',
})

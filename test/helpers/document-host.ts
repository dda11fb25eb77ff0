import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer, type Server } from 'node:https'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import type { ResolvedAddress } from '../../src/webhooks/sender.ts'

/** What one path answers. */
export interface Answer {
  status?: number
  headers?: Record<string, string>
  body?: string
}

/**
 * An https server on loopback under a made-up name (`agent.example` by default), with a certificate
 * of its own made by Debian's openssl: what an MCP client's host serves its client ID metadata
 * document from. The service reaches it through `resolve` (the name to 127.0.0.1) and trusts it
 * through `ca`, both given to the app as overrides (AppOverrides.clientMetadata); nothing else is
 * stood in for: the fetch, TLS and the checks are the real ones.
 */
export class DocumentHost {
  private server!: Server
  private dir = ''
  private readonly answers = new Map<string, Answer>()
  private readonly counts = new Map<string, number>()
  ca = ''
  origin = ''

  constructor(readonly hostname = 'agent.example') {}

  async start(): Promise<this> {
    this.dir = mkdtempSync(path.join(tmpdir(), 'portcullis-documents-'))
    const key = path.join(this.dir, 'key.pem')
    const cert = path.join(this.dir, 'cert.pem')
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', `/CN=${this.hostname}`, '-addext', `subjectAltName=DNS:${this.hostname}`, '-keyout', key, '-out', cert], { stdio: 'ignore' })
    this.ca = readFileSync(cert, 'utf8')
    this.server = createServer({ key: readFileSync(key), cert: this.ca }, (request, response) => {
      const url = new URL(request.url ?? '/', 'https://x')
      this.counts.set(url.pathname, (this.counts.get(url.pathname) ?? 0) + 1)
      const answer = this.answers.get(url.pathname)
      if (!answer) return void response.writeHead(404).end()
      response.writeHead(answer.status ?? 200, { 'content-type': 'application/json', ...answer.headers }).end(answer.body ?? '')
    })
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    this.origin = `https://${this.hostname}:${(this.server.address() as AddressInfo).port}`
    return this
  }

  /** The name to loopback; any other name as the system resolves it (none here: a test names only this one). */
  readonly resolve = async (name: string): Promise<ResolvedAddress[]> => {
    if (name === this.hostname) return [{ address: '127.0.0.1', family: 4 }]
    throw Object.assign(new Error(`${name} is not known here`), { code: 'ENOTFOUND' })
  }

  /** Serves `body` (JSON by default) at `path`; returns its URL. */
  serve(pathname: string, answer: Answer): string {
    this.answers.set(pathname, answer)
    return `${this.origin}${pathname}`
  }

  /** A client ID metadata document at `path` naming its own URL, with the given fields. */
  document(pathname: string, fields: Record<string, unknown>, headers: Record<string, string> = {}): string {
    const url = `${this.origin}${pathname}`
    this.serve(pathname, { headers, body: JSON.stringify({ client_id: url, ...fields }) })
    return url
  }

  hits(pathname: string): number {
    return this.counts.get(pathname) ?? 0
  }

  async close(): Promise<void> {
    this.server.closeAllConnections()
    await new Promise((resolve) => this.server.close(resolve))
    rmSync(this.dir, { recursive: true, force: true })
  }
}

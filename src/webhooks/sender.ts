import { lookup as systemLookup } from 'node:dns/promises'
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage, type RequestOptions } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { isIP, type LookupFunction } from 'node:net'
import tls from 'node:tls'
import { causeChain } from '../errors.ts'
import { bareHost, isSpecialUse } from './addresses.ts'

/** An address a name resolved to, as `dns.lookup` gives it. */
export interface ResolvedAddress {
  address: string
  family: number
}

/**
 * Names to addresses. The system's resolver by default; a test passes its own to make a name resolve
 * to loopback offline. It is the only seam: the policy and the connection are the real ones.
 */
export type Resolve = (hostname: string) => Promise<ResolvedAddress[]>

export const systemResolve: Resolve = (hostname) => systemLookup(hostname, { all: true, verbatim: true })

/**
 * What the deliveries log says in production when a delivery could not connect, whatever the cause:
 * refused by the address policy, refused by the host, unresolvable, a failed TLS handshake. One
 * message for all of them, so that a `webhooks:write` key learns nothing about internal names,
 * addresses or ports from the log; the server's own log keeps the cause for the operator.
 */
export const COULD_NOT_CONNECT = 'could not connect to the endpoint'

/** The receiver could not be reached (refused, unresolvable, no answer in time). */
export class Unreachable extends Error {
  constructor(
    /** What the deliveries log shows: generic in production. */
    message: string,
    /** The cause, for the server's log only (it may name an internal address). */
    readonly detail: string,
  ) {
    super(message)
  }
}

/** The request's own deadline ran out (the receiver was reached, or is being, but did not answer). */
class Deadline extends Error {}

/** The address policy refused every connection to this name. */
class Refused extends Error {}

/** An answer's body ran past the `maxBytes` a GET allowed; reading stopped there. */
export class TooLarge extends Error {
  constructor(readonly maxBytes: number) {
    super(`the answer is larger than ${maxBytes} bytes`)
  }
}

export interface GetOptions {
  /** Reading stops, and the request fails with `TooLarge`, past this many bytes of body. */
  maxBytes: number
  /** The `Accept` header. */
  accept: string
}

export interface GetResponse {
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
}

/** One request's connection: the vetted `lookup`, the agent and the function that sends, and why the policy refused if it did. */
interface Connection {
  options: RequestOptions
  send: (options: RequestOptions) => ClientRequest
  refusal: () => string | null
}

/** Sockets kept for the next delivery to the same host are closed after this long unused. */
const IDLE_MS = 30_000

export interface SenderOptions {
  /** Production: special-use addresses (src/webhooks/addresses.ts) are refused, and errors are generic. */
  production: boolean
  resolve: Resolve
  /** The receiver has this long to answer, from the start of the name's resolution. */
  timeoutMs: number
  /** Certificate authorities to trust besides the system's (tests serve https with their own). */
  ca?: string | Buffer
}

/**
 * POSTs one signed delivery and returns the HTTP status, or GETs one bounded document (a client's
 * metadata document, src/provider/client-metadata.ts). In production the address a connection
 * goes to is vetted where it is chosen: the connection's own `lookup` resolves the name once,
 * refuses if any address it got is special-use, and hands exactly those addresses to the socket. A
 * name that answers with a public address to a check and a private one to the connection (DNS
 * rebinding) gets no second question to answer. A literal address is judged before any socket opens
 * (sockets do not look literals up). A kept-alive socket is reused only for the host it was opened
 * to, whose addresses were vetted then.
 */
export class Sender {
  private readonly agents: { 'http:': HttpAgent; 'https:': HttpsAgent }

  constructor(private readonly options: SenderOptions) {
    this.agents = {
      'http:': new HttpAgent({ keepAlive: true, timeout: IDLE_MS }),
      'https:': new HttpsAgent({ keepAlive: true, timeout: IDLE_MS, ...(options.ca ? { ca: [...tls.rootCertificates, String(options.ca)] } : {}) }),
    }
  }

  async post(target: string, headers: Record<string, string>, body: string): Promise<number> {
    const connection = this.connection(new URL(target))
    try {
      return await new Promise<number>((resolve, reject) => {
        const request = connection.send({
          ...connection.options, method: 'POST',
          headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        })
        const deadline = setTimeout(() => request.destroy(new Deadline()), this.options.timeoutMs)
        request.on('response', (response) => {
          clearTimeout(deadline)
          this.discard(response)
          resolve(response.statusCode ?? 0)
        })
        request.on('error', (error) => {
          clearTimeout(deadline)
          reject(error)
        })
        request.end(body)
      })
    } catch (error) {
      throw this.failure(error, connection)
    }
  }

  /**
   * GETs one resource through the same vetted connection as `post`, and returns the answer as it
   * came: a redirect is an answer like any other, never followed (following one would ask a second
   * host, chosen by the first). The deadline covers the whole exchange, body included, so a server
   * that trickles its answer is cut off like one that never answers; a body past `maxBytes` (by its
   * declared length or as it arrives) ends the request with `TooLarge` and nothing more is read.
   */
  async get(target: string, options: GetOptions): Promise<GetResponse> {
    const connection = this.connection(new URL(target))
    try {
      return await new Promise<GetResponse>((resolve, reject) => {
        let settled = false
        const settle = (outcome: () => void) => {
          if (settled) return
          settled = true
          clearTimeout(deadline)
          outcome()
        }
        // No `accept-encoding`: the body is read as sent, so `maxBytes` bounds what is kept, not a compressed form of it.
        const request = connection.send({ ...connection.options, method: 'GET', headers: { accept: options.accept, 'accept-encoding': 'identity' } })
        const deadline = setTimeout(() => {
          settle(() => reject(new Deadline()))
          request.destroy()
        }, this.options.timeoutMs)
        request.on('response', (response) => {
          const tooLarge = () => {
            settle(() => reject(new TooLarge(options.maxBytes)))
            response.destroy()
          }
          const declared = Number(response.headers['content-length'])
          if (Number.isFinite(declared) && declared > options.maxBytes) return tooLarge()
          const chunks: Buffer[] = []
          let bytes = 0
          response.on('data', (chunk: Buffer) => {
            bytes += chunk.length
            if (bytes > options.maxBytes) return tooLarge()
            chunks.push(chunk)
          })
          response.on('end', () => settle(() => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) })))
          response.on('error', (error) => settle(() => reject(error)))
          response.on('close', () => settle(() => reject(new Error('the connection closed before the answer ended'))))
        })
        request.on('error', (error) => settle(() => reject(error)))
        request.end()
      })
    } catch (error) {
      if (error instanceof TooLarge) throw error
      throw this.failure(error, connection)
    }
  }

  /** Closes the kept-alive sockets. */
  close(): void {
    this.agents['http:'].destroy()
    this.agents['https:'].destroy()
  }

  /**
   * Where a request to this URL connects, and how. In production a literal address is judged here,
   * before any socket opens (sockets do not look literals up); a name is judged by the connection's
   * own `lookup`, on the addresses the socket will use.
   */
  private connection(url: URL): Connection {
    const host = bareHost(url)
    if (this.options.production && isIP(host) !== 0 && isSpecialUse(host)) throw this.couldNotConnect(`refused by policy: ${host} is a special-use address`)
    let refusal: string | null = null
    const lookup: LookupFunction = (hostname, lookupOptions, callback) => {
      this.vetted(hostname, lookupOptions.family).then(
        (addresses) => (lookupOptions.all ? callback(null, addresses) : callback(null, addresses[0]!.address, addresses[0]!.family)),
        (error: unknown) => {
          if (error instanceof Refused) refusal = error.message
          callback(error as NodeJS.ErrnoException, lookupOptions.all ? [] : '')
        },
      )
    }
    const https = url.protocol === 'https:'
    return {
      options: {
        protocol: url.protocol, hostname: host, port: url.port || undefined, path: `${url.pathname}${url.search}`,
        agent: https ? this.agents['https:'] : this.agents['http:'], lookup,
      },
      send: https ? httpsRequest : httpRequest,
      refusal: () => refusal,
    }
  }

  /** What a failed request throws: the deadline said as it is, anything else as a failure to connect. */
  private failure(error: unknown, connection: Connection): Unreachable {
    if (error instanceof Deadline) {
      // Said as it is, in production too: only an address the policy allowed was ever waited on.
      const late = `no answer within ${this.options.timeoutMs / 1000} s`
      return new Unreachable(late, late)
    }
    return this.couldNotConnect(connection.refusal() ?? causeChain(error))
  }

  /** The name's addresses, all of them allowed (in production), of the family the socket asks for if it asks. */
  private async vetted(hostname: string, family: unknown): Promise<ResolvedAddress[]> {
    const found = await this.options.resolve(hostname)
    if (this.options.production) {
      // Any one is enough to refuse: the socket may try each of them (happy eyeballs).
      const special = found.find((entry) => isSpecialUse(entry.address))
      if (special) throw new Refused(`refused by policy: ${hostname} resolved to ${special.address}, a special-use address`)
    }
    const wanted = family === 4 || family === 'IPv4' ? 4 : family === 6 || family === 'IPv6' ? 6 : 0
    const usable = wanted === 0 ? found : found.filter((entry) => entry.family === wanted)
    if (usable.length === 0) throw Object.assign(new Error(`${hostname} has no address to connect to`), { code: 'ENOTFOUND' })
    return usable
  }

  /**
   * The answer's body is not wanted; draining it lets the socket carry the next delivery. A body
   * that does not end within the deadline, or runs past 64 KiB, costs the socket instead.
   */
  private discard(response: IncomingMessage): void {
    let bytes = 0
    const cutoff = setTimeout(() => response.destroy(), this.options.timeoutMs)
    cutoff.unref()
    response.on('data', (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > 65_536) response.destroy()
    })
    response.on('close', () => clearTimeout(cutoff))
    response.on('error', () => {})
  }

  private couldNotConnect(detail: string): Unreachable {
    return new Unreachable(this.options.production ? COULD_NOT_CONNECT : detail, detail)
  }
}

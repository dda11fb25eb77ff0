import { lookup as systemLookup } from 'node:dns/promises'
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { isIP, type LookupFunction } from 'node:net'
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

/** Sockets kept for the next delivery to the same host are closed after this long unused. */
const IDLE_MS = 30_000

export interface SenderOptions {
  /** Production: special-use addresses (src/webhooks/addresses.ts) are refused, and errors are generic. */
  production: boolean
  resolve: Resolve
  /** The receiver has this long to answer, from the start of the name's resolution. */
  timeoutMs: number
}

/**
 * POSTs one signed delivery and returns the HTTP status. In production the address a connection
 * goes to is vetted where it is chosen: the connection's own `lookup` resolves the name once,
 * refuses if any address it got is special-use, and hands exactly those addresses to the socket. A
 * name that answers with a public address to a check and a private one to the connection (DNS
 * rebinding) gets no second question to answer. A literal address is judged before any socket opens
 * (sockets do not look literals up). A kept-alive socket is reused only for the host it was opened
 * to, whose addresses were vetted then.
 */
export class Sender {
  private readonly agents = {
    'http:': new HttpAgent({ keepAlive: true, timeout: IDLE_MS }),
    'https:': new HttpsAgent({ keepAlive: true, timeout: IDLE_MS }),
  }

  constructor(private readonly options: SenderOptions) {}

  async post(target: string, headers: Record<string, string>, body: string): Promise<number> {
    const url = new URL(target)
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
    const agent = url.protocol === 'https:' ? this.agents['https:'] : this.agents['http:']
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest
    try {
      return await new Promise<number>((resolve, reject) => {
        const request = send({
          protocol: url.protocol, hostname: host, port: url.port || undefined, path: `${url.pathname}${url.search}`, method: 'POST',
          headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
          agent, lookup,
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
      if (error instanceof Deadline) {
        // Said as it is, in production too: only an address the policy allowed was ever waited on.
        const late = `no answer within ${this.options.timeoutMs / 1000} s`
        throw new Unreachable(late, late)
      }
      throw this.couldNotConnect(refusal ?? causeChain(error))
    }
  }

  /** Closes the kept-alive sockets. */
  close(): void {
    this.agents['http:'].destroy()
    this.agents['https:'].destroy()
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

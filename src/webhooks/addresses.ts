import { isIP } from 'node:net'

/**
 * Which addresses a production deployment never sends webhooks to (docs/webhooks.md, "Where events
 * may go"). A `webhooks:write` key chooses the URL, so without this rule it could make the server
 * POST to its own loopback ports, the private network or a cloud metadata service, and read from the
 * deliveries log whether anything answered there: an internal port scanner.
 */

/** IPv4 blocks that are not globally reachable unicast (IANA's special-purpose registry, multicast, reserved). */
const V4_SPECIAL: readonly (readonly [string, number])[] = [
  ['0.0.0.0', 8], // "this network": 0.0.0.0 reaches the local host
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // shared address space (carrier-grade NAT)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, where cloud metadata services answer
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, with the limited broadcast address
]

/**
 * Special-use blocks inside IPv6's global unicast space (2000::/3); everything outside it (loopback,
 * unspecified, unique-local, link-local, site-local, multicast, discard, IPv4-compatible) is
 * special-use too. IPv4-mapped and NAT64 addresses are judged by the IPv4 address they carry.
 */
const V6_SPECIAL_IN_GLOBAL: readonly (readonly [string, number])[] = [
  ['2001::', 23], // IETF protocol assignments: Teredo, benchmarking, ORCHID
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4: carries an IPv4 address, which may be an internal one
  ['3fff::', 20], // documentation
]
const V6_GLOBAL: readonly [string, number] = ['2000::', 3]
/** ::ffff:a.b.c.d, the IPv4-mapped form, and 64:ff9b::a.b.c.d, NAT64's well-known prefix (an IPv6-only network's way to IPv4). */
const V4_MAPPED: readonly [string, number] = ['::ffff:0:0', 96]
const NAT64: readonly [string, number] = ['64:ff9b::', 96]

function v4Bytes(address: string): number[] {
  return address.split('.').map(Number)
}

/** The 16 bytes of an IPv6 address already known to be one (`isIP` said 6); a zone (`%eth0`) is ignored. */
function v6Bytes(address: string): number[] {
  let text = address.split('%')[0]!.toLowerCase()
  // A trailing dotted quad (::ffff:127.0.0.1) becomes the two groups it stands for.
  const lastColon = text.lastIndexOf(':')
  const tail = text.slice(lastColon + 1)
  if (tail.includes('.')) {
    const [a, b, c, d] = v4Bytes(tail) as [number, number, number, number]
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head, rest] = text.split('::') as [string, string | undefined]
  const groups = (part: string) => (part === '' ? [] : part.split(':').map((group) => parseInt(group, 16)))
  const front = groups(head)
  const back = rest === undefined ? [] : groups(rest)
  const all = [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back]
  return all.flatMap((group) => [group >> 8, group & 0xff])
}

function within(bytes: number[], prefix: number[], bits: number): boolean {
  for (let i = 0; i < bits; i++) {
    const bit = 7 - (i % 8)
    if (((bytes[i >> 3]! >> bit) & 1) !== ((prefix[i >> 3]! >> bit) & 1)) return false
  }
  return true
}

const inV4 = (bytes: number[], blocks: readonly (readonly [string, number])[]) => blocks.some(([prefix, bits]) => within(bytes, v4Bytes(prefix), bits))
const inV6 = (bytes: number[], [prefix, bits]: readonly [string, number]) => within(bytes, v6Bytes(prefix), bits)

/**
 * True for an IP address (either family, no brackets) that is loopback, private, link-local,
 * unique-local, CGNAT, multicast, unspecified, documentation, reserved or otherwise special-use, and
 * for anything that is not an IP address at all (the caller asked about an address: refusing is safe).
 */
export function isSpecialUse(address: string): boolean {
  const family = isIP(address.split('%')[0]!)
  if (family === 4) return inV4(v4Bytes(address), V4_SPECIAL)
  if (family !== 6) return true
  const bytes = v6Bytes(address)
  if (inV6(bytes, V4_MAPPED) || inV6(bytes, NAT64)) return inV4(bytes.slice(12), V4_SPECIAL)
  if (!inV6(bytes, V6_GLOBAL)) return true
  return V6_SPECIAL_IN_GLOBAL.some((block) => inV6(bytes, block))
}

/** `localhost` and every name under it resolve to loopback by definition (RFC 6761), whatever DNS says. */
function isLocalhostName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '')
  return name === 'localhost' || name.endsWith('.localhost')
}

/** A URL's host without the brackets of an IPv6 literal: what a socket connects to or resolves. */
export function bareHost(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
}

/**
 * At registration: whether the URL's host is refused by what it says alone, an address literal that
 * is special-use or a localhost name. Other names are judged when a delivery connects, on the
 * addresses they resolve to then (src/webhooks/sender.ts). The URL parser has already turned the
 * other spellings of an IPv4 address (`2130706433`, `0x7f.1`, `127.1`) into the dotted form.
 */
export function refusedHost(url: URL): boolean {
  const host = bareHost(url)
  return isIP(host) !== 0 ? isSpecialUse(host) : isLocalhostName(host)
}

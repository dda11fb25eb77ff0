import net, { type AddressInfo } from 'node:net'

/**
 * A TCP forwarder between the app and its database, so a test can make the database unreachable
 * (and bring it back) without stopping the shared server.
 */
export class TcpProxy {
  private server: net.Server | undefined
  private sockets = new Set<net.Socket>()
  port = 0

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(port = 0): Promise<this> {
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost)
      for (const socket of [client, upstream]) {
        this.sockets.add(socket)
        socket.on('close', () => this.sockets.delete(socket))
        socket.on('error', () => {
          client.destroy()
          upstream.destroy()
        })
      }
      client.pipe(upstream).pipe(client)
    })
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve))
    this.port = (this.server.address() as AddressInfo).port
    return this
  }

  /** Drops every connection and refuses new ones. */
  async cut(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server?.close(() => resolve()))
    for (const socket of this.sockets) socket.destroy()
    await closed
  }

  async restore(): Promise<void> {
    await this.start(this.port)
  }
}

/**
 * oidc-provider ships no type declarations; this module is the little of its surface Portcullis
 * uses, typed as loosely as the library itself is documented (its configuration is checked at
 * run time by the library).
 */
declare module 'oidc-provider' {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  type Loose = any
  export type Configuration = Record<string, Loose>
  export type KoaContextWithOIDC = Loose
  export const errors: Record<string, new (description?: string, detail?: string) => Error>
  export const interactionPolicy: { base(): Loose; Check: Loose; Prompt: Loose }
  export class Provider {
    constructor(issuer: string, configuration: Configuration)
    proxy: boolean
    callback(): (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void
    use(middleware: (ctx: Loose, next: () => Promise<void>) => Promise<void>): void
    on(event: string, listener: (...args: Loose[]) => void): void
    interactionDetails(req: Loose, res: Loose): Promise<Loose>
    interactionResult(req: Loose, res: Loose, result: Loose, options?: { mergeWithLastSubmission?: boolean }): Promise<string>
    Grant: Loose
    AuthorizationCode: Loose
    Client: Loose
    Session: Loose
    static get ctx(): Loose
  }
  export default Provider
}

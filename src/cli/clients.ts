import { loadConfig } from '../config.ts'
import { durationMs } from '../duration.ts'
import { ClientRegistry } from '../provider/clients.ts'
import { DynamicRegistration } from '../provider/registration.ts'
import { DEVICE_CODE_GRANT, type ClientCreate } from '../provider/schemas.ts'
import { json, JSON_OPTION, printList, UsageError, type Command, type Context } from './command.ts'
import { sealerFor, withDatabase } from './database.ts'

/** The client registry on the server's database, sealing secrets under the server's key. */
function clientRegistry(context: Context, run: (clients: ClientRegistry) => Promise<number>): Promise<number> {
  const config = loadConfig(context.env)
  return withDatabase(config, context.io, async (db) => run(new ClientRegistry({ db, clock: context.clock, sealer: await sealerFor(config, db, context.io) })))
}

/** The clients of the OpenID provider, and the tokens for dynamic registration. */
export const clientCommands: Command[] = [
  {
    name: 'clients add',
    args: '--name NAME --type public|confidential [...]',
    summary: 'register a client of the OpenID provider and print it as JSON (with its secret, once)',
    help: [
      'Repeat for each value: --redirect-uri URI, --post-logout-redirect-uri URI, --scope S, --grant G.',
      'Also: --first-party (skips consent), --pkce-required=false (confidential clients only),',
      '--backchannel-logout-uri URI, --token-endpoint-auth-method M, --id-token-alg RS256|EdDSA,',
      '--jwks-uri URI (for private_key_jwt). Defaults: every scope; the grants authorization_code and',
      `refresh_token (--grant device_code is short for ${DEVICE_CODE_GRANT}).`,
      "A confidential client's secret is shown here and never again: only a sealed copy is stored.",
    ],
    options: {
      name: { type: 'string' },
      type: { type: 'string' },
      'redirect-uri': { type: 'string', multiple: true },
      'post-logout-redirect-uri': { type: 'string', multiple: true },
      'first-party': { type: 'boolean' },
      scope: { type: 'string', multiple: true },
      grant: { type: 'string', multiple: true },
      'backchannel-logout-uri': { type: 'string' },
      'pkce-required': { type: 'string' },
      'token-endpoint-auth-method': { type: 'string' },
      'id-token-alg': { type: 'string' },
      'jwks-uri': { type: 'string' },
    },
    run: (context) => {
      const v = context.values
      const usage = context.usage
      if (v.name === undefined) throw new UsageError('--name is required', usage)
      if (v.type === undefined) throw new UsageError('--type is required (public or confidential)', usage)
      const pkce = v['pkce-required']
      if (pkce !== undefined && pkce !== 'true' && pkce !== 'false') throw new UsageError('--pkce-required takes true or false', usage)
      // The registry judges every value (the same rules and messages as POST /admin/clients).
      const input = {
        name: v.name,
        type: v.type,
        redirect_uris: v['redirect-uri'],
        post_logout_redirect_uris: v['post-logout-redirect-uri'],
        first_party: v['first-party'],
        scopes: v.scope,
        grant_types: (v.grant as string[] | undefined)?.map((grant) => (grant === 'device_code' ? DEVICE_CODE_GRANT : grant)),
        backchannel_logout_uri: v['backchannel-logout-uri'],
        pkce_required: pkce === undefined ? undefined : pkce === 'true',
        token_endpoint_auth_method: v['token-endpoint-auth-method'],
        id_token_signed_response_alg: v['id-token-alg'],
        jwks_uri: v['jwks-uri'],
      } as ClientCreate
      return clientRegistry(context, async (clients) => {
        const created = await clients.create(input)
        context.io.out(json(created))
        if (created.client_secret !== undefined) context.io.err(`portcullis: client ${created.client.client_id}: this is the only time its secret is shown`)
        return 0
      })
    },
  },
  {
    name: 'clients list',
    args: '[--json]',
    summary: 'list the registered clients: client_id, name, type, first_party, dynamic (oldest first)',
    help: ['--json prints a JSON array of the clients, every field as `clients show` prints them, instead of the table.'],
    options: JSON_OPTION,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        printList(context, await clients.list(), ['client_id', 'name', 'type', 'first_party', 'dynamic'])
        return 0
      }),
  },
  {
    name: 'clients registration-token',
    args: '[--expires 24h]',
    summary: 'make an initial access token for dynamic registration (OP_REGISTRATION=token): printed once, good for one registration',
    options: { expires: { type: 'string', default: '24h' } },
    run: (context) => {
      const lifetime = durationMs(context.values.expires as string)
      if (lifetime === null) throw new UsageError('--expires must be a duration like 30m, 24h or 7d', context.usage)
      const config = loadConfig(context.env)
      return withDatabase(config, context.io, async (db) => {
        const clients = new ClientRegistry({ db, clock: context.clock, sealer: await sealerFor(config, db, context.io) })
        const { token, expiresAt } = await new DynamicRegistration({ db, clock: context.clock, clients, mode: config.provider.registration }).createToken(lifetime)
        if (config.provider.registration !== 'token') context.io.err(`portcullis: OP_REGISTRATION is ${config.provider.registration}, so the server does not ask for this token`)
        context.io.out(token)
        context.io.err(`portcullis: good for one registration until ${new Date(expiresAt).toISOString()}; shown only now`)
        return 0
      })
    },
  },
  {
    name: 'clients show',
    args: 'CLIENT_ID',
    summary: 'print a client as JSON (never its secret)',
    positionals: 1,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        context.io.out(json({ client: await clients.get(context.positionals[0]!) }))
        return 0
      }),
  },
  {
    name: 'clients remove',
    args: 'CLIENT_ID',
    summary: 'remove a client and every grant, code and token it holds',
    positionals: 1,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        const { client_id } = await clients.remove(context.positionals[0]!)
        context.io.out(`client ${client_id}: removed, with its grants and tokens`)
        return 0
      }),
  },
  {
    name: 'clients rotate-secret',
    args: 'CLIENT_ID',
    summary: 'give a confidential client a new secret and print it once; the old one stops working at once',
    positionals: 1,
    run: (context) =>
      clientRegistry(context, async (clients) => {
        const rotated = await clients.rotateSecret(context.positionals[0]!)
        context.io.out(json(rotated))
        context.io.err(`portcullis: client ${rotated.client.client_id}: this is the only time the new secret is shown; the old one no longer works`)
        return 0
      }),
  },
]

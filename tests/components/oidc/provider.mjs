// A real OpenID provider for banhub's end-to-end tests: panva/oidc-provider with its development
// login and consent pages, on 127.0.0.1 and a port the kernel picks. Started by tests/src/oidc.rs.
//
// Usage: node provider.mjs <ready-file>
//   Writes {"issuer":"http://127.0.0.1:PORT","pid":N} to <ready-file> (atomically) once it serves.
// Environment: OIDC_CLIENT_ID (default "banhub"), OIDC_CLIENT_SECRET (default "banhub-test-secret"),
//   OIDC_PORT (default 0: the kernel picks; the harness passes the old port to restart in place).
// Every start signs with a new key of its own, so a restart is also a key rotation.
//
// The client is registered as a native application, so (RFC 8252 §7.3) its loopback redirect and
// post-logout URIs match on any port: the hub under test listens on a port chosen at run time.
// Any login name is accepted by the development login page (the password is ignored); the accounts
// below decide the claims. As oidc-provider does by default, the ID token carries only `sub`; name,
// e-mail and groups come from the userinfo endpoint (`/me`).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { renameSync, writeFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const readyFile = process.argv[2];
if (!readyFile) {
  console.error('usage: node provider.mjs <ready-file>');
  process.exit(2);
}
const clientId = process.env.OIDC_CLIENT_ID || 'banhub';
const clientSecret = process.env.OIDC_CLIENT_SECRET || 'banhub-test-secret';
const listenPort = Number(process.env.OIDC_PORT || 0);
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), use: 'sig', alg: 'RS256' };

const accounts = {
  alice: { name: 'Alice Admin', groups: ['banhub-admins', 'staff'] },
  olga: { name: 'Olga Operator', groups: ['banhub-operators'] },
  victor: { name: 'Victor Viewer', groups: ['banhub-viewers'] },
  nora: { name: 'Nora Nobody', groups: ['staff'] },
};

function claimsOf(id) {
  const account = accounts[id] ?? { name: id, groups: [] };
  return {
    sub: id,
    name: account.name,
    preferred_username: id,
    email: `${id}@example.test`,
    email_verified: true,
    groups: account.groups,
  };
}

const server = createServer();
server.listen(listenPort, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      application_type: 'native',
      // At the root, and under the base path /banhub (a hub behind a reverse proxy's sub-path).
      redirect_uris: ['http://127.0.0.1/auth/callback', 'http://127.0.0.1/banhub/auth/callback'],
      post_logout_redirect_uris: ['http://127.0.0.1/', 'http://127.0.0.1/banhub/'],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    pkce: { required: () => true },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
      groups: ['groups'],
    },
    scopes: ['openid', 'email', 'profile', 'groups'],
    findAccount: async (ctx, id) => ({ accountId: id, claims: async () => claimsOf(id) }),
    jwks: { keys: [signingKey] },
    features: { devInteractions: { enabled: true } },
    cookies: { keys: ['banhub-test-cookie-key-not-a-secret'] },
    ttl: {
      AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 600, Grant: 600,
    },
  });
  server.on('request', provider.callback());
  const tmp = `${readyFile}.tmp`;
  writeFileSync(tmp, JSON.stringify({ issuer, pid: process.pid }));
  renameSync(tmp, readyFile);
  console.log(`oidc-provider ${issuer} ready`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}

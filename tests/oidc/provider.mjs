// A real OpenID Connect provider for sbx's tests: panva's oidc-provider, on 127.0.0.1 only.
//
//   node provider.mjs PORT REDIRECT_URI
//
// One confidential client (`sbx-test`, secret `sbx-test-secret`, client_secret_basic) may use
// the authorization code flow, with PKCE (S256) required. Its built-in development login
// form accepts any login and any password; the login names the account: its `sub` is the
// login, its `email` is `<login>@example.test`, and a login starting with `admin` is in the
// `sbx-admins` group (others in `analysts`). Prints "listening <issuer>" once it accepts.
import Provider from "oidc-provider";

const [port, redirectUri] = process.argv.slice(2);
if (!port || !redirectUri) {
  console.error("usage: node provider.mjs PORT REDIRECT_URI");
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: "sbx-test",
    client_secret: "sbx-test-secret",
    redirect_uris: [redirectUri],
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_basic",
  }],
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  scopes: ["openid", "email", "groups"],
  claims: { openid: ["sub"], email: ["email", "email_verified"], groups: ["groups"] },
  conformIdTokenClaims: false,
  cookies: { keys: ["sbx-test-cookie-key"] },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        const groups = id.startsWith("admin") ? ["sbx-admins"] : ["analysts"];
        return { sub: id, email: `${id}@example.test`, email_verified: true, groups };
      },
    };
  },
});

const server = provider.listen(Number(port), "127.0.0.1", () => {
  console.log(`listening ${issuer}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}

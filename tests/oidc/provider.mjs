// A real OpenID Connect provider for sbx's tests: panva's oidc-provider, on 127.0.0.1 only.
//
//   node provider.mjs        prints "port N" once it listens on 127.0.0.1:N (N chosen by the
//                            system: no race for a free port), then reads one line from stdin,
//                            the client's redirect URI (the sbx server's callback, known only
//                            once that server runs with this issuer), and prints
//                            "listening http://127.0.0.1:N" when it serves
//
// One confidential client (`sbx-test`, secret `sbx-test-secret`, client_secret_basic) may use
// the authorization code flow, with PKCE (S256) required. Its built-in development login
// form accepts any login and any password; the login names the account: its `sub` is the
// login, its `email` is `<login>@example.test`, and a login starting with `admin` is in the
// `sbx-admins` group (others in `analysts`).
import http from "node:http";
import readline from "node:readline";
import Provider from "oidc-provider";

let handler = (req, res) => {
  res.statusCode = 503;
  res.end("not configured yet");
};
const server = http.createServer((req, res) => handler(req, res));
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;
console.log(`port ${server.address().port}`);

const input = readline.createInterface({ input: process.stdin });
const redirectUri = (await input[Symbol.asyncIterator]().next()).value.trim();

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

// Its built-in pages import a web font from the internet: nothing may leave this machine,
// so that line is dropped from every page (the pages work the same without it). A
// browser's favicon request gets an empty answer, not a 404 in the console.
provider.use(async (ctx, next) => {
  if (ctx.path === "/favicon.ico") {
    ctx.status = 204;
    return;
  }
  await next();
  if (typeof ctx.body === "string") ctx.body = ctx.body.replace(/@import url\(https?:[^)]*\);?/g, "");
});
handler = provider.callback();
console.log(`listening ${issuer}`);
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => process.exit(0));
}

// "Sign in with your organization": shown when the server signs in through the
// organization's OpenID Connect provider (GET /web/oidc says so). The link is a plain
// navigation to /web/oidc/login; the server does the rest and comes back to this page
// signed in (signing out is the usual "Sign out": DELETE /web/session).
import { call } from "./api.js";

const answer = await call("GET", "/web/oidc").catch(() => null);
if (answer && answer.enabled) document.getElementById("oidc-signin").hidden = false;

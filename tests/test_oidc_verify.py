"""The ID token's verification, the claims' mapping and the one-time logins, without a browser.

Tokens are signed here with keys made here; the provider's discovery document and key set
are served by a real HTTP server on 127.0.0.1 (the client fetches them as it would the
organization's). The browser tests (test_web_oidc.py) sign in through a real provider.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from http_support import QuietHandler, serving

from sbx.agent.core.config import OidcSettings, ServiceSettings
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.service.oidc_client import (
    Claims,
    OidcClient,
    OidcError,
    open_client,
    pkce_challenge,
    principal_and_role,
)
from sbx.agent.service.problems import Problem
from sbx.agent.service.web.identities import begin_login, finish_login, oidc_session, sign_in
from sbx.tools.policy import PolicyError

CLIENT = "sbx-web"
NONCE = "n-0S6_WzA2Mj"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class _Provider(QuietHandler):
    documents: dict[str, Any] = {}

    def do_GET(self) -> None:
        document = self.documents.get(self.path)
        status = 200 if document is not None else 404
        self.send_body(status, json.dumps(document).encode(), "application/json")


@pytest.fixture
def issuer() -> Iterator[str]:
    """A provider's discovery document and key set (an RSA and an EC key) on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key()))
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(EC_KEY.public_key()))
    _Provider.documents = {
        "/.well-known/openid-configuration": {
            "issuer": url, "authorization_endpoint": url + "/auth",
            "token_endpoint": url + "/token", "jwks_uri": url + "/jwks"},
        "/jwks": {"keys": [{**rsa_jwk, "kid": "r1", "use": "sig", "alg": "RS256"},
                           {**ec_jwk, "kid": "e1", "use": "sig", "alg": "ES256"}]},
    }
    with serving(server):
        yield url


def _client(issuer: str, **extra: Any) -> OidcClient:
    settings = OidcSettings(issuer=issuer, client_id=CLIENT, client_secret_env="S", **extra)
    return OidcClient(settings=settings, client_secret="secret")


def _token(issuer: str, *, key: Any = RSA_KEY, alg: str = "RS256", kid: str = "r1",
           **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": issuer, "aud": CLIENT, "sub": "u-1", "iat": now, "exp": now + 300,
            "nonce": NONCE, "email": "ana@example.test", **claims}
    return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})


def _refused(client: OidcClient, token: str, slug: str = "oidc-token-invalid") -> str:
    with pytest.raises(OidcError) as caught:
        client.verify(token, nonce=NONCE)
    assert caught.value.slug == slug
    return str(caught.value)


def test_a_valid_id_token_gives_its_claims_rs256_and_es256(issuer):
    client = _client(issuer)
    assert client.verify(_token(issuer), nonce=NONCE).values["email"] == "ana@example.test"
    es = _token(issuer, key=EC_KEY, alg="ES256", kid="e1")
    assert client.verify(es, nonce=NONCE).subject == "u-1"


def test_a_forged_token_signed_by_another_key_is_refused(issuer):
    client = _client(issuer)
    assert "signature does not verify" in _refused(client, _token(issuer, key=OTHER_KEY))
    unknown = _token(issuer, key=OTHER_KEY, kid="not-published")
    assert "does not publish" in _refused(client, unknown)


def test_an_expired_token_is_refused(issuer):
    past = int(time.time()) - 3600
    message = _refused(_client(issuer), _token(issuer, iat=past, exp=past + 300),
                       "oidc-token-expired")
    assert "expired" in message


def test_a_token_for_another_audience_or_from_another_issuer_is_refused(issuer):
    client = _client(issuer)
    assert "another client" in _refused(client, _token(issuer, aud="someone-else"))
    assert "another issuer" in _refused(client, _token(issuer, iss="https://evil.example"))
    several = _token(issuer, aud=[CLIENT, "other"], azp="other")
    assert "authorized party" in _refused(client, several)


def test_the_nonce_must_be_this_sign_ins(issuer):
    assert "nonce" in _refused(_client(issuer), _token(issuer, nonce="another"))
    assert "nonce" in _refused(_client(issuer), _token(issuer, nonce=None))


def test_only_rs256_and_es256_are_accepted_never_none_or_hmac(issuer):
    client = _client(issuer)
    unsigned = jwt.encode({"iss": issuer, "aud": CLIENT, "sub": "u", "nonce": NONCE,
                           "iat": int(time.time()), "exp": int(time.time()) + 60}, None,
                          algorithm="none")
    assert "'none' is not allowed" in _refused(client, unsigned)
    hmac_token = jwt.encode({"iss": issuer, "aud": CLIENT, "sub": "u"}, "k" * 32,
                            algorithm="HS256", headers={"kid": "r1"})
    assert "'HS256' is not allowed" in _refused(client, hmac_token)
    assert "not a JWT" in _refused(client, "garbage")


def test_a_discovery_document_naming_another_issuer_is_refused(issuer):
    _Provider.documents["/.well-known/openid-configuration"]["issuer"] = "https://evil.example"
    with pytest.raises(OidcError, match="names another issuer"):
        _client(issuer).authorization_url(state="s", nonce="n", verifier="v" * 43,
                                          redirect_uri="http://127.0.0.1/cb")


def test_the_authorization_url_asks_for_the_code_flow_with_pkce_s256(issuer):
    url = _client(issuer).authorization_url(state="st", nonce="no", verifier="v" * 43,
                                            redirect_uri="http://127.0.0.1:1/web/oidc/callback")
    assert url.startswith(issuer + "/auth?response_type=code&client_id=sbx-web")
    assert f"code_challenge={pkce_challenge('v' * 43)}&code_challenge_method=S256" in url
    assert "state=st" in url and "nonce=no" in url and "scope=openid+email" in url
    # RFC 7636 appendix B's example
    assert pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == \
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_claims_map_to_a_principal_and_the_admin_role_only_through_the_group(issuer):
    settings = OidcSettings(issuer=issuer, client_id=CLIENT, client_secret_env="S",
                            principal_claim="email", role_claim="groups",
                            admin_values=["sbx-admins"])

    def mapped(**values: Any) -> tuple[str, str]:
        return principal_and_role(settings, Claims(subject="u", values=values))

    assert mapped(email="a@x.test", groups=["analysts"]) == ("oidc:a@x.test", "user")
    assert mapped(email="a@x.test", groups=["x", "sbx-admins"]) == ("oidc:a@x.test", "admin")
    assert mapped(email="a@x.test", groups="sbx-admins") == ("oidc:a@x.test", "admin")
    assert mapped(email="a@x.test", groups={"sbx-admins": 1}) == ("oidc:a@x.test", "user")
    assert mapped(email="a@x.test") == ("oidc:a@x.test", "user")
    for bad in (None, "", "a b", "a\x1b[2J", "x" * 76, 7):
        with pytest.raises(OidcError) as caught:
            mapped(email=bad)
        assert caught.value.status == 403


def test_the_settings_refuse_a_plain_http_provider_elsewhere_and_a_missing_secret():
    for issuer in ("http://idp.example.test", "ftp://127.0.0.1", "https://idp.test/?a=1"):
        with pytest.raises(ValueError):
            OidcSettings(issuer=issuer, client_id="c", client_secret_env="S")
    with pytest.raises(ValueError, match="openid"):
        OidcSettings(issuer="https://idp.test", client_id="c", client_secret_env="S",
                     scopes=["email"])
    settings = OidcSettings(issuer="https://idp.test", client_id="c", client_secret_env="MY_S")
    with pytest.raises(PolicyError, match="MY_S is not set"):
        open_client(settings, {})
    assert open_client(None, {}) is None
    assert open_client(settings, {"MY_S": "x"}) is not None
    assert ServiceSettings().oidc is None


def test_a_pending_login_is_good_once_in_its_own_browser_and_expires(tmp_path: Path):
    db = Database.open(f"sqlite:///{tmp_path / 'sbx.db'}")
    try:
        db.migrate()
        login = begin_login(db, "http://127.0.0.1:1/web/oidc/callback")
        assert finish_login(db, login.state, login.browser).verifier == login.verifier
        with pytest.raises(Problem, match="already used"):
            finish_login(db, login.state, login.browser)
        stolen = begin_login(db, "http://127.0.0.1:1/web/oidc/callback")
        with pytest.raises(Problem, match="another browser"):
            finish_login(db, stolen.state, "another-browsers-cookie")
        with pytest.raises(Problem, match="already used"):  # and it is used up
            finish_login(db, stolen.state, stolen.browser)
        old = begin_login(db, "http://127.0.0.1:1/cb", now=time.time() - 3600)
        with pytest.raises(Problem, match="expired"):
            finish_login(db, old.state, old.browser)

        token, _ = sign_in(db, principal="oidc:a@x.test", issuer="https://idp.test",
                           subject="u-1", role="admin", ttl_s=60)
        found = oidc_session(db, token)
        assert found is not None and found[0].principal == "oidc:a@x.test"
        assert found[0].role == "admin" and found[0].overrides == {}
        with pytest.raises(Problem, match="another account"):
            sign_in(db, principal="oidc:a@x.test", issuer="https://idp.test",
                    subject="u-2", role="user", ttl_s=60)
    finally:
        db.close()

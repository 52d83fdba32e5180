"""The door's kept sessions (`sbx.agent.KeptSessions`), in a real sandbox, with no face above.

What the E2B face stands on, usable by any face whose clients manage their
own sandboxes: found only by their owner (or their access token), env vars
for the session and for one program, named namespaces with their own
working directory, and an end that kills the session and frees its slot.
The host here is the smallest `SessionHost` (a stand-in for `sbx serve`'s
keys and quotas, which the E2B tests cover).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_IMAGE, wait_until
from sbx.agent import (
    Admitted,
    App,
    KeptSession,
    KeptSessions,
    Owner,
    SessionNotFound,
    load_config,
)


class Host:
    """Every key is its own principal; nothing is limited; ended sessions are noted."""

    def __init__(self, app: App, root: Path) -> None:
        self.app, self.output_root, self.idle_s = app, root, 3600.0
        self.released: list[str] = []

    def authenticate(self, api_key: str) -> Owner:
        return Owner(principal=api_key)

    def admit(self, owner: Owner, session_id: str) -> Admitted:
        return Admitted()

    def release(self, owner: Owner, session_id: str) -> None:
        self.released.append(session_id)


def _stdout(session: KeptSession, code: str, **options) -> str:
    execution = session.python(code, **options).outcome.execution
    assert execution is not None
    return execution.stdout


@pytest.mark.docker
def test_a_kept_session_is_its_owners_keeps_envs_and_namespaces_and_ends_at_its_timeout(
    tmp_path, engine
):
    with App.open(load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app:
        host = Host(app, tmp_path)
        sessions = KeptSessions(host, KeptSession, prefix="kept-")
        ann, bob = host.authenticate("ann"), host.authenticate("bob")
        kept = sessions.create(ann, timeout_s=600, envs={"WHO": "ann"}, run_kind="e2b")
        try:
            assert sessions.find(ann, kept.id) is kept and sessions.of(bob) == []
            with pytest.raises(SessionNotFound):
                sessions.find(bob, kept.id)  # another owner's: not found, never forbidden
            with pytest.raises(SessionNotFound):
                sessions.by_token(kept.id, "not-its-token")
            assert sessions.by_token(kept.id, kept.token) is kept
            with pytest.raises(ValueError, match="timeout"):
                sessions.set_timeout(kept, 0)

            both = "import os\nprint(os.environ['WHO'], os.environ.get('ONCE'))"
            assert _stdout(kept, both, envs={"ONCE": "now"}) == "ann now\n"
            assert _stdout(kept, both) == "ann None\n"  # one program's envs are put back

            space = kept.open_namespace("/work/apart")
            assert _stdout(kept, "x = 'apart'\nimport os\nos.getcwd()",
                           namespace=space) == "'/work/apart'\n"
            kept.python("x = 'own'")
            kept.reset_namespace(space)
            assert "NameError" in _stdout(kept, "try:\n    x\nexcept NameError as e:\n"
                                                "    print(type(e).__name__)", namespace=space)
            assert _stdout(kept, "print(x)") == "own\n"  # the session's own namespace stays
            kept.reset_namespace(space, remove=True)
            with pytest.raises(SessionNotFound):
                kept.python("1", namespace=space)

            sessions.set_timeout(kept, 1)
            assert wait_until(lambda: (sessions.tick(), kept.killed)[1], seconds=30)
            assert host.released == [kept.id]
            with pytest.raises(SessionNotFound):
                sessions.find(ann, kept.id)
        finally:
            sessions.close()

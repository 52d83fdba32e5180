"""`McpSessions`: every live MCP session of one server, by the key its face gave it.

A session opens at its first call (`get`), once the face's `SessionAdmission` lets
it (its data, its extra gate tools, its quotas), under the caller's principal.
It ends when the face says so (`end(key)`: a stdio connection closing, an HTTP
client's `DELETE`), when the server stops (`close()`), or, where the face
asks for it (`idle_ends_session`, HTTP), after an idle timeout. Otherwise an
idle timeout only removes the sandbox and the session goes on (stdio: the
connection is the session).

A session that ended idle leaves a note under its key, so that the next call
with that key (a new session: a sessionless HTTP client has no other way to
learn it) restores its state by replaying the ended session's executions (the
newest `MAX_IDLE_JOURNALS` keys), or says that earlier variables are gone. At
most `MAX_IDLE_NOTES` notes are kept, the oldest dropped first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from pathlib import Path

from sbx.agent import (
    App,
    Caller,
    Cell,
    Closing,
    ConversationSpec,
    FixedData,
    SessionAdmission,
    SessionClosed,
    idle_reason,
)
from sbx.agent.mcp.tool_session import McpSession, new_session_id

logger = logging.getLogger(__name__)

MAX_IDLE_NOTES = 10_000
"""Keys of sessions that ended idle, remembered to tell their next call."""
MAX_IDLE_JOURNALS = 100
"""Of those, the newest whose executions are kept for the next session to replay (each is
bounded by `[restore] max_cells`); older ones are told their state is gone."""


class McpSessions(Closing):
    """The live sessions, by key (see the module docstring); thread-safe."""

    def __init__(
        self, *, app: App, output_root: Path, admission: SessionAdmission | None = None,
        idle_ends_session: bool = False,
    ) -> None:
        self.app = app
        self.output_root = output_root
        self.admission: SessionAdmission = admission or FixedData()
        self.idle_ends_session = idle_ends_session
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._sessions: dict[str, McpSession] = {}
        self._idle_notes: OrderedDict[str, str] = OrderedDict()
        self._journals: OrderedDict[str, tuple[Cell, ...]] = OrderedDict()
        self._closed = False

    def get(self, caller: Caller) -> McpSession:
        """The session for `caller.key`, opened now if it is new (its sandbox at first use).

        Opening asks the face's `SessionAdmission` (which may raise `SessionRefused`). Opens
        are one at a time, so two first calls of one key make one session (and reserve one
        slot).
        """
        with self._lock:
            self._check_open()
            session = self._sessions.get(caller.key)
        if session is not None:
            return session
        with self._opening:
            with self._lock:
                self._check_open()
                session = self._sessions.get(caller.key)
                if session is not None:
                    return session
                reason = self._idle_notes.pop(caller.key, None)
                journal = self._journals.pop(caller.key, ())
            try:
                opened = self._open(caller, reason, journal)
            except BaseException:
                if reason is not None:  # still to be told, by the session that does open
                    with self._lock:
                        self._remember_idle(caller.key, reason, journal)
                raise
            with self._lock:
                if not self._closed:
                    self._sessions[caller.key] = opened
                    return opened
        opened.close()  # the server began stopping meanwhile: release what it reserved
        raise SessionClosed("the MCP server is shutting down")

    def find(self, key: str) -> McpSession | None:
        """The live session for `key`, or None (reading a resource opens nothing)."""
        with self._lock:
            return self._sessions.get(key)

    def end(self, key: str) -> None:
        """The face ended the session `key`: its sandbox is removed, `run_end` written."""
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is not None:
            session.close()

    def live(self) -> list[McpSession]:
        """The open sessions (for sharing the host between keys: `sandbox_share`)."""
        with self._lock:
            return list(self._sessions.values())

    def reap_idle(self, idle_s: float) -> int:
        """Sandboxes (or, `idle_ends_session`, whole sessions) idle for `idle_s` s removed.

        Returns how many were removed.
        """
        with self._lock:
            sessions = list(self._sessions.values())
        now = time.monotonic()
        if not self.idle_ends_session:
            return sum(session.discard_if_idle(idle_s) for session in sessions)
        ended = []
        with self._lock:
            for session in sessions:
                key = session.caller.key
                if self._sessions.get(key) is session and session.end_if_idle(idle_s, now):
                    del self._sessions[key]
                    self._remember_idle(key, idle_reason(idle_s), session.journal())
                    ended.append(session)
        for session in ended:
            try:
                session.close()
            except Exception:  # the others still end; the next tick finds nothing of it
                logger.warning("closing the idle MCP session %s failed", session.id,
                               exc_info=True)
        return len(ended)

    def close(self) -> None:
        """End every session (idempotent); later calls are refused."""
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
        errors: list[BaseException] = []
        for session in sessions:
            try:
                session.close()
            except Exception as exc:  # end the others first, then report
                errors.append(exc)
        if errors:
            raise errors[0]

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("the MCP server is shutting down")

    def _remember_idle(self, key: str, reason: str, journal: tuple[Cell, ...]) -> None:
        self._idle_notes[key] = reason
        while len(self._idle_notes) > MAX_IDLE_NOTES:
            self._idle_notes.popitem(last=False)
        if journal:
            self._journals[key] = journal
            while len(self._journals) > MAX_IDLE_JOURNALS:
                self._journals.popitem(last=False)

    def _open(self, caller: Caller, reset_reason: str | None,
              journal: tuple[Cell, ...] = ()) -> McpSession:
        """A new session for `caller`, with what its face's `SessionAdmission` allows."""
        session_id = new_session_id()
        opened = self.admission.open(caller, session_id)
        spec = ConversationSpec(conversation_id=session_id, principal=caller.principal,
                                team=caller.team, data=opened.data,
                                output_root=self.output_root)
        try:
            return self.app.tool_session(
                spec, extra_tools=opened.tools, limits=caller.limits,
                build=lambda workspace: McpSession(
                    session_id=session_id, workspace=workspace, caller=caller,
                    admission=self.admission, recorder=opened.recorder,
                    reset_reason=reset_reason, journal=journal,
                ))
        except BaseException:
            self.admission.close(caller, session_id)
            raise

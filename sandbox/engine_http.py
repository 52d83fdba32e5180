"""One connection pool to the engine's socket, shared by every request, whatever its URL.

docker-py's unix-socket adapter keys its urllib3 pools by the whole request URL,
so every container's paths get pools of their own, kept in an LRU of 25 that
closes the pool it evicts even while a request still reads through it. With
about 30 containers in flight (32 conversations starting at once) a request
then fails inside urllib3 (`'NoneType' object has no attribute 'qsize'`, or
`Pool is closed`; docker/compose#3586, docker/docker-py#2477). Every request
here goes through one pool keyed by the socket, as an HTTP client keeps one
per host, large enough for the threads that talk to the engine at once.

A socket's requests also skip requests' reading of the environment
(`trust_env`): no proxy or `.netrc` applies to a local socket, and looking
for them scanned every environment variable on every call, about 40% of
sbx's own CPU per engine request (measured with yappi on `sbx serve`).
"""

from __future__ import annotations

from typing import Any

import docker
from docker.transport import UnixHTTPAdapter

ENGINE_CONNECTIONS = 128
"""Idle connections the one pool keeps (threads beyond it get a connection that is then closed)."""
_POOL_KEY = "http+docker://localhost"


class SharedPoolAdapter(UnixHTTPAdapter):  # type: ignore[misc]  # docker-py is untyped
    """docker-py's unix-socket adapter with a single pool for every URL."""

    def get_connection(self, url: Any, proxies: Any = None) -> Any:
        """The one pool, whatever the request's path."""
        return super().get_connection(_POOL_KEY, proxies)


def share_one_pool(api: docker.APIClient) -> None:
    """Mount the shared-pool adapter on `api` when it talks to a unix socket (else leave it)."""
    current = api.adapters.get("http+docker://")
    if not isinstance(current, UnixHTTPAdapter) or isinstance(current, SharedPoolAdapter):
        return
    adapter = SharedPoolAdapter(f"http+unix://{current.socket_path}", current.timeout,
                                max_pool_size=ENGINE_CONNECTIONS)
    api.mount("http+docker://", adapter)
    api.trust_env = False
    api._custom_adapter = adapter  # what APIClient.close() and the stream helpers use
    current.close()

"""`sbx serve`: the HTTP face of sbx, one job per module.

    server.py         uvicorn: SIGTERM drain, a deadline for each request's head
    app.py            the Starlette application, its routes and problem answers
    host.py           Service: the core's Host plus the gateway, admission, metrics, sign-in
    middleware.py     Gateway: the one place every request passes (request id, bounds, errors)
    api.py            @api declarations: authentication, JSON bodies, worker threads
    admission.py      per-key slots for long work, thread pools apart from request threads
    problems.py       RFC 9457 problem documents of the core's refusals
    sse.py            Server-Sent Events with ids, resumable with Last-Event-ID
    datasets.py       /v1/datasets          uploads.py   streamed multipart uploads
    conversations.py  /v1/conversations     runs_api.py  /v1/runs, events, artifacts
    execute.py        /v1/execute           health.py    /healthz, /readyz
    mcp_http.py       /mcp: MCP streamable HTTP behind the keys (the hosting's admission)
    e2b_host.py       E2B's API on the same host
    metrics.py        /metrics; access_log.py one JSON line per request
    openapi.py        /openapi.json from the declarations
    schemas.py        the wire types (requests forbid unknown fields)
    web/              the page, its sign-in through an OpenID Connect provider

The hosting it serves (conversations held here, their runs and event log,
tenants and datasets, retention, adoption, the drain) is the core's
(`agent/core/hosting/`), reached through `sbx.agent` like every face; the
store is `agent/core/hosting/store/`. The face never re-implements a run.
"""

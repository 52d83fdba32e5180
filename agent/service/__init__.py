"""`sbx serve`: the HTTP face of sbx, one job per module.

    server.py         uvicorn: SIGTERM drain, a deadline for each request's head
    app.py            the Starlette application, its routes and problem answers
    middleware.py     Gateway: the one place every request passes (request id, bounds, errors)
    outcomes.py       Observer: the one place outcomes are reported (metrics, traces attach here)
    api.py            @api declarations: authentication, JSON bodies, worker threads
    problems.py       RFC 9457 problem documents
    core.py           Service: one replica assembled from the application core and the store
    runs.py           RunManager: live conversations, worker threads, cancel, idle release
    eventlog.py       run events stored in order; wake-ups for streams
    sse.py            Server-Sent Events with ids, resumable with Last-Event-ID
    replicas.py       heartbeat, redirects, dead replicas' conversations interrupted
    lifecycle.py      Housekeeper: heartbeat, sweep, idle release on one thread
    quotas.py         per-principal quotas, checked and reserved under a row lock
    tenancy.py        every lookup filtered by principal; limits within the policy's
    datasets.py       /v1/datasets          uploads.py   streamed multipart uploads
    conversations.py  /v1/conversations     runs_api.py  /v1/runs, events, artifacts
    execute.py        /v1/execute           health.py    /healthz, /readyz
    mcp_http.py       /mcp: MCP streamable HTTP behind the keys; mcp_tenancy.py its quotas
    openapi.py        /openapi.json from the declarations
    schemas.py        the wire types (requests forbid unknown fields)
    store/            SQLAlchemy models, the engine (SQLite WAL or PostgreSQL), API keys
    migrations/       Alembic, applied at start

The face sits on the application core (`sbx.agent.core.app`, `sbx.agent.core.conversation`,
`sbx.agent.core.workspace`) and never re-implements a run.
"""

"""Hosting: many tenants' conversations on one replica, for every face that serves them.

The HTTP API and its page, MCP over HTTP and E2B's API all work on one `Host`
(a replica of `sbx serve`); a face adds only its protocol. Nothing here
imports a web framework or a face.

    host.py           Host: the store, the app, the conversations held here, the drain
    tenants.py        who a caller is and what applies to them (quotas, budgets, team)
    tenancy.py        every lookup filtered by principal; limits within the policy's
    datasets.py       how a received file becomes a dataset (names, formats, encoding)
    upload_tool.py    upload_dataset's gate tool: a file sent inside a tool call
    session_tenancy.py  ServiceAdmission: a key's quotas and datasets for MCP and E2B sessions
    text_encoding.py  text uploads read in their encoding, stored as UTF-8
    runs.py           RunManager: live conversations, worker threads, cancel, idle release
    recorder.py       StoreRecorder: every run admitted, started and finished in the store
    eventlog.py       run events stored in order; wake-ups for streams (feed.py)
    tenant_view.py    what a tenant may read: no host path, no secret
    observer.py       Observer: the one place outcomes are reported
    lifecycle.py      Housekeeper: heartbeat, sweep, idle release, retention on one thread
    retention.py      runs deleted with their events and artifacts
    sandbox_share.py  idle sandboxes released while other keys wait for the host
    adopt.py          a conversation whose replica is gone, taken up here
    store/            the database (SQLite or PostgreSQL, Alembic): keys, conversations,
                      runs, events, datasets, quotas, replicas

Faces reach it through the door (`sbx.agent`).
"""

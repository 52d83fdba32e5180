"""The E2B face: code written for E2B's Code Interpreter SDK runs unchanged on `sbx serve`.

    /e2b/api        E2B's control plane (create, connect, list, kill, timeout,
                    pause, resume), authenticated by `X-API-Key: <sbx API key>`
    /e2b/sandbox    what the SDK calls a sandbox's URL: the code interpreter
                    (`E2b-Sandbox-Port: 49999`: /execute, /contexts) and envd (its
                    own port: /files, /health, the filesystem and process RPC)

Each E2B sandbox is a `ToolSession` of the door under the key's principal:
its code and its file operations pass the gate and the audit log, count
against the key's quotas and budgets, and come back after an idle release.
The host (`sbx serve`, a `SessionHost`) says who a key is and what it may open.
"""

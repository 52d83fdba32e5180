"""sbx as an MCP server: the sandbox, the gate and the audit log for any MCP client's model.

    server.py     build_server(app, face): the MCPServer, its lifespan, resources; stdio_face
    admission.py  Caller, Admission, Refused: who calls, and what the serving face allows
    sessions.py   McpSessions: the live sessions by key; idle ends a sandbox or a session
    session.py    McpSession: one workspace + one gate per MCP session
    tools.py      execute_python, list_data_files, preview_data_file, reset_sandbox
    upload.py     upload_dataset (only where the face keeps datasets and the policy enables it)
    artifacts.py  /output files as resource links, inline PNGs and sbx://artifacts/ resources
    describe.py   what the calling model is told: packages, /data, /output, network, limits

A face like `agent/cli/`: it calls the application core and nothing below
re-implements a run. `sbx mcp` (agent/cli/mcp.py) serves it over stdio;
`sbx serve` at `/mcp` over streamable HTTP (agent/service/mcp_http.py).
"""

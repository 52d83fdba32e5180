"""sbx as an MCP server: the sandbox, the gate and the audit log for any MCP client's model.

    server.py     build_server(app, principal, data): the MCPServer, its lifespan, resources
    tools.py      execute_python, list_data_files, preview_data_file, reset_sandbox
    session.py    McpSession: one workspace + one gate per MCP session; McpSessions
    artifacts.py  /output files as resource links, inline PNGs and sbx://artifacts/ resources
    describe.py   what the calling model is told: packages, /data, /output, network, limits

A face like `agent/cli/`: it calls the application core and nothing below
re-implements a run. `sbx mcp` (agent/cli/mcp.py) serves it over stdio.
"""

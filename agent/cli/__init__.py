"""The `sbx` command line: a thin face over the application core (`sbx.agent.core.app`)."""

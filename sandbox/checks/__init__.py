"""`sbx doctor` and `sbx selftest`: checks that the host and the sandbox hold their promises."""

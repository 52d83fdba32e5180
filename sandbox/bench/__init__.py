"""`sbx bench`: measured costs of the sandbox paths, interleaved in one run."""

"""Re-running a past conversation's code in a fresh sandbox and comparing the outputs."""

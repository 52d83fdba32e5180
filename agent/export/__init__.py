"""Exports of a past run: a notebook, a script, a markdown report."""

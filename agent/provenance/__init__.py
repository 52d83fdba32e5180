"""Provenance: which output printed each number of an answer.

Also the data a run read, and a past conversation read back from its transcript.
"""

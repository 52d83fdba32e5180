"""Provenance: which output printed each number of an answer.

Also the data a run read (its files' digests).
"""

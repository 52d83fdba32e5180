"""The application core: the front door every face calls, and what it is built from.

Configuration, conversations and workspaces, the agent loop, its state, budgets and
events, the transcript, the history read back from it, and the outcome words every
face shows; `hosting/` serves many tenants' conversations on one replica, with its store.
"""

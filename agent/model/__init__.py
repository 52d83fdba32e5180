"""The model client: Chat Completions through the `openai` SDK.

Our HTTP transport under the SDK, and the parser of each reply.
"""

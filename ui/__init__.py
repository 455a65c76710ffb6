"""Chainlit chat UI for the vLLM server: ``app.py`` wires Chainlit to the plain functions of the sibling modules."""

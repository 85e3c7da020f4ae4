"""The controller role (control plane): scopes, streams, epochs, transactions, reader groups.

``models/`` holds the metadata (one module per aggregate), ``choices.py`` the states and their
allowed transitions, ``selectors.py`` the reads, ``segments.py`` the pure segment and
stream-cut rules. Workflows, tasks and the REST API come next (see ARCHITECTURE.md).
"""

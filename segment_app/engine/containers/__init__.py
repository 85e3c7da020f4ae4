"""Segment containers: the segments of one container, their metadata and its updates.

Its modules:

* ``container``: a segment container
* ``metadata``: container and segment metadata, and the one function that applies an operation
  to them
* ``updater``: validates operations before they are written, against metadata plus everything in
  flight
"""

"""A container's durable log: its operations, their frames on tier-1, and the log itself.

Its modules:

* ``durable_log``: the durable log
* ``frames``: data frames
* ``operations``: log operations
"""

"""What every tier backend's tests share: the contract each plugin must keep.

Its modules:

* ``contract``: the conformance suite every tier backend passes, in-tree or third-party
"""

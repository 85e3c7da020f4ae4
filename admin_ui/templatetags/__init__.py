"""The console's template filters and tags.

Its modules:

* ``console``: template helpers of the console
"""

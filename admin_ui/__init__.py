"""The browser admin console (views here, HTML in ``templates/``).

Not built yet: this is the empty Django app that the console will fill.
"""

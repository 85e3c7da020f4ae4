"""The browser admin console (views here, HTML in ``templates/``).

Not built yet: this is the empty Django app that the console will fill.

Its other modules:

* ``actions``: the console's changes (POST)
* ``apps``: Django app of the browser admin console (empty shell for now)
* ``charts``: geometry of the console's server-drawn SVG figures
* ``kvtables``: the console's key-value tables
* ``security``: the console's Security page
* ``templatetags``: the console's template filters and tags
* ``urls``: paths of the console (mounted at the site root by ``millrace.project.urls``)
"""

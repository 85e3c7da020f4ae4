"""The browser admin console (views here, HTML in ``templates/``): the dashboard, the cluster,
scopes and streams, events, transactions, reader groups, key-value tables, schemas, the audit
log, the Security and Access pages, signed in with the node's users and their roles
(``docs/components/console.md``).

Its other modules:

* ``access``: the console's Access page: grants, groups, Pravega's password file imported
* ``actions``: the console's changes (POST)
* ``apps``: Django app of the browser admin console
* ``charts``: geometry of the console's server-drawn SVG figures
* ``kafka``: the console's Kafka page: listeners and consumer groups
* ``kvtables``: the console's key-value tables
* ``schemas``: the console's Schemas pages (the schema registry)
* ``security``: the console's Security page
* ``templatetags``: the console's template filters and tags
* ``urls``: paths of the console (mounted at the site root by ``millrace.project.urls``)
"""

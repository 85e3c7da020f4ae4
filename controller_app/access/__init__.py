"""Who may do what: users, their roles and tokens, grants on resources, and sign-ins.

Every face (REST, gRPC, the console, the WebSocket tails, the command line) asks ``grants`` and
``roles``; the users, groups, grants and tokens are written only here.

Its modules:

* ``acl``: managing grants: grant, deny, revoke, list, check, groups' members, Pravega's
  password file imported
* ``grants``: who may do what to which resource (Pravega's resource strings), judged for every
  face
* ``roles``: the three roles (viewer, operator, admin): the defaults of users without grants
* ``signin``: sign-ins on the open network
* ``tokens``: API tokens and the segment store's delegation tokens
* ``users``: users and their roles, made by the local commands (``millrace user ...``,
  ``millrace token create``), the console's Security page and the standalone's first
  administrator
"""

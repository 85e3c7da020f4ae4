"""The cluster: segment store nodes' sessions (``membership``), leases (``leases``), the
leader that assigns containers (``leader``) and what an operator is shown (``status``)."""

"""The console's Kafka page: the nodes' Kafka listeners (bootstrap addresses) and the consumer
groups, each with its state, members and, per partition, the offset committed, the end and the
lag in records (``controller_app.kafka_catalog.kafka_groups``, as the REST API's
``/v1/kafka/groups`` shows them); ``?part=tables`` is the tables alone (htmx refreshes them)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from admin_ui.console import context, page
from controller_app.kafka_catalog import kafka_groups


@page
def kafka(request: HttpRequest) -> HttpResponse:
    found = kafka_groups()
    if request.GET.get("part") == "tables":
        return render(request, "admin_ui/_kafka_tables.html", {"kafka": found})
    return render(request, "admin_ui/kafka.html", context(request, kafka=found))

"""The Celery application of Millrace (``celery -A millrace.celery worker|beat``).

Broker and options come from Django settings (the ``CELERY_*`` names in ``millrace.settings``):
Redis when ``REDIS_URL`` is set, else kombu's filesystem transport under the data directory.
Tasks are found in each installed app's ``tasks`` module. A Django process that sends tasks
must have imported this module (e.g. from the ``AppConfig.ready`` of the app defining them), so
that ``shared_task`` sends through this app and its broker, not Celery's default one.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.settings")

app = Celery("millrace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

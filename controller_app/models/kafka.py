"""What Kafka's clients leave with Millrace besides their records: consumer groups' committed
offsets and the producer ids handed out; what each node's Kafka listener last reported; and
each group's lag as the lag round measured it (docs/components/kafka.md)."""

from __future__ import annotations

from django.db import models

__all__ = ["KafkaCommittedOffset", "KafkaGroupLag", "KafkaNodeReport", "KafkaProducerId"]


class KafkaCommittedOffset(models.Model):
    """A Kafka consumer group's committed offset of one partition."""

    group = models.CharField(max_length=255)
    topic = models.CharField(max_length=255)
    partition = models.IntegerField()
    offset = models.BigIntegerField()
    metadata = models.TextField(blank=True, default="")
    committed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "topic", "partition"], name="kafka_offset_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.group} {self.topic}-{self.partition} @ {self.offset}"


class KafkaProducerId(models.Model):
    """A producer id handed out by InitProducerId (its primary key), never handed out again."""

    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"producer {self.pk}"


class KafkaNodeReport(models.Model):
    """What a node's Kafka listener last said of itself: its bootstrap address, the groups it
    coordinates (state, members) and the end offset of each partition it has opened."""

    node = models.CharField(max_length=255, unique=True)
    report = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Kafka listener of {self.node}"


class KafkaGroupLag(models.Model):
    """A Kafka consumer group's lag as the last lag round measured it
    (``controller_app.kafka_lag``): the report the views show, the samples its status is judged
    over and each partition's recent end offsets (what a committed offset's age is read
    from)."""

    group = models.CharField(max_length=255, unique=True)
    computed_at_ms = models.BigIntegerField(default=0)
    status = models.CharField(max_length=8, default="OK")
    report = models.JSONField(default=dict, blank=True)
    samples = models.JSONField(default=list, blank=True)
    tails = models.JSONField(
        default=dict, blank=True, help_text='{"<topic>/<partition>": [[ms, end offset], ...]}'
    )

    def __str__(self) -> str:
        return f"lag of Kafka group {self.group}: {self.status}"

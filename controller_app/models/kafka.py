"""What Kafka's clients leave with Millrace besides their records: consumer groups' committed
offsets and the producer ids handed out; and what each node's Kafka listener last reported
(docs/components/kafka.md)."""

from __future__ import annotations

from django.db import models

__all__ = ["KafkaCommittedOffset", "KafkaNodeReport", "KafkaProducerId"]


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

"""What Kafka's clients leave with Millrace besides their records: consumer groups' committed
offsets and the producer ids handed out (docs/components/kafka.md)."""

from __future__ import annotations

from django.db import models

__all__ = ["KafkaCommittedOffset", "KafkaProducerId"]


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

"""The ``s3`` tier-2 backend: chunks as objects in an S3 bucket (AWS or S3-compatible).

Responsibility: export ``S3ChunkStorage`` (implemented in ``storage.py``).
"""

from tiers.s3.storage import S3ChunkStorage

__all__ = ["S3ChunkStorage"]

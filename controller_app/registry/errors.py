"""The registry's errors, as Confluent's Schema Registry answers them (HTTP status, error code).

Clients branch on the codes (``confluent-kafka``'s ``SchemaRegistryError.error_code``), so each
is Confluent's, with its message.
"""

from __future__ import annotations

__all__ = ["RegistryError"]


class RegistryError(Exception):
    """An answer other than success: ``status`` (HTTP), ``code`` (Confluent's error code)."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    # -- not found (404) ----------------------------------------------------------------------

    @classmethod
    def subject_not_found(cls, subject: str) -> RegistryError:
        return cls(404, 40401, f"Subject '{subject}' not found.")

    @classmethod
    def version_not_found(cls, subject: str, version: object) -> RegistryError:
        return cls(404, 40402, f"Version {version} not found for subject '{subject}'.")

    @classmethod
    def schema_not_found(cls, what: str = "Schema not found") -> RegistryError:
        return cls(404, 40403, what)

    @classmethod
    def subject_soft_deleted(cls, subject: str) -> RegistryError:
        return cls(
            404,
            40404,
            f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
        )

    @classmethod
    def subject_not_soft_deleted(cls, subject: str) -> RegistryError:
        return cls(
            404,
            40405,
            f"Subject '{subject}' was not deleted first before being permanently deleted",
        )

    @classmethod
    def version_soft_deleted(cls, subject: str, version: int) -> RegistryError:
        return cls(
            404,
            40406,
            f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to "
            "delete permanently",
        )

    @classmethod
    def version_not_soft_deleted(cls, subject: str, version: int) -> RegistryError:
        return cls(
            404,
            40407,
            f"Subject '{subject}' Version {version} was not deleted first before being "
            "permanently deleted",
        )

    @classmethod
    def no_subject_compatibility(cls, subject: str) -> RegistryError:
        return cls(
            404,
            40408,
            f"Subject '{subject}' does not have subject-level compatibility configured",
        )

    @classmethod
    def no_subject_mode(cls, subject: str) -> RegistryError:
        return cls(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")

    # -- refused (409, 422) -----------------------------------------------------------------------

    @classmethod
    def incompatible(cls, subject: str, details: list[str]) -> RegistryError:
        return cls(
            409,
            409,
            "Schema being registered is incompatible with an earlier schema for subject "
            f'"{subject}", details: {details}',
        )

    @classmethod
    def invalid_schema(cls, why: str) -> RegistryError:
        return cls(422, 42201, f"Invalid schema: {why}")

    @classmethod
    def invalid_version(cls, version: object) -> RegistryError:
        return cls(
            422,
            42202,
            f"The specified version '{version}' is not a valid version id. Allowed values are "
            'between [1, 2^31-1] and the string "latest"',
        )

    @classmethod
    def invalid_compatibility(cls, level: object) -> RegistryError:
        return cls(
            422,
            42203,
            f"Invalid compatibility level {level!r}. Valid values are none, backward, forward, "
            "full, backward_transitive, forward_transitive, and full_transitive",
        )

    @classmethod
    def invalid_mode(cls, mode: object) -> RegistryError:
        return cls(
            422,
            42204,
            f"Invalid mode {mode!r}. Valid values are READWRITE, READONLY and READONLY_OVERRIDE",
        )

    @classmethod
    def read_only(cls, subject: str) -> RegistryError:
        return cls(422, 42205, f"Subject {subject} is in read-only mode")

    @classmethod
    def referenced(cls, subject: str, version: int, by: list[int]) -> RegistryError:
        return cls(
            422,
            42206,
            f"One or more references exist to the schema {{subject={subject}, version={version}}}"
            f" (schema ids {by})",
        )

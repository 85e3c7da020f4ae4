"""Configuration: environment variables select the database, channel layer, broker and tiers;
bad values fail with one line naming the variable; secrets are generated once and persisted."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import kombu
import pytest
from channels.layers import get_channel_layer
from django.conf import settings

from millrace.kernel import defaults
from millrace.kernel.config import ConfigError, SegmentStoreSettings, WebSettings, persisted_secret
from millrace.project import settings as millrace_settings

PG_URL = "postgres://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


def django_settings_in_subprocess(data_dir: Path, **env: str) -> dict:
    """The settings a fresh process builds from ``env`` (nothing inherited but PATH)."""
    script = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'db': s.DATABASES['default'], 'layer': s.CHANNEL_LAYERS['default'],"
        " 'broker': s.CELERY_BROKER_URL, 'broker_options': s.CELERY_BROKER_TRANSPORT_OPTIONS,"
        " 'permissions': s.REST_FRAMEWORK['DEFAULT_PERMISSION_CLASSES'],"
        " 'secret': s.SECRET_KEY}))"
    )
    base = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "millrace.project.settings"}
    full_env = base | {"MILLRACE_DATA_DIR": str(data_dir)} | env
    done = subprocess.run(
        [sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# -- database ------------------------------------------------------------------------------


def test_sqlite_in_data_dir_by_default(data_dir: Path) -> None:
    db = millrace_settings.database_config(None, data_dir)
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(data_dir / "millrace.sqlite3")


def test_database_url_switches_to_postgres(data_dir: Path) -> None:
    db = millrace_settings.database_config(PG_URL, data_dir)
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["HOST"], db["PORT"], db["NAME"], db["USER"]) == (
        "127.0.0.1",
        5432,
        "test",
        "postgres",
    )


def test_bad_database_url_names_variable_and_hides_password(data_dir: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        millrace_settings.database_config("bogus://admin:hun%40ter2@db/x", data_dir)
    message = str(caught.value)
    assert message.startswith("DATABASE_URL='bogus://admin:***@db/x'")
    assert "hun" not in message
    assert "\n" not in message


def test_settings_module_follows_environment(data_dir: Path) -> None:
    default = django_settings_in_subprocess(data_dir)
    assert default["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert default["db"]["NAME"] == str(data_dir / "millrace.sqlite3")
    assert default["layer"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    assert default["broker"] == "filesystem://localhost/"
    assert default["broker_options"]["data_folder_in"].startswith(str(data_dir))
    # one permission class either way: the roles, which let everyone through with auth off
    assert default["permissions"] == ["controller_app.api.permissions.RolePermission"]

    switched = django_settings_in_subprocess(
        data_dir, DATABASE_URL=PG_URL, REDIS_URL=REDIS, MILLRACE_AUTH="off"
    )
    assert switched["db"]["ENGINE"] == "django.db.backends.postgresql"
    assert switched["layer"] == {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": REDIS, **millrace_settings.redis_options()}]},
    }
    assert switched["broker"] == REDIS
    assert switched["permissions"] == ["controller_app.api.permissions.RolePermission"]
    # The generated SECRET_KEY is persisted: both processes used the same one.
    assert default["secret"] == switched["secret"]
    assert default["secret"] == (data_dir / "secrets" / "django-secret-key").read_text()


def test_secret_key_from_environment_wins(data_dir: Path) -> None:
    got = django_settings_in_subprocess(data_dir, MILLRACE_SECRET_KEY="given-secret")
    assert got["secret"] == "given-secret"
    assert not (data_dir / "secrets" / "django-secret-key").exists()


# -- channel layer and broker --------------------------------------------------------------


def test_channel_layers_switch_on_redis_url() -> None:
    memory = millrace_settings.channel_layers(None)["default"]
    assert memory["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    redis = millrace_settings.channel_layers(REDIS)["default"]
    assert redis["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    (host,) = redis["CONFIG"]["hosts"]
    assert host["address"] == REDIS
    # Above channels_redis's 5 s blocking pop: redis-py's default (5 s) dropped idle tails.
    assert host["socket_timeout"] > 5 * 2


async def test_configured_channel_layer_delivers_a_message() -> None:
    """Whichever layer this run is configured with (in-memory, or Redis with REDIS_URL)."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "test.message", "n": 7})
    assert await layer.receive(channel) == {"type": "test.message", "n": 7}


def test_configured_broker_round_trips_a_message(data_dir: Path) -> None:
    """The broker of this run (filesystem, or Redis with REDIS_URL) carries a message."""
    url, options = millrace_settings.celery_broker(settings.MILLRACE.redis_url, data_dir)
    with kombu.Connection(url, transport_options=options) as connection:
        queue = connection.SimpleQueue(f"millrace-test-{uuid.uuid4().hex}")
        queue.put({"n": 1})
        message = queue.get(timeout=10)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()


def test_filesystem_broker_is_shared_between_processes(data_dir: Path) -> None:
    """A message published by another process (using the settings module) reaches this one."""
    script = (
        "import kombu; from millrace.project import settings as s; "
        "c = kombu.Connection(s.CELERY_BROKER_URL,"
        " transport_options=s.CELERY_BROKER_TRANSPORT_OPTIONS); "
        "c.SimpleQueue('millrace-shared').put({'from': 'producer'}); c.release()"
    )
    env = {"PATH": os.environ["PATH"], "MILLRACE_DATA_DIR": str(data_dir)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    url, options = millrace_settings.celery_broker(None, data_dir)
    with kombu.Connection(url, transport_options=options) as connection:
        message = connection.SimpleQueue("millrace-shared").get(timeout=10)
        assert message.payload == {"from": "producer"}
        message.ack()


# -- segment store settings ----------------------------------------------------------------


def test_segment_store_defaults(data_dir: Path) -> None:
    store = SegmentStoreSettings.from_env({"MILLRACE_DATA_DIR": str(data_dir)})
    assert store.data_dir == data_dir
    assert (store.host, store.port, store.container_count) == ("127.0.0.1", 12345, 4)
    assert (store.tier1, store.tier2) == ("file", "filesystem")
    assert store.tier1_options == {} and store.tier2_options == {}
    assert store.auth_enabled is True
    assert store.token_secret == (data_dir / "secrets" / "token-secret").read_text()
    assert store.token_secret not in repr(store)


def test_segment_store_from_environment(data_dir: Path) -> None:
    store = SegmentStoreSettings.from_env(
        {
            "MILLRACE_DATA_DIR": str(data_dir),
            "MILLRACE_SEGMENTSTORE_HOST": "0.0.0.0",
            "MILLRACE_SEGMENTSTORE_PORT": "23456",
            "MILLRACE_CONTAINERS": "8",
            "MILLRACE_TIER1": "memory",
            "MILLRACE_TIER1_OPTIONS": '{"frame_bytes_max": 1024}',
            "MILLRACE_TIER2": "tiers.memory:MemoryChunkStorage",
            "MILLRACE_TIER2_OPTIONS": '{"root": "/srv"}',
            "MILLRACE_AUTH": "OFF",
            "MILLRACE_TOKEN_SECRET": "shared-secret",
            "MILLRACE_TIER2_FLUSH_DELAY_MS": "30000",
            "MILLRACE_TIER2_FLUSH_BYTES": "1048576",
            "MILLRACE_CACHE_BYTES": "2147483648",
        }
    )
    assert (store.tier2_flush_delay_ms, store.tier2_flush_bytes) == (30_000, 1024 * 1024)
    assert store.cache_bytes == 2 * 1024**3
    assert (store.host, store.port, store.container_count) == ("0.0.0.0", 23456, 8)
    assert (store.tier1, store.tier1_options) == ("memory", {"frame_bytes_max": 1024})
    assert store.tier2 == "tiers.memory:MemoryChunkStorage"
    assert store.tier2_options == {"root": "/srv"}
    assert store.auth_enabled is False
    assert store.token_secret == "shared-secret"
    assert not (data_dir / "secrets" / "token-secret").exists()


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("MILLRACE_SEGMENTSTORE_PORT", "abc", "not an integer"),
        ("MILLRACE_SEGMENTSTORE_PORT", "70000", "between 0 and 65535"),
        ("MILLRACE_CONTAINERS", "0", "between 1 and"),
        ("MILLRACE_TIER1", "fiel", "unknown tier-1 backend 'fiel'; did you mean 'file'?"),
        ("MILLRACE_TIER2", "nfs", "unknown tier-2 backend"),
        ("MILLRACE_TIER2", "nosuchpkg.mod:Storage", "cannot import module 'nosuchpkg.mod'"),
        ("MILLRACE_TIER1_OPTIONS", "{bad json", "not valid JSON"),
        ("MILLRACE_TIER2_OPTIONS", "[1, 2]", "expected a JSON object"),
        ("MILLRACE_AUTH", "perhaps", "expected on/off"),
        ("MILLRACE_TIER2_FLUSH_DELAY_MS", "5", "between 10 and"),
        ("MILLRACE_TIER2_FLUSH_BYTES", "lots", "not an integer"),
        ("MILLRACE_CACHE_BYTES", "1000", "between"),
    ],
)
def test_bad_segment_store_value_is_one_clear_line(
    data_dir: Path, variable: str, value: str, why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        SegmentStoreSettings.from_env({"MILLRACE_DATA_DIR": str(data_dir), variable: value})
    message = str(caught.value)
    assert message.startswith(f"{variable}={value!r}: ")
    assert why in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REDIS_URL", "http://cache:6379"),
        ("MILLRACE_DEBUG", "loud"),
        ("MILLRACE_AUTH", "2"),
        ("MILLRACE_TOKEN_TTL_SECONDS", "ten"),
        ("MILLRACE_TOKEN_TTL_SECONDS", "1"),
        ("MILLRACE_RETENTION_PERIOD_S", "0"),
        ("MILLRACE_WATERMARK_PERIOD_S", "soon"),
    ],
)
def test_bad_web_value_names_the_variable(data_dir: Path, variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{variable}="):
        WebSettings.from_env({"MILLRACE_DATA_DIR": str(data_dir), variable: value})


@pytest.mark.parametrize("settings", [WebSettings, SegmentStoreSettings])
def test_a_session_timeout_at_or_below_the_clients_silence_limit_is_refused(
    data_dir: Path, settings: type[WebSettings] | type[SegmentStoreSettings]
) -> None:
    """A client gives a silent node up after ``CLIENT_SILENCE_SECONDS``; a session timeout not
    above it would move a node's containers before its clients noticed the silence."""
    base = {"MILLRACE_DATA_DIR": str(data_dir)}
    limit = int(defaults.CLIENT_SILENCE_SECONDS)
    for value in (2, limit):
        with pytest.raises(ConfigError, match="above the clients' silence limit"):
            settings.from_env({**base, "MILLRACE_NODE_SESSION_TIMEOUT_S": str(value)})
    chosen = settings.from_env({**base, "MILLRACE_NODE_SESSION_TIMEOUT_S": str(limit + 1)})
    assert chosen.session_timeout_s == limit + 1
    assert settings.from_env(base).session_timeout_s > defaults.CLIENT_SILENCE_SECONDS


def test_delegation_token_lifetime(data_dir: Path) -> None:
    base = {"MILLRACE_DATA_DIR": str(data_dir)}
    assert WebSettings.from_env(base).token_ttl_seconds == 600  # Pravega's default too
    ttl = WebSettings.from_env({**base, "MILLRACE_TOKEN_TTL_SECONDS": "30"}).token_ttl_seconds
    assert ttl == 30


def test_periodic_rounds(data_dir: Path) -> None:
    base = {"MILLRACE_DATA_DIR": str(data_dir)}
    default = WebSettings.from_env(base)
    assert (default.retention_period_s, default.watermark_period_s) == (300, 10)
    short = WebSettings.from_env(
        {**base, "MILLRACE_RETENTION_PERIOD_S": "2", "MILLRACE_WATERMARK_PERIOD_S": "1"}
    )
    assert (short.retention_period_s, short.watermark_period_s) == (2, 1)


def test_data_dir_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ConfigError, match=r"^MILLRACE_DATA_DIR=.*not a directory"):
        SegmentStoreSettings.from_env({"MILLRACE_DATA_DIR": str(not_a_dir)})


def test_persisted_secret_is_generated_once_and_private(data_dir: Path) -> None:
    first = persisted_secret(data_dir, "token-secret")
    assert len(first) >= 32
    assert persisted_secret(data_dir, "token-secret") == first
    assert persisted_secret(data_dir, "other") != first
    path = data_dir / "secrets" / "token-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


def test_empty_persisted_secret_is_an_error(data_dir: Path) -> None:
    (data_dir / "secrets").mkdir()
    (data_dir / "secrets" / "token-secret").write_text("")
    with pytest.raises(ConfigError, match="empty secret file"):
        persisted_secret(data_dir, "token-secret")

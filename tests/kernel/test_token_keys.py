"""Delegation-token secrets that rotate: the keyring file, the overlap, and the verifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from millrace.kernel.claims import (
    READ,
    AuthError,
    TokenKeys,
    TokenVerifier,
    fingerprint,
    mint_token,
)

SEED = "a-seed-secret-long-enough-for-hs256-keys"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_without_a_keyring_the_seed_signs_and_verifies(tmp_path: Path) -> None:
    keys = TokenKeys(SEED, tmp_path / "keyring")
    assert keys.signing == SEED
    assert keys.verifying() == [SEED]
    assert keys.describe()["retiring"] == []


def test_a_rotation_signs_with_a_new_secret_and_the_old_verifies_for_the_overlap(
    tmp_path: Path,
) -> None:
    clock = Clock()
    keys = TokenKeys(SEED, tmp_path / "keyring", clock=clock)
    old_token = mint_token(keys.signing, "s/st/", READ, 60, now=clock.now)
    verifier = TokenVerifier(keys, clock=clock)
    new = keys.rotate(overlap_seconds=120)
    assert keys.signing != SEED and fingerprint(keys.signing) == new
    assert (tmp_path / "keyring").stat().st_mode & 0o777 == 0o600
    verifier.check(old_token, "s/st/0.#epoch.0", READ)  # within the overlap
    verifier.check(mint_token(keys.signing, "s/st/", READ, 60, now=clock.now), "s/st/1", READ)
    clock.now += 121  # the overlap is over: the old secret verifies nothing (cache or not)
    with pytest.raises(AuthError, match="matches no current token secret"):
        verifier.check(mint_token(SEED, "s/st/", READ, 600, now=clock.now), "s/st/1", READ)
    with pytest.raises(AuthError, match="matches no current token secret"):
        verifier.check(old_token, "s/st/0.#epoch.0", READ)


def test_a_token_verified_before_its_secret_retired_is_refused_after(tmp_path: Path) -> None:
    clock = Clock()
    keys = TokenKeys(SEED, tmp_path / "keyring", clock=clock)
    verifier = TokenVerifier(keys, clock=clock)
    token = mint_token(SEED, "s/st/", READ, 10_000, now=clock.now)
    verifier.check(token, "s/st/0", READ)  # decoded and cached
    keys.rotate(overlap_seconds=5)
    verifier.check(token, "s/st/0", READ)
    clock.now += 6
    with pytest.raises(AuthError, match="matches no current token secret"):
        verifier.check(token, "s/st/0", READ)


def test_without_the_overlap_a_rotation_refuses_the_old_tokens_at_once(tmp_path: Path) -> None:
    """The guard switched off (TEST-ONLY ``no-token-overlap``) must fail the overlap's test."""
    keys = TokenKeys(SEED, tmp_path / "keyring", overlap=False)
    verifier = TokenVerifier(keys)
    token = mint_token(keys.signing, "s/st/", READ, 600)
    keys.rotate(overlap_seconds=600)
    with pytest.raises(AuthError):
        verifier.check(token, "s/st/0", READ)


def test_another_process_rotating_is_seen_at_once_by_a_token_it_signed(tmp_path: Path) -> None:
    """A verifier refreshes the keyring when a token does not verify: the controller may sign
    with the new secret before the segment store's once-a-second look at the file."""
    path = tmp_path / "keyring"
    verifier = TokenVerifier(TokenKeys(SEED, path))
    elsewhere = TokenKeys(SEED, path)
    elsewhere.rotate(overlap_seconds=60)
    verifier.check(mint_token(elsewhere.signing, "*", READ, 60), "a/b/0", READ)


def test_a_bad_keyring_keeps_the_last_keys_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keyring"
    keys = TokenKeys(SEED, path)
    keys.rotate(overlap_seconds=60)
    signing = keys.signing
    path.write_text(json.dumps({"current": ""}))
    keys.refresh(force=True)
    keys.refresh(force=True)
    assert keys.signing == signing
    warned = [r for r in caplog.records if "token keyring does not load" in r.getMessage()]
    assert len(warned) == 1  # once, not at every look
    assert "empty" in (keys.describe()["error"] or "")
    with pytest.raises(ValueError, match="overlap"):
        keys.rotate(overlap_seconds=-1)

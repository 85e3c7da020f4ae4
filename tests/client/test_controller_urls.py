"""Several controllers in one URI, as Pravega's clients take them."""

from __future__ import annotations

import pytest

from millrace.client.controller import controller_urls


def test_one_or_several_controllers() -> None:
    assert controller_urls("http://a:9091/") == ["http://a:9091"]
    assert controller_urls("http://a:9091,b:9091") == ["http://a:9091", "http://b:9091"]
    assert controller_urls("tls://a:9091, https://b:9091") == ["https://a:9091", "https://b:9091"]


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("http://a:9091,", "an empty controller address"),
        ("tcp://a:9090", "give the controller's URL"),
        ("http://a:9091,https://b:9091", "must all use TLS or none"),
    ],
)
def test_a_bad_list_is_refused_saying_why(uri: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        controller_urls(uri)

"""A config error never quotes a secret (found by attacking it): a too-short
``session_secret``, an ``admin_token`` of the wrong type, a DSN — and a key/value DSN's
password is masked wherever sepp prints a DSN."""

from __future__ import annotations

from pathlib import Path

import pytest

from sepp.server.config import ConfigError, load_config
from sepp.storage.postgres.schema import redact


@pytest.mark.parametrize(("toml", "secret"), [
    ('[auth]\nsession_secret = "short-s3cret-value"\n', "short-s3cret-value"),
    ("admin_token = 12345678901\n", "12345678901"),
])
def test_a_refused_secret_is_not_quoted(tmp_path: Path, toml: str, secret: str) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text(toml, "utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert secret not in str(caught.value)


@pytest.mark.parametrize(("dsn", "shown"), [
    ("host=db password=s3cret dbname=x", "host=db password=*** dbname=x"),
    ("host=db password='s3 cret' user=u", "host=db password=*** user=u"),
    ("postgresql://u:s3cret@db/x", "postgresql://u:***@db/x"),
    ("postgresql://u@db/x?password=s3cret&sslmode=require", "postgresql://u@db/x?password=***&sslmode=require"),
    ("postgresql://u@db/x", "postgresql://u@db/x"),
])
def test_every_dsn_form_has_its_password_masked(dsn: str, shown: str) -> None:
    assert redact(dsn) == shown

"""Shared helpers for the scale-out stack's checks without a daemon: the compose files, a secrets directory
like the one deploy/compose.sh makes, and ``docker-compose config`` of the stack with its overrides."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from deploy_paths import DEPLOY, compose_config, run_compose

SCALEOUT = DEPLOY / "compose" / "scaleout.yml"
SCALEOUT_DIR = DEPLOY / "compose" / "scaleout"
REPLICAS = ("keystream-1", "keystream-2", "keystream-3")
DATABASE_URL = "postgresql://keystream:pw@postgres:5432/keystream"


def write_secrets(directory: Path, *, master_key: bool = True) -> Path:
    """The files deploy/compose.sh makes in build/scaleout (contents that only need to parse); the master key
    only for the file seal."""
    (directory / "keystream.env").write_text(
        f"KEYSTREAM_DATABASE_URL={DATABASE_URL}\nKEYSTREAM_ROOT_TOKEN=ks_0123456789abcdef_{'x' * 32}\n"
    )
    (directory / "postgres.env").write_text("POSTGRES_PASSWORD=pw\n")
    if master_key:
        (directory / "master-key").write_text("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n")
    return directory


def compose(
    *args: str, secrets: Path | None, overrides: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``docker-compose -f scaleout.yml [-f OVERRIDE ...] ARGS`` from the repository, no KEYSTREAM_* set but
    the secrets directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    if secrets is not None:
        env["KEYSTREAM_SCALEOUT_SECRETS"] = str(secrets)
    return run_compose((SCALEOUT, *overrides), *args, env=env)


def resolved(secrets: Path, overrides: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The stack as docker-compose resolves it (``config``), with ``overrides`` applied."""
    return compose_config(compose("config", secrets=secrets, overrides=overrides))

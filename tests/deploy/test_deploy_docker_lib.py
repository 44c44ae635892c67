"""The Docker scripts' logic without a daemon: no early-exiting pipe reader under pipefail, and
deploy/docker-lib.sh installing docker.io/debootstrap, starting dockerd with the first storage driver that
works and stopping only what it started -- run against stand-in `apt-get`, `dockerd`, `docker` and `id`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_paths import REPO

LIB = REPO / "deploy" / "docker-lib.sh"
SHELL_SCRIPTS = sorted([*REPO.glob("deploy/*.sh"), *REPO.glob("scripts/*.sh")])

#: A pipe (not `||`) into a reader that may exit before its writer is done: the writer then dies of SIGPIPE,
#: and under `set -o pipefail` the whole pipeline fails although the reader found what it wanted.
EARLY_EXIT_READER = re.compile(
    r"(?<!\|)\|(?!\|)\s*(grep\s+(-[a-zA-Z]*[qm]|--quiet|--silent|--max-count)|head\b|sed\s+(-n\s+)?['\"]?\d*q)"
)

#: Real tools the library needs besides bash builtins; everything else on PATH is a stand-in.
REAL_TOOLS = ("sleep", "setsid", "tail", "rm", "chmod", "touch", "cat", "printf")

FAKE_DOCKERD = """#!/bin/bash
echo "$*" >>"$STATE/dockerd.calls"
case "$*" in *--storage-driver=overlay2*)
    [ -n "${OVERLAY2_WORKS:-}" ] || { echo "overlay2 is not supported here" >&2; exit 1; } ;;
esac
trap 'rm -f "$STATE/up"; echo stopped >>"$STATE/dockerd.calls"; exit 0' TERM
touch "$STATE/up"
while :; do sleep 0.05; done
"""
FAKE_DOCKER = """#!/bin/bash
[ "$1" = info ] && [ -e "$STATE/up" ]
"""
FAKE_APT_GET = """#!/bin/bash
echo "$* policy=$([ -x "$POLICY" ] && echo present || echo absent)" >>"$STATE/apt-get.calls"
case " $* " in *" install "*)
    cp "$STATE/dockerd.template" "$BIN/dockerd"; printf '#!/bin/bash\\n' >"$BIN/debootstrap"
    chmod +x "$BIN/dockerd" "$BIN/debootstrap" ;;
esac
"""


def logical_lines(text: str) -> list[str]:
    """Shell lines with backslash continuations joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if not line.lstrip().startswith("#")]


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_no_pipe_into_an_early_exiting_reader_under_pipefail(script: Path) -> None:
    text = script.read_text()
    if "pipefail" not in text and script != LIB:  # the library runs inside its callers' pipefail
        return
    offending = [line.strip() for line in logical_lines(text) if EARLY_EXIT_READER.search(line)]
    assert not offending, f"{script.name}: write to a file first, then grep it:\n" + "\n".join(offending)


def test_the_early_exit_pattern_catches_the_cold_run_failure() -> None:
    """The line that failed `make docker-test` on a cold run, and what is fine."""
    assert EARLY_EXIT_READER.search("curl -fsS \"$base/metrics\" | grep -q '^keystream_crypto'")
    assert EARLY_EXIT_READER.search("grep x f | head -n 1")
    assert not EARLY_EXIT_READER.search("grep -q x file || exit 1")
    assert not EARLY_EXIT_READER.search("docker logs c | sed 's/^/  /'")


class Machine:
    """A PATH of stand-ins for a machine without dockerd; `run` sources the library and runs a script."""

    def __init__(self, root: Path, installed: bool, uid: int = 0, overlay2_works: bool = False) -> None:
        self.state = root / "state"
        self.bin = root / "bin"
        self.state.mkdir()
        self.bin.mkdir()
        self.policy = root / "policy-rc.d"
        for name in REAL_TOOLS:
            real = shutil.which(name)
            assert real, name
            (self.bin / name).symlink_to(real)
        (self.state / "dockerd.template").write_text(FAKE_DOCKERD)
        self._script("docker", FAKE_DOCKER)
        self._script("apt-get", FAKE_APT_GET)
        self._script("cp", '#!/bin/bash\nexec "$REAL_CP" "$@"\n')
        self._script("id", f"#!/bin/bash\necho {uid}\n")
        if installed:
            self._script("dockerd", FAKE_DOCKERD)
            self._script("debootstrap", "#!/bin/bash\n")
        self.env = {
            "PATH": str(self.bin),
            "STATE": str(self.state),
            "BIN": str(self.bin),
            "POLICY": str(self.policy),
            "KEYSTREAM_POLICY_RC_D": str(self.policy),
            "KEYSTREAM_DOCKERD_START_TIMEOUT": "10",
            "REAL_CP": shutil.which("cp") or "cp",
        }
        if overlay2_works:
            self.env["OVERLAY2_WORKS"] = "1"

    def _script(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        bash = shutil.which("bash") or "/bin/bash"
        return subprocess.run(
            [bash, "-c", f"set -euo pipefail\nsource {LIB}\n{script}"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def calls(self, tool: str) -> list[str]:
        path = self.state / f"{tool}.calls"
        return path.read_text().splitlines() if path.exists() else []


START_AND_STOP = """
docker_ensure_packages
docker_daemon_start "$STATE/dockerd.log"
echo "started=$DOCKERD_STARTED_PID"
docker info
docker_daemon_stop "$DOCKERD_STARTED_PID"
"""


def test_a_fresh_machine_gets_the_packages_and_a_daemon_that_is_stopped_again(tmp_path: Path) -> None:
    machine = Machine(tmp_path, installed=False)
    result = machine.run(START_AND_STOP)
    assert result.returncode == 0, result.stderr
    (install,) = [call for call in machine.calls("apt-get") if " install " in f" {call} "]
    assert "docker.io" in install.split() and "debootstrap" in install.split()
    assert "policy=present" in install  # no service start by the maintainer scripts
    assert not machine.policy.exists()  # and the policy is gone again
    # overlay2 is tried first, fails here, then vfs answers; the daemon is stopped at the end.
    assert machine.calls("dockerd") == ["--storage-driver=overlay2", "--storage-driver=vfs", "stopped"]
    assert re.search(r"^started=\d+$", result.stdout, re.M)
    assert not (machine.state / "up").exists()


def test_overlay2_is_used_when_it_works(tmp_path: Path) -> None:
    machine = Machine(tmp_path, installed=True, overlay2_works=True)
    result = machine.run(START_AND_STOP)
    assert result.returncode == 0, result.stderr
    assert machine.calls("apt-get") == []
    assert machine.calls("dockerd") == ["--storage-driver=overlay2", "stopped"]


def test_a_running_daemon_is_used_and_left_alone(tmp_path: Path) -> None:
    machine = Machine(tmp_path, installed=True)
    (machine.state / "up").touch()
    result = machine.run(START_AND_STOP)
    assert result.returncode == 0, result.stderr
    assert "started=\n" in result.stdout
    assert machine.calls("dockerd") == []
    assert (machine.state / "up").exists()


def test_a_daemon_that_never_answers_fails_with_its_log(tmp_path: Path) -> None:
    machine = Machine(tmp_path, installed=True)
    machine.env["KEYSTREAM_DOCKER_STORAGE_DRIVERS"] = "overlay2"
    result = machine.run(START_AND_STOP)
    assert result.returncode != 0
    assert "failed with every storage driver" in result.stderr
    assert "overlay2 is not supported here" in result.stderr


def test_without_root_it_says_what_to_install(tmp_path: Path) -> None:
    machine = Machine(tmp_path, installed=False, uid=1000)
    result = machine.run("docker_ensure_packages")
    assert result.returncode != 0
    assert "apt-get install docker.io debootstrap" in result.stderr
    assert machine.calls("apt-get") == []


def test_the_debian_mirror_comes_from_the_apt_sources(tmp_path: Path) -> None:
    machine = Machine(tmp_path, installed=True)
    for name in ("grep",):
        real = shutil.which(name)
        assert real
        (machine.bin / name).symlink_to(real)
    result = machine.run("docker_debian_mirror")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"https?://\S+/debian/?\n", result.stdout), result.stdout
    assert "security" not in result.stdout


def test_docker_scripts_use_the_library() -> None:
    for name in ("docker-test.sh", "compose.sh"):
        text = (REPO / "deploy" / name).read_text()
        assert 'source "$repo/deploy/docker-lib.sh"' in text, name
        for function in ("docker_ensure_packages", "docker_daemon_start", "docker_build_image"):
            assert function in text, f"{name} does not call {function}"
    assert os.access(REPO / "deploy" / "docker-test.sh", os.X_OK)

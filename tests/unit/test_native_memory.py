"""The allocator settings: glibc's bounds for a long sync, jemalloc for the processes that serve queries."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from appliance.platform import native_memory
from appliance.platform.native_memory import bound_malloc, give_back, with_jemalloc, without_jemalloc
from appliance.sync import rounds


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's options are glibc's")
def test_glibc_takes_the_bounded_allocator_settings() -> None:
    assert bound_malloc() and give_back()


def _allocator_of(env: dict[str, str]) -> str:
    probe = "from appliance.platform.native_memory import allocator; print(allocator())"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(native_memory.jemalloc_library() is None,
                    reason="jemalloc is not installed (Debian: apt-get install libjemalloc2; CI and the image have it)")
def test_a_serving_process_runs_on_jemalloc_and_an_indexing_one_on_glibc() -> None:
    base = without_jemalloc(os.environ)
    served = with_jemalloc({**base, "LD_PRELOAD": ""})
    assert _allocator_of(served) == "jemalloc"
    assert with_jemalloc(served) == served  # preloaded once, not twice
    assert _allocator_of(without_jemalloc(served)) == "glibc"


def test_only_jemalloc_leaves_the_preload_list() -> None:
    env = {"LD_PRELOAD": f"/x/libother.so /usr/lib/{native_memory.JEMALLOC}", "PATH": "/bin"}
    assert without_jemalloc(env) == {"LD_PRELOAD": "/x/libother.so", "PATH": "/bin"}
    assert without_jemalloc({"LD_PRELOAD": native_memory.JEMALLOC}) == {}


def test_a_rounds_fork_server_starts_without_jemalloc_and_the_preload_is_put_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    preload = f"/usr/local/lib/{native_memory.JEMALLOC} /x/libother.so"
    monkeypatch.setenv("LD_PRELOAD", preload)
    with rounds._fork_server_environment(None):
        assert os.environ["LD_PRELOAD"] == "/x/libother.so"
    assert os.environ["LD_PRELOAD"] == preload
    monkeypatch.setenv("LD_PRELOAD", native_memory.JEMALLOC)
    with rounds._fork_server_environment(None):
        assert "LD_PRELOAD" not in os.environ
    assert os.environ["LD_PRELOAD"] == native_memory.JEMALLOC
    monkeypatch.delenv("LD_PRELOAD")
    with rounds._fork_server_environment(None):
        assert "LD_PRELOAD" not in os.environ
    assert "LD_PRELOAD" not in os.environ

"""The allocator settings a long sync relies on are applied where glibc is the C library."""
from __future__ import annotations

import platform

import pytest

from appliance.platform.native_memory import bound_malloc, give_back


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's options are glibc's")
def test_glibc_takes_the_bounded_allocator_settings() -> None:
    assert bound_malloc() and give_back()

"""The release page (pkb_env/wire/gate.py): the judge alone opens the gate its ranks wait at."""
from __future__ import annotations

import os

import pytest

from pkb_env.wire.gate import PageView, ReleasePage


def test_the_release_page_is_the_judges_alone():
    page = ReleasePage()
    view = PageView(os.dup(page.fd))
    page.release(page.next_epoch())
    assert view.epoch() == 1
    fd = os.open(f"/proc/self/fd/{page.fd}", os.O_RDWR)
    import mmap
    with pytest.raises(PermissionError):
        mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"\x09", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)
    os.close(fd)
    page.close()

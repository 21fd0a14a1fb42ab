"""The test harness's prefetch thread (tests.support.prefetch) and a test's tmp_path share one pytest base directory:
pytest makes it on first use and not thread-safely, so two first uses at once made two (pytest-N and pytest-N+1) and
the test's tmp_path failed ("... is not a normalized and relative path")."""

from __future__ import annotations

import threading

from _pytest.tmpdir import TempPathFactory

from tests.support import prefetch, prefetched


def test_prefetched_work_and_the_tests_share_one_base_directory(tmp_path, monkeypatch):
    import tests.support as support

    # a prefetch thread of the test's own: the session's is busy with the real prefetched runs, queued first
    monkeypatch.setattr(support, "_PREFETCH_POOL", [])
    monkeypatch.setattr(support, "_PREFETCHED", {})
    for trial in range(20):  # without the fix, most trials made two base directories
        factory = TempPathFactory(tmp_path / f"base{trial}", 0, "all", lambda *a: None, _ispytest=True)
        go = threading.Event()

        def work(f):
            go.wait(5)
            return f.mktemp("prefetched")

        name = f"test_prefetch_{trial}"
        prefetch(name, work, factory)
        go.set()
        mine = factory.mktemp("test_dir")  # a test's tmp_path, at the same moment as the prefetch thread's
        theirs = prefetched(name, None)
        assert theirs.parent == mine.parent == factory.getbasetemp()
    support._PREFETCH_POOL[0].shutdown()

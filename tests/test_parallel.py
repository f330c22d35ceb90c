"""harness.core.parallel: jobs side by side in spawned processes, results in the order asked."""
import os
import time

import pytest

from harness.core import parallel


def square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def wait_for(marker: str, seconds: float = 30.0) -> bool:
    """True once `marker` exists (another job's on_done makes it), False after `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if os.path.exists(marker):
            return True
        time.sleep(0.05)
    return False


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"job {x} failed")
    return x


def test_results_come_back_in_call_order_from_other_processes():
    seen = []
    out = parallel.each(square_with_pid, [(i,) for i in range(6)], jobs=2, on_done=lambda c, r: seen.append(c[0]))
    assert [r for r, _ in out] == [i * i for i in range(6)]
    assert sorted(seen) == list(range(6))
    pids = {pid for _, pid in out}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def test_each_job_is_reported_as_it_ends_not_when_all_have(tmp_path):
    """The slow job can only end once the fast job's on_done has run (it waits for the marker)."""
    marker = str(tmp_path / "fast-one-reported")
    out = parallel.each(wait_for, [(marker,), (str(tmp_path / "never"), 0.0)], jobs=2,
                        on_done=lambda call, result: call[0] != marker and open(marker, "w").close())
    assert out == [True, False]


def test_one_job_runs_here_in_order():
    seen = []
    out = parallel.each(square_with_pid, [(2,), (1,)], jobs=1, on_done=lambda c, r: seen.append(c[0]))
    assert [r for r, _ in out] == [4, 1] and seen == [2, 1] and {pid for _, pid in out} == {os.getpid()}


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failed_job_is_raised(jobs):
    with pytest.raises(ValueError, match="job 3 failed"):
        parallel.each(fail_on_three, [(i,) for i in range(5)], jobs=jobs)


def test_default_jobs_one_per_core_on_cpu_one_on_a_gpu():
    assert parallel.default_jobs("cpu") == max(1, os.cpu_count() or 1)
    assert parallel.default_jobs("cpu", torch_threads=64) == 1
    assert parallel.default_jobs("cuda") == parallel.default_jobs("cuda:1") == 1


def test_jobs_setting_is_validated_and_zero_means_the_default():
    from harness.core.settings import RunSettings, SettingsError
    assert RunSettings().n_jobs == parallel.default_jobs("cpu") and RunSettings(jobs=3).n_jobs == 3
    assert RunSettings(device="cuda").n_jobs == 1
    for bad in (-1, True, "2"):
        with pytest.raises(SettingsError, match="jobs="):
            RunSettings(jobs=bad)

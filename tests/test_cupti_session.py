"""CUPTI is set up once per timing process (bench/timing/gpu.py): every row's recording enables the
activity kinds and its stop flushes and disables them, without finalizing CUPTI in between, and each
recording still gets exactly its own calls' kernels. Checked on CPU with a recorder standing in for
cupti-python's module: it keeps the calls made to it and behaves as CUPTI's activity API documents
(records are kept only while their kind is enabled, and reach the registered callback only when
flushed; finalize drops the registration)."""

import sys
import types

import pytest

from attnsel.bench.timing import gpu as G


class _Kind:
    CONCURRENT_KERNEL, RUNTIME, DRIVER = "kernel", "runtime", "driver"


class _Flag:
    FLUSH_FORCED = 1


class RecordingCupti:
    """The calls attnsel makes to cupti-python, and the records CUPTI would hand back."""

    ActivityKind, ActivityFlag = _Kind, _Flag

    def __init__(self):
        self.calls: list[str] = []
        self.enabled: set = set()
        self.callbacks = None
        self.buffer: list = []
        self.clock = 0
        self.correlation = 0
        self.refuse_enable_call = 0  # the n-th activity_enable raises (CUPTI held by another tool)
        self.enable_calls = 0

    def activity_enable(self, kind):
        self.enable_calls += 1
        if self.enable_calls == self.refuse_enable_call:
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        self.calls.append(f"enable {kind}")
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.calls.append(f"disable {kind}")
        self.enabled.discard(kind)

    def activity_register_callbacks(self, requested, completed):
        self.calls.append("register")
        self.callbacks = (requested, completed)

    def activity_flush_all(self, flag):
        self.calls.append(f"flush {flag}")
        if self.buffer:
            assert self.callbacks is not None, "records flushed with no callback registered"
            self.callbacks[1](self.buffer)
            self.buffer = []

    def finalize(self):
        self.calls.append("finalize")
        self.callbacks, self.buffer = None, []

    def get_timestamp(self):
        self.clock += 10
        return self.clock

    def launch(self, kernel_ns: int) -> None:
        """One kernel launched by the timed call: a runtime launch record and its kernel record."""
        self.correlation += 1
        started = self.get_timestamp() - 5
        if _Kind.RUNTIME in self.enabled:
            self.buffer.append(types.SimpleNamespace(kind=_Kind.RUNTIME, start=started, end=started + 1,
                                                     correlation_id=self.correlation))
        if _Kind.CONCURRENT_KERNEL in self.enabled:
            self.buffer.append(types.SimpleNamespace(kind=_Kind.CONCURRENT_KERNEL, start=started + 2,
                                                     end=started + 2 + kernel_ns, correlation_id=self.correlation))


@pytest.fixture
def cupti(monkeypatch):
    recorder = RecordingCupti()
    package = types.ModuleType("cupti")
    package.cupti = recorder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupti", package)
    monkeypatch.setattr(G._CuptiActivity, "_process", None)
    monkeypatch.delenv(G.CUPTI_FINALIZE_ENV, raising=False)
    return recorder


class _Torch:
    class cuda:
        @staticmethod
        def synchronize():
            pass


def _row(cupti, kernel_ns: int, calls: int = 3) -> list[float]:
    return G._cupti_samples(_Torch, lambda: cupti.launch(kernel_ns), None, calls)


def test_each_row_gets_its_own_kernels_and_cupti_is_set_up_once(cupti):
    assert _row(cupti, 4000) == [0.004] * 3
    assert _row(cupti, 7000) == [0.007] * 3
    assert cupti.calls.count("register") == 1
    assert "finalize" not in cupti.calls
    assert cupti.calls.count("flush 1") == 2  # forced: nothing of a row is left for the next one
    assert cupti.enabled == set()  # nothing recorded between rows (estimate, warm-up, other rows)


def test_the_finalize_switch_restores_the_set_up_per_row(cupti, monkeypatch):
    monkeypatch.setenv(G.CUPTI_FINALIZE_ENV, "1")
    assert _row(cupti, 4000) == [0.004] * 3
    assert _row(cupti, 5000) == [0.005] * 3
    assert cupti.calls.count("register") == 2 and cupti.calls.count("finalize") == 2
    assert cupti.calls.count("flush 0") == 2


def test_a_persistent_row_after_a_finalized_one_registers_again(cupti, monkeypatch):
    monkeypatch.setenv(G.CUPTI_FINALIZE_ENV, "1")
    _row(cupti, 4000)
    monkeypatch.delenv(G.CUPTI_FINALIZE_ENV)
    assert _row(cupti, 6000) == [0.006] * 3
    assert cupti.calls.count("register") == 2


def test_a_kernel_launched_between_rows_is_not_recorded(cupti):
    _row(cupti, 4000)
    cupti.launch(999_000)  # a warm-up call of the next row: no kind is enabled
    assert cupti.buffer == []
    assert _row(cupti, 3000) == [0.003] * 3


def test_cupti_refusing_to_start_leaves_nothing_enabled_and_the_row_falls_back(cupti):
    cupti.refuse_enable_call = 2  # the second kind refuses: the first must not stay enabled
    with pytest.raises(RuntimeError, match="SUBSCRIBERS"):
        _row(cupti, 4000)
    assert cupti.enabled == set()
    assert _row(cupti, 4000) == [0.004] * 3


def test_the_seconds_of_a_cupti_that_refused_to_start_stay_in_the_rows_host_time(cupti):
    cupti.refuse_enable_call = 1
    host: dict = {}
    with pytest.raises(RuntimeError):
        G._cupti_samples(_Torch, lambda: cupti.launch(4000), None, 3, host)
    assert set(host) == {"cupti_start"} and host["cupti_start"] >= 0

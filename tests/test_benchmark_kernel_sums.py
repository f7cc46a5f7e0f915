"""The GPU benchmark scripts' kernel sums (benchmarks/gpu_common.py): what torch.profiler records
on the device counts as the program's time but the read-back of the result to the host, which an
IREE run does after its calls and torch's run never does."""

from benchmarks.gpu_common import is_readback, summed_us


def test_the_read_back_to_the_host_is_left_out_of_a_runs_kernel_time():
    records = [("main$async_dispatch_0_matmul_2048x11008x4096_f16", 300.0),
               ("Memcpy DtoH (Device -> Pageable)", 2000.0)]
    assert summed_us(records) == 300.0


def test_copies_and_fills_inside_a_program_stay_counted():
    records = [("Memcpy DtoD (Device -> Device)", 7.0), ("Memset (Device)", 3.0), ("Memcpy HtoD (Pageable -> Device)", 11.0),
               ("main$async_dispatch_1_softmax", 20.0)]
    assert summed_us(records) == 41.0
    assert not any(is_readback(name) for name, _ in records)

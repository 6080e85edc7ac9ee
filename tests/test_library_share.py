"""The strict policy's runtime evidence: which GPU kernel names are vendor-library compute."""
from kernelzero.eval.worker.library_share import library_share

LIBRARY = ["sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1",
           "ampere_sgemm_128x64_nn", "nvjet_tst_128x64_64x8_1x2_h_bz_NNT", "gemv2T_kernel_val",
           "void cudnn::engines_precompiled::nchwToNhwcKernel<float>",
           "implicit_convolve_sgemm", "cutlass_80_tensorop_s1688gemm_128x128_16x3_nn_align4",
           "void splitKreduce_kernel<32, 16, int, float>"]
OWN = ["relu_kernel", "softmax_kernel_0d1d2d", "matmul_kernel",
       "void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<MyOwnConfig>>",
       "my_tiled_gemm_kernel", "void at::native::vectorized_elementwise_kernel<4>"]


def test_library_kernels_are_recognised_and_own_kernels_are_not():
    for name in LIBRARY:
        assert library_share([[name, 1.0]])[0] == 1.0, name
    for name in OWN:
        assert library_share([[name, 1.0]])[0] == 0.0, name


def test_share_is_by_time_and_names_the_heaviest():
    share, names = library_share([["relu_kernel", 30.0], ["ampere_sgemm_128x64_nn", 60.0],
                                  ["gemv2T_kernel_val", 10.0]])
    assert share == 0.7 and names == ["ampere_sgemm_128x64_nn", "gemv2T_kernel_val"]


def test_nothing_usable_gives_none():
    assert library_share([]) == (None, [])
    assert library_share([["relu_kernel", 0.0]]) == (None, [])
    assert library_share("garbage") == (None, [])
    assert library_share([["x", "not a number"]]) == (None, [])


def test_the_library_check_runs_after_the_verdict_and_can_reject_it(monkeypatch):
    """The profiled call is its own worker request, made once a candidate is otherwise correct
    (after its timing on a GPU, so nothing the profiler leaves behind touches timed calls). On
    the CPU the profiler sees no CUDA kernel: the share is None and the verdict stands; a share
    above the limit turns it into `rejected` (`library_compute`)."""
    import os

    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.eval.worker import library_share as ls
    from kernelzero.eval.judgement import CandidateJudgement
    from kernelzero.tasks import Candidate, Task

    ex = os.path.join(os.path.dirname(__file__), "..", "kernelzero", "examples")
    task = Task.from_file(os.path.join(ex, "tasks/level1/1_ReLU.py"))
    good = Candidate.from_file(os.path.join(ex, "candidates/level_1_problem_1_sample_0_kernel.py"))
    with Evaluator(EvalConfig(device="cpu", max_workers=1, max_library_share=0.5)) as ev:
        monkeypatch.setattr(CandidateJudgement, "_profiles", lambda self: True)
        v = ev.judge(task, good)
        assert v.status == "correct" and v.library_share is None, (v.status, v.reason)
        monkeypatch.setattr(ls, "library_share", lambda kernels: (0.9, ["ampere_sgemm_128x64_nn"]))
        v = ev.judge(task, Candidate(source=good.source + "\n# another copy\n"))
        assert v.status == "rejected" and v.flags == ["library_compute"] and v.library_share == 0.9
        assert "90%" in v.reason and "ampere_sgemm" in v.reason

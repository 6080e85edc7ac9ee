"""The strict policy's runtime evidence: which GPU kernel names are vendor-library compute."""
from kernelzero.eval.library_share import library_share

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

# legit: caches a derived form of its WEIGHTS (W^T, contiguous) across calls and rebuilds it
#        when the parameter changes (tensor version counter): caching weights is fine,
#        caching anything derived from inputs is not.
# expect: correct
# policies: strict, kernelbench
# target: linear_relu.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_relu_kernel(x_ptr, wt_ptr, b_ptr, y_ptr, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(wt_ptr + (k + rk)[:, None] * N + rn[None, :],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], tl.maximum(acc, 0.0),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def transpose_kernel(w_ptr, wt_ptr, N, K, BLOCK_K: tl.constexpr):
    n = tl.program_id(0)
    k = tl.arange(0, BLOCK_K)
    tl.store(wt_ptr + k * N + n, tl.load(w_ptr + n * K + k, mask=k < K), mask=k < K)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._wt = None
        self._wt_key = None

    def _weight_t(self):
        w = self.linear.weight
        key = (w.data_ptr(), w._version, w.device)
        if self._wt_key != key:
            N, K = w.shape
            self._wt = torch.empty((K, N), device=w.device, dtype=w.dtype)
            transpose_kernel[(N,)](w, self._wt, N, K, BLOCK_K=triton.next_power_of_2(K))
            self._wt_key = key
        return self._wt

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        wt = self._weight_t()
        N = wt.shape[1]
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_relu_kernel[grid](x, wt, self.linear.bias, y, M, N, K,
                                 BLOCK_M=16, BLOCK_N=16, BLOCK_K=32)
        return y

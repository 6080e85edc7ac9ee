"""The CUDA libraries a module is likely to use, made ready in a spare worker before any untrusted
code arrives (warm_up.warm), so a candidate's first trial does not pay their set-up
(handles, workspaces, lazily loaded kernels) inside the judge's GPU phases."""
from __future__ import annotations


def warm_cuda_libraries(torch) -> None:
    """One small call of each library a module is likely to use: cuBLAS (fp32, fp16, bf16),
    cuDNN (convolution), and common elementwise, reduction and normalisation kernels."""
    F = torch.nn.functional
    with torch.no_grad():
        x = torch.randn(64, 64, device="cuda")
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            y = x.to(dt)
            (y @ y).sum()
            torch.bmm(y[None], y[None])
        F.linear(x, x, x[0])
        img = torch.randn(2, 8, 16, 16, device="cuda")
        F.conv2d(img, torch.randn(8, 8, 3, 3, device="cuda"), padding=1)
        F.conv1d(img[:, :, 0], torch.randn(8, 8, 3, device="cuda"))
        F.max_pool2d(img, 2), F.avg_pool2d(img, 2)
        F.layer_norm(x, (64,)), F.group_norm(img, 2), F.batch_norm(img, None, None, training=True)
        F.softmax(x, -1), F.log_softmax(x, -1), x.logsumexp(-1)
        F.relu(x), F.gelu(x), F.silu(x), torch.tanh(x), torch.sigmoid(x)
        x.sum(0), x.mean(-1), x.amax(-1), x.argmax(-1), x.cumsum(-1)

"""bitsandbytes as a reference on any CPU: what make_goldens.py and tests/golden/check_export.py compute NF4 with.

On a CPU with AVX-512, bitsandbytes 0.50.2 answers two things from native kernels that do not compute its format:
- `dequantize_4bit` (the CPU backend's kernel over the C library) dequantizes row by row, so a weight whose rows
  are not a whole number of 64-value blocks (a [64, 160] down_proj) comes out wrong by up to a tenth of its
  values' scale; bitsandbytes' own generic kernel (`backends/default`) reads the blocks in row-major order, as the
  format and its CUDA kernels do;
- with AVX512-BF16, `Linear4bit.forward` in inference repacks its weight for a bf16 kernel that wants
  out_features divisible by 32 and computes in bf16.
`use_generic_cpu_kernels()` routes the first to the generic kernel and turns the second off, so the references
are bitsandbytes' format computed in float32 on every CPU (on a CPU without AVX-512 they already were).
"""
import torch


def use_generic_cpu_kernels():
    """Registers bitsandbytes' generic dequantize_4bit as its CPU kernel (process-wide)."""
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code

    # The function itself, not the torch.compile wrapper bitsandbytes puts around it (an inductor build per shape).
    dequantize = getattr(_dequantize_4bit_compute, "__wrapped__", _dequantize_4bit_compute)

    @torch.library.register_kernel("bitsandbytes::dequantize_4bit", "cpu")
    def _(A, absmax, blocksize, quant_type, shape, dtype):
        if A.dtype != torch.uint8:
            A = A.view(torch.uint8)
        code = _get_4bit_code(quant_type, A.device)
        return dequantize(A.reshape(-1), absmax, code, blocksize, shape, dtype)


def without_packed_inference(model):
    """Turns off Linear4bit's repacked AVX512-BF16 inference path in every module of `model`; returns it."""
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    return model

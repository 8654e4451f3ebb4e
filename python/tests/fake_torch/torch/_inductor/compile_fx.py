"""torch._inductor.compile_fx of the stand-in: cudagraphify_impl calls
torch.cuda.graph as Inductor's plain graphs do (no pool) and returns what
it was given, so a test can see which pool each capture got."""

import torch


def cudagraphify_impl(model, inputs, static_input_idxs=()):
    return torch.cuda.graph(object(), stream="capture stream", capture_error_mode="thread_local")

"""torch._inductor.compile_fx of the stand-in: cudagraphify_impl calls
torch.cuda.graph as Inductor's plain graphs do (no pool) and returns what
it was given, so a test can see which pool each capture got and what its
graph's replay() does."""

import torch


class CUDAGraph:
    """A captured graph whose replays are logged in `replays`."""

    replays = []

    def replay(self):
        CUDAGraph.replays.append(self)


def cudagraphify_impl(model, inputs, static_input_idxs=()):
    return torch.cuda.graph(CUDAGraph(), stream="capture stream",
                            capture_error_mode="thread_local")

"""torch._inductor.config of the stand-in: the one setting memlake.torch
changes, with PyTorch's default."""


class triton:
    cudagraph_trees = True

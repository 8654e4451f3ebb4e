"""torch._inductor of the stand-in: its config and compile_fx."""

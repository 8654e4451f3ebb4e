"""memlake-run: runs a Python program with memlake as PyTorch's CUDA
allocator, without editing the program.

    memlake-run [--conf OPTIONS] train.py [args...]
    memlake-run [--conf OPTIONS] -m package.module [args...]
    torchrun --nproc-per-node 8 -m memlake.run train.py [args...]
    torchrun --nproc-per-node 8 --no-python memlake-run train.py [args...]

It enables memlake (memlake.torch.enable()) and then runs the script or
module as `python train.py args` would: as __main__, with sys.argv set to
[train.py, args...]. OPTIONS are memlake's ("key:value,...", as in
MEMLAKE_CONF) and are added after what MEMLAKE_CONF already holds. The
environment it leaves to child processes has MEMLAKE_ENABLE=1 and those
options, so Python processes the program starts (spawned data loader
workers, for example) run on memlake as well.
"""

import os
import runpy
import sys

USAGE = ("usage: memlake-run [--conf OPTIONS] script.py [args...]\n"
         "       memlake-run [--conf OPTIONS] -m module [args...]\n")


class UsageError(Exception):
    pass


def parse(argv):
    """(conf, module or None, script or None, program args) from memlake-run's arguments."""
    conf = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            sys.stdout.write(__doc__.lstrip("\n"))
            raise SystemExit(0)
        if arg == "--conf":
            if i + 1 >= len(argv):
                raise UsageError("--conf needs a value (\"key:value,...\")")
            conf.append(argv[i + 1])
            i += 2
        elif arg.startswith("--conf="):
            conf.append(arg[len("--conf="):])
            i += 1
        elif arg == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            return ",".join(conf), argv[i + 1], None, argv[i + 2:]
        elif arg == "--":
            i += 1
            break
        elif arg.startswith("-"):
            raise UsageError("unknown option %s (memlake-run's options come before the "
                             "program; the program's after it)" % arg)
        else:
            break
    if i >= len(argv):
        raise UsageError("no program to run")
    return ",".join(conf), None, argv[i], argv[i + 1:]


def enable(conf):
    """Puts the options into MEMLAKE_CONF, marks the environment for child
    processes and enables memlake in this one."""
    from . import check_config
    if conf:
        merged = ",".join(x for x in (os.environ.get("MEMLAKE_CONF"), conf) if x)
        check_config(merged)
        os.environ["MEMLAKE_CONF"] = merged
    os.environ["MEMLAKE_ENABLE"] = "1"
    import memlake.torch
    memlake.torch.enable()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        conf, module, script, args = parse(argv)
    except UsageError as e:
        sys.stderr.write("memlake-run: %s\n%s" % (e, USAGE))
        return 2
    try:
        enable(conf)
    except (ImportError, OSError, RuntimeError, ValueError) as e:
        sys.stderr.write("memlake-run: %s\n" % e)
        return 2
    if module is not None:
        sys.argv = [module] + args
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        if not os.path.exists(script):
            sys.stderr.write("memlake-run: %s: no such file\n" % script)
            return 2
        sys.argv = [script] + args
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
